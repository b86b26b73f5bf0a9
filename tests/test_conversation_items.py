"""Conversation items: the message model (OpenAI and LangChain shapes), its checks, and what EvalItem accepts."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from pydantic import ValidationError

from jurygraph.judging.conversations import Message, ToolCall, assistant_turns, parse_messages
from jurygraph.judging.items import EvalItem
from jurygraph.judging.state import coerce_item

SCALE = {"low": 1, "high": 5}

TRAJECTORY = [
    {"role": "system", "content": "You are a travel agent."},
    {"role": "user", "content": "Book me a flight to Oslo."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "search_flights", "arguments": '{"to": "OSL"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "SK123 at 09:10"},
    {"role": "assistant", "content": "SK123 leaves at 09:10. Book it?"},
    {"role": "user", "content": "Yes."},
    {"role": "assistant", "content": "Booked."},
]


def test_tool_calls_in_either_shape_are_one_call() -> None:
    openai = ToolCall.model_validate(
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": [1, 2]}'}})
    langchain = ToolCall.model_validate({"name": "f", "args": {"a": [1, 2]}, "id": "c", "type": "tool_call"})
    assert openai == langchain == ToolCall(id="c", name="f", arguments={"a": [1, 2]})
    assert ToolCall.model_validate(openai.openai()) == openai
    with pytest.raises(ValidationError, match="arguments are not JSON"):
        ToolCall.model_validate({"id": "c", "function": {"name": "f", "arguments": "{a: 1"}})
    with pytest.raises(ValidationError, match="must be a JSON object"):
        ToolCall.model_validate({"id": "c", "function": {"name": "f", "arguments": "[1]"}})


def test_langchain_messages_read_as_openai_messages() -> None:
    messages = parse_messages([
        SystemMessage("be brief"), HumanMessage("2+2?"),
        AIMessage("", tool_calls=[{"name": "calc", "args": {"x": "2+2"}, "id": "t1"}]),
        ToolMessage("4", tool_call_id="t1", name="calc"), AIMessage("4"),
    ], item="x")
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[2].content is None and messages[2].tool_calls == [ToolCall(id="t1", name="calc",
                                                                                arguments={"x": "2+2"})]
    assert messages[3] == Message(role="tool", content="4", tool_call_id="t1", name="calc")
    # LangChain's role names in dict form, and metadata keys that say nothing about the conversation
    assert Message.model_validate({"type": "human", "content": "hi", "id": "m1", "response_metadata": {}}) == \
        Message(role="user", content="hi")


def test_a_message_that_is_not_one_is_named_by_item_field_and_index() -> None:
    with pytest.raises(ValidationError, match=r"item 'q7': messages\[1\]: role"):
        EvalItem(id="q7", task="score", scale=SCALE, messages=[{"role": "user", "content": "a"},
                                                               {"role": "bot", "content": "b"}])
    with pytest.raises(ValidationError, match=r"item 'q7': messages\[2\]: a tool message answers tool call 'nope'"):
        EvalItem(id="q7", task="score", scale=SCALE, messages=[
            *TRAJECTORY[1:3], {"role": "tool", "tool_call_id": "nope", "content": "x"}])
    with pytest.raises(ValidationError, match=r"item 'q7': messages_2\[0\]: a user message needs content"):
        EvalItem(id="q7", task="pairwise", messages_1=TRAJECTORY, messages_2=[{"role": "user"}])
    with pytest.raises(ValidationError, match="only an assistant message can"):
        Message.model_validate({"role": "user", "content": "x", "tool_calls": [{"name": "f", "id": "1"}]})
    with pytest.raises(ValidationError, match="needs 'tool_call_id'"):
        Message.model_validate({"role": "tool", "content": "x"})
    with pytest.raises(ValidationError, match="'audio' is not supported"):
        Message.model_validate({"role": "assistant", "content": "x", "audio": {"id": "a"}})


def test_content_parts_and_refusals() -> None:
    message = Message.model_validate({"role": "user", "content": [
        {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "data:,"}}]})
    assert message.text == "What is this?\n\n[image_url]"
    assert Message.model_validate({"role": "assistant", "content": None, "refusal": "I can't."}).text == "I can't."


def test_assistant_turns_group_tool_calls_with_their_results() -> None:
    messages = parse_messages(TRAJECTORY, item="t")
    assert assistant_turns(messages) == [(2, 5), (6, 7)]
    # a greeting before the first user message is a turn; a trailing user message is not
    greeting = parse_messages([{"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "Hello"}],
                              item="g")
    assert assistant_turns(greeting) == [(0, 1)]


def test_a_score_item_with_messages_needs_no_response() -> None:
    item = EvalItem(id="s", task="score", scale=SCALE, messages=TRAJECTORY, steps=["agent", ["tools"], "agent"],
                    turn=2)
    assert item.conversational and item.response is None
    assert item.question == "Book me a flight to Oslo."  # derived from the first user message
    assert item.steps == [["agent"], ["tools"], ["agent"]]
    # the state channel keeps its JSON form and reads it back to the same item
    assert EvalItem.model_validate(coerce_item(None, item)) == item
    with pytest.raises(ValidationError, match="turn 3 asked, but messages has 2 assistant turns"):
        EvalItem(id="s", task="score", scale=SCALE, messages=TRAJECTORY, turn=3)
    with pytest.raises(ValidationError, match="not both"):
        EvalItem(id="s", task="score", scale=SCALE, messages=TRAJECTORY, response="x")
    with pytest.raises(ValidationError, match="'turn' belongs to a conversation item"):
        EvalItem(id="s", task="score", scale=SCALE, response="x", turn=1)
    with pytest.raises(ValidationError, match=r"'messages_1'/'messages_2' .* belong to a pairwise item"):
        EvalItem(id="s", task="score", scale=SCALE, messages=TRAJECTORY, messages_1=TRAJECTORY)


def test_a_message_that_only_calls_tools_has_no_content_whatever_form_said_so() -> None:
    """LangChain's objects say None, its dict form (``message_to_dict``, LangSmith exports) "", OpenAI null, some
    servers []: one Message, so the same message read from two sources compares (and is cached) equal."""
    call = {"name": "weather", "args": {"city": "Oslo"}, "id": "w"}
    forms = [AIMessage("", tool_calls=[call]), AIMessage([], tool_calls=[call]),
             {"type": "ai", "content": "", "tool_calls": [call]},
             {"role": "assistant", "content": [], "tool_calls": [call]},
             {"role": "assistant", "content": None, "tool_calls": [{"id": "w", "type": "function", "function": {
                 "name": "weather", "arguments": '{"city": "Oslo"}'}}]}]
    read = [Message.model_validate(form) for form in forms]
    assert all(message == read[0] for message in read) and read[0].content is None and read[0].text == ""
    assert Message.model_validate({"role": "assistant", "content": ""}).content == ""  # no call: its (empty) text
    with pytest.raises(ValidationError, match="a user message needs content"):
        Message.model_validate({"role": "user", "content": None})


def test_a_pairwise_item_with_two_continuations() -> None:
    prefix = TRAJECTORY[:2]
    one = [{"role": "assistant", "content": "", "tool_calls": [{"name": "search_flights", "args": {"to": "OSL"},
                                                                 "id": "call_1"}]},
           {"role": "tool", "tool_call_id": "call_1", "content": "SK123"}, {"role": "assistant", "content": "SK123"}]
    two = [{"role": "assistant", "content": "I cannot book flights."}]
    item = EvalItem(id="p", task="pairwise", messages=prefix, messages_1=one, messages_2=two,
                    steps_1=[["agent"], ["tools"], ["agent"]], human={"label": "model_a"},
                    meta={"model_1": "a", "model_2": "b"})
    assert item.question == "Book me a flight to Oslo." and item.human == {"label": "1"}
    swapped = item.swapped()
    assert swapped.messages_1 == item.messages_2 and swapped.messages_2 == item.messages_1
    assert swapped.steps_2 == item.steps_1 and swapped.steps_1 is None and swapped.human == {"label": "2"}
    assert swapped.messages == item.messages
    # a continuation's tool message may answer a call of the shared prefix, not one of the other continuation
    with pytest.raises(ValidationError, match=r"messages_2\[0\]: a tool message answers tool call 'call_1'"):
        EvalItem(id="p", task="pairwise", messages=prefix, messages_1=one,
                 messages_2=[{"role": "tool", "tool_call_id": "call_1", "content": "x"}])
    with pytest.raises(ValidationError, match="needs both 'messages_1' and 'messages_2'"):
        EvalItem(id="p", task="pairwise", messages=prefix, messages_1=one)
    with pytest.raises(ValidationError, match="'messages_1'/'messages_2' or 'response_1', not both"):
        EvalItem(id="p", task="pairwise", messages_1=one, messages_2=two, response_1="x", question="q")


def test_plain_items_are_unchanged() -> None:
    item = EvalItem(id="x", task="pairwise", question="q", response_1="a", response_2="b")
    assert not item.conversational
    assert coerce_item(None, item) == {"id": "x", "task": "pairwise", "question": "q", "response_1": "a",
                                       "response_2": "b", "meta": {}}


# --- rendering ---------------------------------------------------------------------------------------------------


def test_a_message_renders_with_its_role_tool_calls_and_results() -> None:
    from jurygraph.judging.conversations import message_text

    call = Message.model_validate(TRAJECTORY[2])
    assert message_text(call) == '### Assistant:\n[calls search_flights with {"to": "OSL"} (call call_1)]'
    result = Message.model_validate(TRAJECTORY[3])
    assert message_text(result, {"call_1": "search_flights"}) == \
        "### Tool result of search_flights (call call_1):\nSK123 at 09:10"
    assert message_text(Message(role="system", content="Be brief.")) == \
        "### System (instructions to the assistant):\nBe brief."
    assert message_text(Message(role="user", content="hi", name="ana")) == "### User (ana):\nhi"


def test_the_budget_elides_the_middle_of_each_block_first_and_says_how_many() -> None:
    from jurygraph.judging.conversations import ContextBudgetExceeded, conversation_block, fit_blocks

    messages = parse_messages([{"role": "user", "content": "task"}] + [
        {"role": "assistant" if i % 2 else "user", "content": f"message {i} " + "word " * 20} for i in range(1, 11)],
        item="long")
    words = len  # one "token" a character: exact arithmetic
    block = conversation_block(messages, judged=(10, 11))
    whole = fit_blocks([conversation_block(messages, judged=(10, 11))], None, words)
    assert "elided" not in whole
    text = fit_blocks([block], len(whole) - 200, words)
    assert len(text) <= len(whole) - 200
    kept = [i for i in range(1, 11) if f"message {i} " in text]
    # the middle went first: what is left is both ends (the task, the turn judged and the message it answers)
    assert kept[0] == 1 and kept[-2:] == [9, 10] and "[… " in text
    missing = [i for i in range(1, 11) if i not in kept]
    assert missing == list(range(missing[0], missing[-1] + 1))  # one run
    assert f"[… {len(missing)} messages elided …]" in text
    with pytest.raises(ContextBudgetExceeded, match="item 'long'"):
        fit_blocks([conversation_block(messages, judged=(10, 11))], 50, words, item="long")


def test_per_turn_diagram(snapshot) -> None:
    from jurygraph import create_single_agent
    from jurygraph.graphs.turns import per_turn

    assert per_turn(create_single_agent()).compile().get_graph().draw_mermaid() == snapshot
