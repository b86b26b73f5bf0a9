"""DEBATE: the loop of Algorithm 1 with scripted Scorer and Critic -- what each agent saw, how many
calls each made, how the debate ended and which score is final; personas, templates, missing scores,
resume from a checkpoint, and the diagram."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver

import jurygraph.prompts
from jurygraph import EvalItem, JuryContext, create_debate, verdict_of
from jurygraph.nodes.debate import CriticPersona, debate_prompt, frame_task
from jurygraph.running.datasets import load_dataset
from jurygraph.testing import FakeJudge

ITEM = load_dataset("summeval", aspect="coherence").items[0]
SCORES = [2, 3, 4, 5, 4]  # what the Scorer says at its 1st, 2nd, ... reply
TIE_BREAKER_SCORE = 1  # differs from every Scorer score, so the test knows who decided
STRICT = debate_prompt("critic_strict")


def scorer_reply(k: int) -> str:
    return f"Rationale r{k}: the summary jumps between topics.\n- Coherence: {SCORES[k]}"


def replies_so_far(messages: Sequence[BaseMessage]) -> int:
    return sum(isinstance(m, AIMessage) for m in messages)


def scorer(prompt: str, messages: Sequence[BaseMessage]) -> str:
    return scorer_reply(replies_so_far(messages))


def critic_saying_no_issue_at(k: int | None):
    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        i = replies_so_far(messages) + 1  # this is the Critic's i-th review
        return "NO ISSUE." if i == k else f"Issue {i}: the score ignores point {i} of the article."

    return respond


def tie_breaker(prompt: str, messages: Sequence[BaseMessage]) -> str:
    return f"The Critic is right about the repetition.\n- Coherence: {TIE_BREAKER_SCORE}"


def nobody_else() -> FakeJudge:
    """The default model: any call not routed to Scorer/Critic/Tie-breaker (e.g. by the Commander) fails."""
    return FakeJudge(fail_when=lambda prompt: True, model_name="unexpected-agent")


def expected_nodes(k: int | None, n: int, tie: bool) -> list[str]:
    """Algorithm 1 written out: the node sequence for NO ISSUE at iteration k (None = never)."""
    nodes = ["commander", "scorer"]  # P <- C(T, A); Score <- S(P)
    for i in range(1, n + 1):
        nodes += ["commander", "critic"]  # C.send(P, Score, to=Cr); Feedback <- Cr(Score)
        if i == k:
            return [*nodes, "commander", "finalize"]  # break
        nodes += ["commander", "scorer"]  # C.send(Feedback, to=S); Score <- S(Feedback)
    return [*nodes, "commander", *(["tie_breaker"] if tie else []), "finalize"]


def run(graph: Any, item: EvalItem, context: JuryContext) -> tuple[list[str], dict[str, Any]]:
    """Invoke, recording the order in which nodes ran; returns (nodes, final state)."""
    nodes: list[str] = []
    state: dict[str, Any] = {}
    for mode, chunk in graph.stream({"item": item}, context=context, stream_mode=["updates", "values"]):
        if mode == "updates":
            nodes += list(chunk)
        else:
            state = chunk
    return nodes, state


CASES = [  # (NO ISSUE at iteration k or never, tie-breaker?)
    pytest.param(1, False, id="no-issue-at-1"),
    pytest.param(3, False, id="no-issue-at-3"),
    pytest.param(None, False, id="never"),
    pytest.param(None, True, id="never-tie-breaker"),
    pytest.param(3, True, id="no-issue-at-3-tie-breaker-unused"),
]


@pytest.mark.parametrize(("k", "tie"), CASES)
def test_the_loop_of_algorithm_1(k: int | None, tie: bool) -> None:
    n = 4
    s, c, t = FakeJudge(respond=scorer), FakeJudge(respond=critic_saying_no_issue_at(k)), FakeJudge(respond=tie_breaker)
    graph = create_debate(max_iterations=n, tie_breaker=tie).compile()
    context = JuryContext(models={"Scorer": s, "Critic": c, "Tie-breaker": t}, default=nobody_else())
    nodes, out = run(graph, ITEM, context)

    # calls per agent exactly as the algorithm implies; the Commander relays, it calls no model
    reviews = k if k is not None else n
    scorer_calls = k if k is not None else n + 1
    tie_calls = 1 if (tie and k is None) else 0
    assert nodes == expected_nodes(k, n, tie)
    assert (len(s.calls), len(c.calls), len(t.calls)) == (scorer_calls, reviews, tie_calls)
    assert nodes.count("commander") == 1 + scorer_calls + reviews
    assert {a: u["requests"] for a, u in out["usage"].items()} == {
        "Scorer": scorer_calls, "Critic": reviews, **({"Tie-breaker": 1} if tie_calls else {})}

    # what the Scorer saw: its G.1 system message, the task, then at each revision the Critic's feedback
    assert isinstance(s.calls[0].messages[0], SystemMessage)
    assert s.calls[0].messages[0].text == "Logically think to score the following sentence."
    assert ITEM.source and ITEM.source[:200] in s.calls[0].prompt
    assert "Let's think step by step" in s.calls[0].prompt
    for j in range(1, scorer_calls):
        assert f"Issue {j}: the score ignores point {j}" in s.calls[j].prompt
        assert s.calls[j].messages[-2].text == scorer_reply(j - 1)  # its own previous answer, then feedback

    # what the Critic saw: its persona, the task with the Scorer's first answer, then each revision
    assert c.calls[0].messages[0].text == STRICT
    assert ITEM.source[:200] in c.calls[0].prompt and scorer_reply(0) in c.calls[0].prompt
    for i in range(1, reviews):
        assert scorer_reply(i) in c.calls[i].prompt and ITEM.source[:200] not in c.calls[i].prompt

    # the verdict: how it ended, every score the Scorer gave, and the right final score
    verdict = verdict_of(out)
    assert verdict is not None and not verdict.missing
    assert verdict.detail["scores"] == [float(x) for x in SCORES[:scorer_calls]]
    assert verdict.detail["iterations"] == reviews
    if k is not None:
        assert (verdict.detail["ended"], verdict.detail["no_issue_at"]) == ("no_issue", k)
        assert verdict.score == SCORES[k - 1]  # the Scorer's latest score, the one the Critic accepted
    elif tie:
        assert verdict.detail["ended"] == "tie_breaker" and verdict.score == TIE_BREAKER_SCORE
    else:
        assert verdict.detail["ended"] == "iteration_limit"
        assert verdict.score == SCORES[n]  # the n-th iteration's score (not the highest, not the first)

    # the full transcript is in the agents' histories: exactly what each model saw, plus its reply
    histories = out["histories"]
    last_answer = scorer_reply(scorer_calls - 1)
    assert [m.text for m in histories["Scorer"]] == [m.text for m in s.calls[-1].messages] + [last_answer]
    assert [m.text for m in histories["Critic"][:-1]] == [m.text for m in c.calls[-1].messages]
    assert histories["Commander"][0].text == debate_prompt("commander")
    relayed = [m for m in histories["Commander"] if isinstance(m, AIMessage)]
    assert len(relayed) == scorer_calls + reviews + tie_calls  # one message per agent call it prompted
    speakers = {"scorer": "Scorer", "critic": "Critic", "tie_breaker": "Tie-breaker"}
    assert [m.name for m in out["transcript"]] == [speakers[x] for x in nodes if x in speakers]


def test_tie_breaker_reads_the_whole_debate_log() -> None:
    n = 2
    s, c = FakeJudge(respond=scorer), FakeJudge(respond=critic_saying_no_issue_at(None))
    t = FakeJudge(respond=tie_breaker)
    graph = create_debate(max_iterations=n, tie_breaker=True).compile()
    graph.invoke({"item": ITEM}, context=JuryContext(models={"Scorer": s, "Critic": c, "Tie-breaker": t}))
    (call,) = t.calls
    assert call.messages[0].text.startswith("You are a Tiebreaker. You will be given a news article.")
    assert "Debate Log of Other Agents:" in call.prompt and ITEM.source and ITEM.source[:200] in call.prompt
    log = call.prompt.split("Debate Log of Other Agents:", 1)[1]
    positions = [log.index(f"[Scorer]: {scorer_reply(0)}"), log.index("[Critic]: Issue 1"),
                 log.index(f"[Scorer]: {scorer_reply(1)}"), log.index("[Critic]: Issue 2"),
                 log.index(f"[Scorer]: {scorer_reply(2)}")]
    assert positions == sorted(positions)


async def test_async_invocation_runs_the_same_debate() -> None:
    s, c = FakeJudge(respond=scorer), FakeJudge(respond=critic_saying_no_issue_at(2))
    out = await create_debate().compile().ainvoke({"item": ITEM}, context=JuryContext(models={"Scorer": s,
                                                                                                "Critic": c}))
    assert verdict_of(out).score == SCORES[1] and (len(s.calls), len(c.calls)) == (2, 2)  # type: ignore[union-attr]


@pytest.mark.parametrize("persona", ["plain", "weak", "moderate", "sophisticated"])
def test_paper_personas_that_name_the_stop_token_are_sent_verbatim(persona: str) -> None:
    c = FakeJudge(respond=critic_saying_no_issue_at(1))
    create_debate(critic=persona).compile().invoke(
        {"item": ITEM}, context=JuryContext(models={"Scorer": FakeJudge(respond=scorer), "Critic": c}))
    assert c.calls[0].messages[0].text == debate_prompt(f"critic_{persona}")
    assert debate_prompt("stop_rule") not in c.calls[0].prompt


def test_strict_critic_is_told_how_to_stop_by_the_commander() -> None:
    c = FakeJudge(respond=critic_saying_no_issue_at(2))
    create_debate(critic="strict").compile().invoke(
        {"item": ITEM}, context=JuryContext(models={"Scorer": FakeJudge(respond=scorer), "Critic": c}))
    assert c.calls[0].messages[0].text == STRICT
    assert all(c.prompt.endswith("If you find no issue with the score, just say NO ISSUE.") for c in c.calls)


def test_custom_persona_and_unknown_persona() -> None:
    mine = CriticPersona("gentle", "Check the score kindly. Say NO ISSUE when it is fine.")
    c = FakeJudge(respond=critic_saying_no_issue_at(1))
    out = create_debate(critic=mine).compile().invoke(
        {"item": ITEM}, context=JuryContext(models={"Scorer": FakeJudge(respond=scorer), "Critic": c}))
    assert c.calls[0].messages[0].text == mine.text and verdict_of(out).detail["critic"] == "gentle"  # type: ignore[union-attr]
    with pytest.raises(KeyError, match="unknown critic persona 'harsh'"):
        create_debate(critic="harsh")
    with pytest.raises(ValueError, match="max_iterations"):
        create_debate(max_iterations=0)


def test_a_missing_score_stays_missing_even_when_the_critic_accepts_it() -> None:
    s = FakeJudge(respond=lambda prompt, messages: "I would rather not say.")
    c = FakeJudge(respond=critic_saying_no_issue_at(1))
    out = create_debate().compile().invoke({"item": ITEM}, context=JuryContext(models={"Scorer": s, "Critic": c}))
    verdict = verdict_of(out)
    assert verdict is not None and verdict.missing and verdict.score is None
    assert "no score" in verdict.detail["reason"] and verdict.detail["scores"] == [None]
    assert len(s.calls) == 2  # the reply, and the one re-ask with the form reminder
    assert "- Coherence: [a score from 1 to 5]" in s.calls[1].prompt


def test_a_missing_last_score_does_not_fall_back_to_an_earlier_one() -> None:
    s = FakeJudge(script=["- Coherence: 3", "Let me think again.", "Still thinking."])
    c = FakeJudge(respond=critic_saying_no_issue_at(None))
    out = create_debate(max_iterations=1).compile().invoke(
        {"item": ITEM}, context=JuryContext(models={"Scorer": s, "Critic": c}))
    verdict = verdict_of(out)
    assert verdict is not None and verdict.missing and verdict.score is None
    assert verdict.detail["scores"] == [3.0, None] and verdict.detail["ended"] == "iteration_limit"


def test_topical_chat_frame_scale_and_tie_breaker_wording() -> None:
    item = load_dataset("topical-chat", aspect="groundedness").items[0]
    frame = frame_task(item)
    assert (frame.scale.low, frame.scale.high) == (0, 1)
    assert item.context and item.context in frame.task and item.source and item.source[:100] in frame.task
    assert frame.task.endswith("- Groundedness:") and "Groundedness (0-1)" in frame.task
    assert "conversation" in frame.tie_breaker_system and "news article" not in frame.tie_breaker_system
    assert frame.form.read("Scorer", "The fact is used.\n- Groundedness: 1").score == 1
    engaging = frame_task(load_dataset("topical-chat", aspect="engagingness").items[0])
    assert (engaging.scale.low, engaging.scale.high) == (1, 3) and "Engagingness (1-3)" in engaging.task


def test_coherence_template_is_the_paper_g2_and_item_text_reaches_the_model_verbatim() -> None:
    tricky = "He said ${summary} and {chat_history} and {{Peer_response1}}, costing $5."
    item = ITEM.model_copy(update={"response": tricky})
    frame = frame_task(item)
    assert frame.task.startswith("You will be given one summary written for a news article.")
    assert "build from sentence to a coherent body of information about a topic." in frame.task
    assert f"Summary:\n\n{tricky}\n\nEvaluation Form (scores ONLY):\n\n- Coherence:" in frame.task


def test_bad_items_are_refused_with_their_id_and_field() -> None:
    no_source = EvalItem(id="doc9#1", task="score", dataset="summeval", aspect="coherence",
                         scale={"low": 1, "high": 5}, response="A summary.")
    with pytest.raises(ValueError, match=r"item 'doc9#1'.*'source'"):
        create_debate().compile().invoke({"item": no_source}, context=JuryContext(default=nobody_else()))
    pairwise = EvalItem(id="q1", task="pairwise", question="Q?", response_1="a", response_2="b")
    with pytest.raises(ValueError, match=r"item 'q1'.*pairwise"):
        frame_task(pairwise)


def test_resume_at_the_failing_critic_review_without_repeating_finished_calls(sqlite_saver) -> None:
    s = FakeJudge(respond=scorer)
    broken = FakeJudge(respond=critic_saying_no_issue_at(3), fail_when=lambda prompt: "Rationale r1" in prompt)
    graph = create_debate(max_iterations=4).compile(checkpointer=sqlite_saver)
    config = {"configurable": {"thread_id": ITEM.id}}
    with pytest.raises(RuntimeError, match="scripted failure"):
        graph.invoke({"item": ITEM}, config, context=JuryContext(models={"Scorer": s, "Critic": broken}))
    assert (len(s.calls), len(broken.calls)) == (2, 2)  # score, review 1, revision; review 2 failed
    assert graph.get_state(config).next == ("critic",)

    fixed = FakeJudge(respond=critic_saying_no_issue_at(3))
    out = graph.invoke(None, config, context=JuryContext(models={"Scorer": s, "Critic": fixed}))
    # resumed at review 2 with the very messages of the failed call; nothing finished was paid again
    assert [m.text for m in fixed.calls[0].messages] == [m.text for m in broken.calls[1].messages]
    assert (len(s.calls), len(fixed.calls)) == (3, 2)
    assert [replies_so_far(call.messages) for call in s.calls] == [0, 1, 2]
    verdict = verdict_of(out)
    assert verdict is not None and verdict.score == SCORES[2] and verdict.detail["no_issue_at"] == 3
    assert out["usage"]["Scorer"]["requests"] == 3


def test_a_users_wiring_can_change_the_uncompiled_graph() -> None:
    builder = create_debate(tie_breaker=True)
    graph = builder.compile(checkpointer=InMemorySaver(), interrupt_before=["tie_breaker"])
    s, c = FakeJudge(respond=scorer), FakeJudge(respond=critic_saying_no_issue_at(None))
    config = {"configurable": {"thread_id": "x"}}
    graph.invoke({"item": ITEM}, config, context=JuryContext(models={"Scorer": s, "Critic": c}))
    # a human can look at the inconclusive debate before the Tie-breaker is paid for
    assert graph.get_state(config).next == ("tie_breaker",) and len(c.calls) == 4


@pytest.mark.parametrize("tie", [False, True], ids=["n-th-score", "tie-breaker"])
def test_mermaid_diagram(tie: bool, snapshot) -> None:
    mermaid = create_debate(tie_breaker=tie).compile().get_graph().draw_mermaid()
    assert ("tie_breaker" in mermaid) is tie and "critic --> commander" in mermaid
    assert mermaid == snapshot


def test_every_debate_prompt_file_says_where_it_comes_from() -> None:
    folder = Path(jurygraph.prompts.__file__).parent / "debate"
    files = sorted(folder.glob("*.txt"))
    # 27 from the paper, devil_chateval.txt (jurygraph's own, issue 14), conversation.txt and
    # tie_breaker_conversation.txt (jurygraph's own, issue 31)
    assert len(files) == 30
    for path in files:
        header = path.read_text(encoding="utf-8").splitlines()[0]
        assert header.startswith("#: ") and len(header) > 40, path.name
        assert not debate_prompt(path.stem).startswith("#:"), path.name


def test_llm_commander_words_its_request_with_one_real_call() -> None:
    commander = FakeJudge(respond=lambda prompt, messages: "Scorer, think step-by-step about the order of events.")
    s, c = FakeJudge(respond=scorer), FakeJudge(respond=critic_saying_no_issue_at(2))
    context = JuryContext(models={"Commander": commander, "Scorer": s, "Critic": c}, default=nobody_else())
    nodes, out = run(create_debate(commander_llm=True).compile(), ITEM, context)
    assert nodes == expected_nodes(2, 4, False)
    (call,) = commander.calls  # framing only; the relays stay verbatim, without a model
    assert call.messages[0].text == debate_prompt("commander") and call.prompt.startswith("You will be given")
    assert ITEM.source and ITEM.source[:200] in call.prompt
    first = s.calls[0].prompt
    assert "Scorer, think step-by-step about the order of events." in first and ITEM.source[:200] in first
    assert "Let's think step by step" not in first and first.endswith("- Coherence: [a score from 1 to 5]")
    assert out["usage"]["Commander"]["requests"] == 1 and verdict_of(out).score == SCORES[1]  # type: ignore[union-attr]
    commander_chat = out["histories"]["Commander"]
    assert [type(m).__name__ for m in commander_chat[:4]] == ["SystemMessage", "HumanMessage", "AIMessage", "AIMessage"]
