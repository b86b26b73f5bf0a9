"""ReFeR with fake models: the graph's shape, what each peer and the area chair saw, Turbo/Lite verdicts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from importlib import resources

import pytest
from langchain_core.exceptions import ModelNotFoundError
from langchain_core.messages import BaseMessage

from jurygraph import EvalItem, JuryContext, create_refer, judgments_of, verdict_of
from jurygraph.nodes.refer import ReferTemplate, comment_of, item_slots, peer_block
from jurygraph.prompts import load_json, load_prompt, render
from jurygraph.running.datasets import load_dataset
from jurygraph.testing import FakeJudge

PEER_REPLIES = {
    "peer_1": "Analysis: The reply ignores the question about jazz.\nRating: 1",
    "peer_2": "Analysis: It stays loosely on topic.\nRating: 2",
    "peer_3": "Analysis: It builds on the conversation and the fact.\nRating: 3",
}


def tc_item() -> EvalItem:
    return load_dataset("topical-chat", aspect="coherence").items[0]


def peers(replies: dict[str, str] = PEER_REPLIES) -> dict[str, FakeJudge]:
    return {name: FakeJudge(respond=lambda p, m, r=reply: r, model_name=name) for name, reply in replies.items()}


def area_chair(reply: str = "Analysis: Peers disagree; the reply is somewhat coherent.\nRating: 2",
               native_n: bool = True) -> FakeJudge:
    return FakeJudge(respond=lambda p, m: reply, model_name="ac", jurygraph_native_n=native_n)


@pytest.mark.parametrize("k", [3, 2])
def test_draw_mermaid_shows_fan_out_and_barrier(k: int, snapshot) -> None:
    builder = create_refer(peers=k)
    mermaid = builder.compile().get_graph().draw_mermaid()
    assert mermaid == snapshot
    # the barrier: one waiting edge from all peers to the area chair, not K separate edges
    assert builder.waiting_edges == {(tuple(f"peer_{i}" for i in range(1, k + 1)), "area_chair")}


def test_peers_see_the_verbatim_appendix_n_prompt_and_not_each_other() -> None:
    models = peers()
    item = tc_item()
    create_refer().compile().invoke({"item": item}, context=JuryContext(models={**models, "area_chair": area_chair()}))
    expected = load_prompt("refer/topical_chat_coherence_peer")
    for judge in models.values():
        (call,) = judge.calls
        prompt = call.prompt
        assert prompt.startswith("You will receive a dialogue between two people. Following that, there will be "
                                 "one suggested reply for the next part of the conversation")
        assert f"Conversation History: {item.source}\n\nCorresponding Fact: {item.context}" in prompt
        assert prompt.endswith("by “Rating”.)\n\nCoherence:")
        assert prompt.count("Analysis:") == 1  # only the form's own mention: no peer evaluation leaked in
        for other in PEER_REPLIES.values():
            assert other not in prompt
        assert expected.split("Example:")[0] in prompt


@pytest.mark.parametrize(("mode", "shown"), [
    ("score", ["1", "2", "3"]),
    ("comment", ["The reply ignores the question about jazz.", "It stays loosely on topic.",
                 "It builds on the conversation and the fact."]),
    ("both", ["The reply ignores the question about jazz.\nRating: 1", "It stays loosely on topic.\nRating: 2",
              "It builds on the conversation and the fact.\nRating: 3"]),
])
def test_area_chair_prompt_holds_exactly_the_peers_feedback_in_peer_order(mode: str, shown: list[str]) -> None:
    ac = area_chair()
    create_refer(feedback=mode, variant="lite").compile().invoke(
        {"item": tc_item()}, context=JuryContext(models={**peers(), "area_chair": ac}))
    (call,) = ac.calls
    prompt = call.prompt
    block = (f"First Assistant’s Evaluation: {shown[0]}\n\nSecond Assistant’s Evaluation: {shown[1]}\n\n"
             f"Third Assistant’s Evaluation: {shown[2]}")
    assert f"{tc_item().response}\n\n{block}\n\nEvaluation Form" in prompt
    assert "initial evaluations from three large language models" in prompt
    assert prompt.startswith("Navigate through a simulated conversation between two individuals")
    assert prompt.count("Assistant’s Evaluation:") == 3
    if mode == "comment":
        assert "Rating: 1" not in prompt and "Rating: 3" not in prompt


async def test_peer_order_is_index_order_not_completion_order() -> None:
    def slow(prompt: str, messages: Sequence[BaseMessage]) -> str:
        time.sleep(0.3)  # peer_1 finishes last
        return PEER_REPLIES["peer_1"]

    models = peers()
    models["peer_1"] = FakeJudge(respond=slow, model_name="peer_1")
    ac = area_chair()
    started = time.perf_counter()
    await create_refer(variant="lite").compile().ainvoke(
        {"item": tc_item()}, context=JuryContext(models={**models, "area_chair": ac}))
    assert time.perf_counter() - started < 0.3 * 2  # the peers ran side by side
    prompt = ac.calls[0].prompt
    assert prompt.index("First Assistant’s Evaluation: 1") < prompt.index("Second Assistant’s Evaluation: 2") \
        < prompt.index("Third Assistant’s Evaluation: 3")


def test_turbo_mean_of_samples_with_unreadable_samples_left_out_and_counted() -> None:
    replies = iter(["Analysis: a\nRating: 3", "Analysis: b\nRating: 2", "no rating here", "Analysis: c\nRating: 2",
                    "Analysis: d\nRating: 7"])  # 7 is off the 1-3 scale: unreadable, not clipped
    ac = FakeJudge(respond=lambda p, m: next(replies), model_name="ac", jurygraph_native_n=True)
    out = create_refer(samples=5).compile().invoke(
        {"item": tc_item()}, context=JuryContext(models={**peers(), "area_chair": ac}))
    verdict = verdict_of(out)
    assert verdict is not None
    assert len(ac.calls) == 1 and ac.calls[0].params.get("n") == 5  # one request for the 5 samples
    assert verdict.score == pytest.approx(7 / 3)
    assert (verdict.n_judgments, verdict.n_missing) == (3, 2)
    assert verdict.detail["ratings"] == [3.0, 2.0, None, 2.0, None]
    assert verdict.detail["unreadable_samples"] == 2
    # C_final: the first sample closest to the mean (2.33 -> the first 2), every comment kept
    assert verdict.detail["comment"] == "Analysis: b\nRating: 2"
    assert len(verdict.detail["comments"]) == 5
    assert judgments_of(out)["area_chair"].score == pytest.approx(7 / 3)
    assert [m.text for m in out["histories"]["area_chair"][1:]] == verdict.detail["comments"]


def test_turbo_without_native_n_sends_n_requests_at_temperature_1() -> None:
    ac = area_chair(native_n=False)
    out = create_refer(samples=4).compile().invoke(
        {"item": tc_item()}, context=JuryContext(models={**peers(), "area_chair": ac}))
    assert len(ac.calls) == 4
    assert verdict_of(out).score == 2  # type: ignore[union-attr]


def test_all_samples_unreadable_gives_a_missing_verdict() -> None:
    ac = area_chair("I cannot decide.")
    out = create_refer(samples=3).compile().invoke(
        {"item": tc_item()}, context=JuryContext(models={**peers(), "area_chair": ac}))
    verdict = verdict_of(out)
    assert verdict is not None and verdict.missing and verdict.score is None
    assert verdict.n_missing == 3
    assert judgments_of(out)["area_chair"].missing


def test_unreadable_peer_is_a_blank_in_the_area_chair_prompt_and_counted() -> None:
    replies = {**PEER_REPLIES, "peer_2": "I would rather not say."}
    ac = area_chair()
    out = create_refer(variant="lite").compile().invoke(
        {"item": tc_item()}, context=JuryContext(models={**peers(replies), "area_chair": ac}))
    prompt = ac.calls[0].prompt
    # as the released scripts pass a failed peer: " " in its place, the count of models kept
    assert "initial evaluations from three large language models" in prompt
    assert ("First Assistant’s Evaluation: 1\n\nSecond Assistant’s Evaluation:  \n\n"
            "Third Assistant’s Evaluation: 3\n\nEvaluation Form") in prompt
    verdict = verdict_of(out)
    assert verdict is not None
    assert verdict.detail["missing_peers"].keys() == {"peer_2"}
    assert judgments_of(out)["peer_2"].missing
    # the option: left out, the prompt names one model fewer
    omitted = area_chair()
    create_refer(variant="lite", missing_peers="omit").compile().invoke(
        {"item": tc_item()}, context=JuryContext(models={**peers(replies), "area_chair": omitted}))
    prompt = omitted.calls[0].prompt
    assert "initial evaluations from two large language models" in prompt
    assert "First Assistant’s Evaluation: 1\n\nSecond Assistant’s Evaluation: 3\n\nEvaluation Form" in prompt
    with pytest.raises(ValueError, match="missing-peer"):
        create_refer(missing_peers="drop")


def test_item_text_with_template_syntax_reaches_the_models_verbatim() -> None:
    item = tc_item().model_copy(update={"response": "see {{Peer_response1}} and ${peer_evaluations} and $5"})
    models = peers()
    ac = area_chair()
    create_refer(variant="lite").compile().invoke(
        {"item": item}, context=JuryContext(models={**models, "area_chair": ac}))
    assert "Response: see {{Peer_response1}} and ${peer_evaluations} and $5\n" in models["peer_1"].calls[0].prompt
    assert "Response: see {{Peer_response1}} and ${peer_evaluations} and $5\n" in ac.calls[0].prompt


def test_summeval_uses_the_schema_with_g_eval_criteria_and_steps() -> None:
    item = load_dataset("summeval", aspect="relevance").items[0]
    models = peers({"peer_1": "Analysis: x\nRating: 4", "peer_2": "Analysis: y\nRating: 5",
                    "peer_3": "Analysis: z\nRelevance: 3"})
    ac = area_chair("Analysis: ok\nRating: 4")
    out = create_refer(variant="lite").compile().invoke(
        {"item": item}, context=JuryContext(models={**models, "area_chair": ac}))
    peer_prompt = models["peer_1"].calls[0].prompt
    assert "Relevance (1-5) - selection of important content from the source." in peer_prompt
    assert "4. Assign a relevance score from 1 to 5." in peer_prompt
    assert peer_prompt.endswith("Relevance:")
    assert "Third Assistant’s Evaluation: 3" in ac.calls[0].prompt  # 'Relevance: 3' read as the rating
    assert verdict_of(out).score == 4  # type: ignore[union-attr]


def test_comment_of_strips_the_label_and_the_rating_line() -> None:
    assert comment_of("**Analysis:** Good flow.\nIt is fine.\n**Rating:** 3") == "Good flow.\nIt is fine."
    assert comment_of("Analysis: ok\nCoherence: 2", ["Coherence"]) == "ok"


def test_bad_options_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="Lite"):
        create_refer(variant="lite", samples=5)
    with pytest.raises(ValueError, match="feedback"):
        create_refer(feedback="scores")
    with pytest.raises(ValueError, match="variant"):
        create_refer(variant="fast")
    with pytest.raises(ValueError, match="template 'aqua' asks for an answer, but the item is a score item"):
        create_refer(template="aqua").compile().invoke(
            {"item": tc_item()}, context=JuryContext(models={**peers(), "area_chair": area_chair()}))
    pairwise = load_dataset("faireval").items[0]
    with pytest.raises(ValueError, match="not pairwise"):
        create_refer().compile().invoke({"item": pairwise}, context=JuryContext(default=area_chair()))
    with pytest.raises(KeyError, match="no ReFeR template 'nope'"):
        create_refer(template="nope").compile().invoke(
            {"item": tc_item()}, context=JuryContext(models={**peers(), "area_chair": area_chair()}))


def test_async_and_sync_give_the_same_verdict() -> None:
    ctx = JuryContext(models={**peers(), "area_chair": area_chair()})
    graph = create_refer(samples=3).compile()
    sync = graph.invoke({"item": tc_item()}, context=ctx)
    asyn = asyncio.run(graph.ainvoke({"item": tc_item()}, context=ctx))
    assert sync["verdict"] == asyn["verdict"]


def test_peers_run_in_one_superstep_and_the_area_chair_in_the_next() -> None:
    graph = create_refer(variant="lite").compile()
    context = JuryContext(models={**peers(), "area_chair": area_chair()})
    steps = [(event["step"], event["payload"]["name"])
             for event in graph.stream({"item": tc_item()}, context=context, stream_mode="debug")
             if event["type"] == "task"]
    assert sorted(steps) == [(1, "peer_1"), (1, "peer_2"), (1, "peer_3"), (2, "area_chair")]


def test_resume_after_the_area_chair_failed_does_not_ask_the_peers_again(sqlite_saver) -> None:
    models = peers()
    graph = create_refer(samples=3).compile(checkpointer=sqlite_saver)
    config = {"configurable": {"thread_id": "item-1"}}
    broken = FakeJudge(respond=lambda p, m: "Rating: 2", fail_when=lambda p: True, model_name="ac",
                       jurygraph_native_n=True)
    with pytest.raises(RuntimeError, match="scripted failure"):
        graph.invoke({"item": tc_item()}, config, context=JuryContext(models={**models, "area_chair": broken}))
    assert [len(m.calls) for m in models.values()] == [1, 1, 1]
    working = area_chair()
    out = graph.invoke(None, config, context=JuryContext(models={**models, "area_chair": working}))
    assert [len(m.calls) for m in models.values()] == [1, 1, 1]  # the peers' evaluations came from the checkpoint
    assert len(working.calls) == 1 and "Third Assistant’s Evaluation: 3" in working.calls[0].prompt
    assert verdict_of(out).score == 2  # type: ignore[union-attr]


@pytest.mark.parametrize("key", [k for k in load_json("refer/templates") if not k.startswith("_") and k != "custom"])
def test_every_template_renders_every_slot_and_names_its_source(key: str) -> None:
    tpl = ReferTemplate.named(key)
    if key == "conversation":  # conversation items (issue 31)
        item = EvalItem(id="i", task="score", scale={"low": 1, "high": 5}, messages=[
            {"role": "user", "content": "SRC"}, {"role": "assistant", "content": "RESP"}])
    elif tpl.answer == "score":
        dataset, _, aspect = key.partition("/")
        item = EvalItem(id="i", task="score", dataset=dataset, aspect=aspect or None, source="SRC", context="CTX",
                        response="RESP", scale=tpl.scale or {"low": 1, "high": 5})
    else:
        item = EvalItem(id="i", task="choice", dataset=key, question="Q?", options={"A": "x", "B": "y"})
    slots = item_slots(item, tpl)
    peer = render(tpl.peer, **slots, peer_evaluations="", n_peers="")
    chair = render(tpl.area_chair, **slots, peer_evaluations=peer_block(["P1", "P2"], tpl), n_peers="two")
    for prompt in (peer, chair):
        assert "${" not in prompt and "{{" not in prompt and "$$" not in prompt
        assert ("SRC" in prompt or "RESP" in prompt) if tpl.answer == "score" else "Q?" in prompt
    assert "P1" not in peer and "P1" in chair and "P2" in chair
    table = load_json("refer/templates")[key]
    for role in ("peer", "area_chair"):
        raw = resources.files("jurygraph.prompts").joinpath(f"refer/{table[role]}.txt").read_text(encoding="utf-8")
        assert raw.startswith("#: ") and not load_prompt(f"refer/{table[role]}").startswith("#:")


def test_native_n_usage_counts_the_response_once() -> None:
    ac = FakeJudge(respond=lambda p, m: "Analysis: ok then.\nRating: 2", model_name="ac", jurygraph_native_n=True)
    out = create_refer(samples=4).compile().invoke(
        {"item": tc_item()}, context=JuryContext(models={**peers(), "area_chair": ac}))
    usage = out["usage"]["area_chair"]
    assert usage["requests"] == 1
    assert usage["input_tokens"] == len(ac.calls[0].prompt.split())
    assert usage["output_tokens"] == 4 * 5  # five words per sample


def test_a_misconfigured_peer_model_is_an_error_not_a_missing_peer() -> None:
    def unknown_model(prompt: str, messages: Sequence[BaseMessage]) -> str:
        raise ModelNotFoundError("The model `peer-typo` does not exist")

    models = {**peers(), "peer_2": FakeJudge(respond=unknown_model, model_name="peer-typo")}
    with pytest.raises(ModelNotFoundError, match="peer-typo"):
        create_refer(variant="lite").compile().invoke(
            {"item": tc_item()}, context=JuryContext(models={**models, "area_chair": area_chair()}))


def test_a_peer_whose_model_raises_is_missing_with_the_reason() -> None:
    models = {**peers(), "peer_3": FakeJudge(respond=lambda p, m: "x", fail_when=lambda p: True, model_name="p3")}
    ac = area_chair()
    out = create_refer(variant="lite").compile().invoke(
        {"item": tc_item()}, context=JuryContext(models={**models, "area_chair": ac}))
    assert judgments_of(out)["peer_3"].reason == "peer model failed: RuntimeError: p3: scripted failure"
    blank = "Second Assistant’s Evaluation: 2\n\nThird Assistant’s Evaluation:  \n\nEvaluation Form"
    assert blank in ac.calls[0].prompt
