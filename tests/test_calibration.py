"""FairEval's calibrations as graph composition around any pairwise protocol: the swapped run really swaps
the answers and its verdict is mapped back; MEC samples k distinct runs at temperature 1; the wrapped
protocol's judgments and histories stay readable; missing runs; resume; the diagrams."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from langchain_core.messages import BaseMessage

from jurygraph import (
    EvalItem,
    JuryContext,
    calibrate,
    create_chateval,
    create_ensemble,
    create_single_agent,
    verdict_of,
)
from jurygraph.graphs.calibration import calibration_runs, map_back
from jurygraph.llm.cache import LLMCache
from jurygraph.testing import FakeJudge, pairwise_reply
from jurygraph.testing.fake_server import prompt_of

ITEM = EvalItem(id="q1", task="pairwise", question="Which is better?", response_1="ANSWER-A",
                response_2="ANSWER-B", human={"label": "1"})
FINAL = "Output with the following format strictly"


def first_answer(prompt: str) -> str:
    return prompt.split("[The Start of Assistant 1’s Answer]\n")[1].split("\n")[0]


def talker(prompt: str) -> str:
    match = re.search(r"make your talk short and clear, (.*) !", prompt)
    return match.group(1) if match else "?"


def by_order(forward: tuple[float, float], swapped: tuple[float, float]):
    """A judge whose scores depend on which answer it is shown first."""

    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        if FINAL not in prompt:
            return f"{talker(prompt)} discusses {first_answer(prompt)} first"
        return pairwise_reply(*(forward if first_answer(prompt) == "ANSWER-A" else swapped))

    return respond


def run(graph, model, item: EvalItem = ITEM) -> dict:
    return graph.compile().invoke({"item": item}, context=JuryContext(default=model))


def test_bpc_swapped_run_swaps_the_answers_and_its_verdict_is_mapped_back() -> None:
    model = FakeJudge(respond=by_order(forward=(8, 5), swapped=(6, 7)))
    out = run(calibrate(create_single_agent(), "bpc"), model)
    assert sorted(first_answer(p) for p in model.prompts()) == ["ANSWER-A", "ANSWER-B"]
    swapped_prompt = next(p for p in model.prompts() if first_answer(p) == "ANSWER-B")
    assert "[The Start of Assistant 2’s Answer]\nANSWER-A\n" in swapped_prompt
    runs = out["runs"]
    # as said in the swapped order: Assistant 1 (= ANSWER-B) 6, Assistant 2 (= ANSWER-A) 7 -> "2"
    assert (runs["swapped_order"]["verdict"]["score_1"], runs["swapped_order"]["verdict"]["label"]) == (6.0, "2")
    # mapped back to the original order: ANSWER-A 7, ANSWER-B 6 -> "1"
    back = runs["swapped_order"]["verdict_in_original_order"]
    assert (back["score_1"], back["score_2"], back["label"]) == (7.0, 6.0, "1")
    verdict = verdict_of(out)
    assert verdict is not None and (verdict.score_1, verdict.score_2, verdict.label) == (7.5, 5.5, "1")
    assert verdict.method.startswith("balanced position calibration")
    assert verdict.detail["runs"]["swapped_order"] == {"score_1": 7.0, "score_2": 6.0, "label": "1"}


def test_bpc_cancels_a_pure_position_bias() -> None:
    # a judge that always prefers whatever it sees first: 8 for Assistant 1, 5 for Assistant 2
    model = FakeJudge(respond=lambda prompt, messages: pairwise_reply(8, 5))
    verdict = verdict_of(run(calibrate(create_single_agent(), "bpc"), model))
    assert verdict is not None and (verdict.score_1, verdict.score_2, verdict.label) == (6.5, 6.5, "tie")


def test_bpc_wraps_chateval_and_keeps_every_agents_history_readable() -> None:
    model = FakeJudge(respond=by_order(forward=(9, 4), swapped=(3, 8)))
    out = run(calibrate(create_chateval(strategy="one-by-one", turns=2), "bpc"), model)
    assert len(model.calls) == 8  # 2 referees x 2 turns x 2 orders
    critic_swapped = out["histories"]["swapped_order/Critic"]
    assert [m.name for m in critic_swapped] == ["General Public", "Critic", "General Public", "Critic"]
    assert critic_swapped[0].text == "General Public discusses ANSWER-B first"  # the swapped discussion
    assert out["histories"]["original_order/Critic"][0].text == "General Public discusses ANSWER-A first"
    assert set(out["judgments"]) == {f"{o}/{a}" for o in ("original_order", "swapped_order")
                                     for a in ("General Public", "Critic")}
    assert out["judgments"]["swapped_order/Critic"]["score_1"] == 3.0  # as the Critic said it
    assert [m.name for m in out["runs"]["original_order"]["transcript"]] == ["General Public", "Critic"] * 2
    verdict = verdict_of(out)
    assert verdict is not None and (verdict.score_1, verdict.score_2, verdict.label) == (8.5, 3.5, "1")
    assert (verdict.n_judgments, verdict.n_missing) == (4, 0)
    assert out["usage"]["Critic"]["requests"] == 4


def test_bpc_wraps_the_ensemble() -> None:
    model = FakeJudge(respond=by_order(forward=(7, 5), swapped=(4, 6)))
    out = run(calibrate(create_ensemble(referees=3, method="majority"), "bpc"), model)
    assert len(model.calls) == 6
    assert out["runs"]["swapped_order"]["verdict"]["votes"] == {"2": 3}
    assert out["runs"]["swapped_order"]["verdict_in_original_order"]["votes"] == {"1": 3}
    assert verdict_of(out).score_1 == 6.5  # type: ignore[union-attr]


def test_bpc_pools_every_referees_vote_when_the_protocol_votes() -> None:
    """Issue 29 item 1: with a majority vote, BPC pools the referees' votes of both orders (read in the original
    order) rather than averaging the two orders' scores, or voting the two orders' verdicts (which would tie)."""
    # each referee's scores for (ANSWER-A, ANSWER-B) in each order (original, swapped)
    prefers = {"General Public": ((8, 5), (5, 8)), "Critic": ((7, 6), (6, 6)), "News Author": ((4, 9), (3, 9))}

    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        original, swapped = prefers[talker(prompt)]
        a, b = original if first_answer(prompt) == "ANSWER-A" else swapped
        return pairwise_reply(a, b) if first_answer(prompt) == "ANSWER-A" else pairwise_reply(b, a)

    out = run(calibrate(create_ensemble(referees=3, method="majority"), "bpc"), FakeJudge(respond=respond))
    runs = out["runs"]
    # the original order votes 1, 1, 2 -> "1"; the swapped order, read back, votes 2, tie, 2 -> "2"
    assert runs["original_order"]["verdict"]["label"] == "1"
    assert runs["swapped_order"]["verdict_in_original_order"]["label"] == "2"
    verdict = verdict_of(out)
    assert verdict is not None and verdict.method == "balanced position calibration: pooled votes"
    assert (verdict.label, verdict.votes) == ("2", {"1": 2, "2": 3, "tie": 1})
    assert verdict.detail["runs"]["swapped_order"]["votes"] == {"2": 2, "tie": 1}
    # the same replies averaged (the default) follow the scores: A 33/6 = 5.5, B 43/6 > 7
    mean = verdict_of(run(calibrate(create_ensemble(referees=3), "bpc"), FakeJudge(respond=respond)))
    assert mean is not None and mean.method == "balanced position calibration: mean scores" and mean.votes is None


def test_mec_samples_k_distinct_runs_at_temperature_1_through_the_local_server(openai_server, tmp_path: Path) -> None:
    scores = iter([(9, 2), (6, 5), (3, 4), (1, 1)])
    server = openai_server(lambda request, i: pairwise_reply(*next(scores)))
    cache = LLMCache(tmp_path / "cache.sqlite")
    context = JuryContext(default=f"openai:judge@{server.base_url}", cache=cache)
    graph = calibrate(create_single_agent(), "mec", k=3).compile()
    out = graph.invoke({"item": ITEM}, context=context)
    assert len(server.requests) == 3 and len(cache) == 3  # three samples, three cache entries
    assert all(r["temperature"] == 1.0 for r in server.requests)
    assert len({prompt_of(r) for r in server.requests}) == 1  # the same MEC prompt sampled k times
    assert "first provide a comprehensive explanation of your evaluation" in prompt_of(server.requests[0])
    verdict = verdict_of(out)
    assert verdict is not None and verdict.method.startswith("multiple evidence calibration")
    assert (verdict.score_1, verdict.score_2, verdict.label) == (6.0, pytest.approx(11 / 3), "1")
    assert sorted((r["score_1"], r["score_2"]) for r in verdict.detail["runs"].values()) == [(3, 4), (6, 5), (9, 2)]
    # a rerun is answered from the cache: the k samples stay distinct and nothing is paid twice
    again = graph.invoke({"item": ITEM}, context=context)
    assert len(server.requests) == 3 and verdict_of(again).score_1 == 6.0  # type: ignore[union-attr]


def test_bpc_plus_mec_runs_k_samples_in_each_order() -> None:
    model = FakeJudge(respond=by_order(forward=(8, 4), swapped=(2, 6)))
    out = run(calibrate(create_single_agent(), "bpc+mec", k=2), model)
    assert sorted(first_answer(p) for p in model.prompts()) == ["ANSWER-A"] * 2 + ["ANSWER-B"] * 2
    assert set(out["runs"]) == {"original_order_e1", "original_order_e2", "swapped_order_e1", "swapped_order_e2"}
    verdict = verdict_of(out)
    assert verdict is not None and (verdict.score_1, verdict.score_2, verdict.label) == (7.0, 3.0, "1")


def test_a_missing_run_is_left_out_and_counted_never_guessed() -> None:
    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        return pairwise_reply(8, 5) if first_answer(messages[0].text) == "ANSWER-A" else "I won't score this."

    out = run(calibrate(create_single_agent(), "bpc"), FakeJudge(respond=respond))
    verdict = verdict_of(out)
    assert verdict is not None and (verdict.score_1, verdict.score_2) == (8.0, 5.0)
    assert verdict.detail["runs_missing"] == 1
    assert verdict.detail["runs"]["swapped_order"] == {"missing": True, "reason": "the run gave no verdict"}
    assert (verdict.n_judgments, verdict.n_missing) == (1, 1)
    assert out["judgments"]["swapped_order/Single Agent"]["raw"] == "I won't score this."
    nothing = verdict_of(run(calibrate(create_single_agent(), "bpc"), FakeJudge(respond=lambda p, m: "no")))
    assert nothing is not None and nothing.missing and nothing.label is None


def test_map_back_swaps_scores_labels_and_votes() -> None:
    said = {"kind": "pairwise", "label": "2", "score_1": 3.0, "score_2": 9.0, "votes": {"2": 2, "tie": 1}}
    assert map_back(said) == {"kind": "pairwise", "label": "1", "score_1": 9.0, "score_2": 3.0,
                              "votes": {"1": 2, "tie": 1}}
    assert map_back({"kind": "pairwise", "missing": True}) == {"kind": "pairwise", "missing": True}


def test_resume_repeats_only_the_failed_call(sqlite_saver) -> None:
    respond = by_order(forward=(9, 4), swapped=(3, 8))
    failing = FakeJudge(respond=respond, fail_when=lambda prompt: first_answer(prompt) == "ANSWER-B"
                        and talker(prompt) == "Critic" and FINAL in prompt)
    graph = calibrate(create_chateval(turns=2), "bpc").compile(checkpointer=sqlite_saver)
    config = {"configurable": {"thread_id": "bpc-1"}}
    with pytest.raises(RuntimeError, match="scripted failure"):
        graph.invoke({"item": ITEM}, config, context=JuryContext(default=failing))
    fixed = FakeJudge(respond=respond)
    out = graph.invoke(None, config, context=JuryContext(default=fixed))
    # the original order finished and the swapped discussion had 3 of its 4 turns: only the failed one runs again
    assert [(first_answer(p), talker(p)) for p in fixed.prompts()] == [("ANSWER-B", "Critic")]
    assert verdict_of(out).n_judgments == 4  # type: ignore[union-attr]


async def test_async_invocation_gives_the_same_result() -> None:
    model = FakeJudge(respond=by_order(forward=(8, 5), swapped=(6, 7)))
    out = await calibrate(create_single_agent(), "bpc").compile().ainvoke({"item": ITEM},
                                                                           context=JuryContext(default=model))
    assert verdict_of(out).score_1 == 7.5 and len(model.calls) == 2  # type: ignore[union-attr]


def test_bad_input_is_refused_clearly() -> None:
    score_item = EvalItem(id="s3", task="score", response="text", scale={"low": 1, "high": 5})
    with pytest.raises(ValueError, match="item 's3': position/evidence calibration needs a pairwise item"):
        run(calibrate(create_single_agent(), "bpc"), FakeJudge(respond=lambda p, m: "3"), score_item)
    with pytest.raises(ValueError, match="unknown calibration 'both'"):
        calibrate(create_single_agent(), "both")
    with pytest.raises(ValueError, match="k >= 1"):
        calibration_runs("mec", 0)


@pytest.mark.parametrize(("protocol", "mode"), [("single", "bpc"), ("single", "mec"), ("ensemble", "bpc+mec"),
                                                ("chateval", "bpc")])
def test_mermaid_diagram_of_each_wrapping(protocol: str, mode: str, snapshot) -> None:
    factory = {"single": create_single_agent, "ensemble": create_ensemble, "chateval": create_chateval}[protocol]
    graph = calibrate(factory, mode, k=2)
    assert graph.compile().get_graph().draw_mermaid() == snapshot


def test_context_call_params_override_a_protocols_own_defaults(openai_server) -> None:
    """A wrapper's run-wide params (MEC's temperature 1) beat the protocol's paper defaults (ChatEval's 0)."""
    from jurygraph import create_geval

    server = openai_server(lambda request, i: pairwise_reply(5, 5) if "Assistant" in prompt_of(request)
                           else "Coherence: 3")
    context = JuryContext(default=f"openai:judge@{server.base_url}", call_params={"temperature": 0.3})
    create_single_agent().compile().invoke({"item": ITEM}, context=context)
    score_item = EvalItem(id="d#1", task="score", dataset="summeval", aspect="coherence",
                          scale={"low": 1, "high": 5}, source="s", response="r")
    create_geval(n=2, temperature=1.0).compile().invoke({"item": score_item}, context=context)
    assert [r["temperature"] for r in server.requests] == [0.3, 0.3]  # over single's 0 and G-Eval's 1.0


def test_the_runner_keeps_the_contexts_call_defaults(openai_server, tmp_path: Path) -> None:
    from jurygraph.running.runner import run as run_items

    server = openai_server(lambda request, i: pairwise_reply(6, 2))
    context = JuryContext(default=f"openai:judge@{server.base_url}", call_params={"temperature": 0.4})
    summary = run_items(create_single_agent(), [ITEM], out_dir=tmp_path / "r", context=context, progress=False)
    assert summary.failed == 0 and [r["temperature"] for r in server.requests] == [0.4]
