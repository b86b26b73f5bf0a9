"""ChatEval's early stop (``stop_when="consensus"``, jurygraph's own): who heard what, how many requests an
item costs when the panel agrees at once or never, the tolerance on scores, and the diagrams."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from langchain_core.messages import BaseMessage

from jurygraph import EvalItem, JuryContext, create_chateval, verdict_of
from jurygraph.cli import main
from jurygraph.graphs import calibrate, edges_of
from jurygraph.judging.aggregation import consensus
from jurygraph.judging.judgments import Judgment
from jurygraph.running.rundir import read_results
from jurygraph.testing import FakeJudge, pairwise_reply
from jurygraph.testing.fake_server import prompt_of

ITEM = EvalItem(id="q1", task="pairwise", question="Which is better?", response_1="Answer one.",
                response_2="Answer two.")
SCORE_ITEM = EvalItem(id="s1", task="score", source="A story.", response="A summary.", scale={"low": 1, "high": 5})
FINAL = "Output with the following format strictly"
STRATEGIES = ["one-by-one", "simultaneous", "summarizer"]


def speaker(prompt: str) -> str:
    match = re.search(r"make your talk short and clear, (.+) !", prompt)
    return match.group(1) if match else "?"


def panel(winners: dict[int, dict[str, str]]) -> FakeJudge:
    """Referees whose winner in round t is ``winners[t][name]`` ('1' or '2'; the last round given repeats);
    the summarizer answers 'SUMMARY'."""
    spoken: dict[str, int] = {}

    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        if "New summary:" in prompt:
            return "SUMMARY"
        name = speaker(prompt)
        spoken[name] = turn = spoken.get(name, 0) + 1
        winner = winners[min(turn, max(winners))][name]
        return pairwise_reply(8, 6, f"{name} round {turn}") if winner == "1" else \
            pairwise_reply(6, 8, f"{name} round {turn}")

    return FakeJudge(respond=respond)


AGREE = {1: {"General Public": "2", "Critic": "2"}}
NEVER = {1: {"General Public": "1", "Critic": "2"}}


def history_slot(prompt: str) -> str:
    return prompt.split("Here is your discussion history:\n")[1].split("\nYou are")[0]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_panel_that_agrees_in_round_one_pays_for_one_round(strategy: str) -> None:
    model = panel(AGREE)
    out = create_chateval(strategy=strategy, turns=3, stop_when="consensus").compile().invoke(
        {"item": ITEM}, context=JuryContext(default=model))
    referee_prompts = [p for p in model.prompts() if speaker(p) != "?"]
    # round 1 only, and each referee was asked for its judgment in round 1 (the final-turn answer form)
    assert sorted(speaker(p) for p in referee_prompts) == ["Critic", "General Public"]
    assert all(FINAL in p for p in referee_prompts)
    # with the summarizer the check comes before the round's summary: an agreeing panel pays for none
    assert len(model.calls) == 2 and model.prompts(containing="New summary:") == []
    assert [m.name for m in out["transcript"]] == ["General Public", "Critic"]  # the round is still recorded
    verdict = verdict_of(out)
    assert verdict is not None and verdict.label == "2"
    assert verdict.detail["rounds"] == 1 and verdict.detail["stopped"] == "consensus"
    assert verdict.detail["max_rounds"] == 3 and verdict.detail["consensus"] is True


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_panel_that_never_agrees_pays_for_every_round_and_is_asked_each_round(strategy: str) -> None:
    model = panel(NEVER)
    out = create_chateval(strategy=strategy, turns=3, stop_when="consensus").compile().invoke(
        {"item": ITEM}, context=JuryContext(default=model))
    referee_prompts = [p for p in model.prompts() if speaker(p) != "?"]
    assert len(referee_prompts) == 6 and all(FINAL in p for p in referee_prompts)
    assert len(model.calls) == (8 if strategy == "summarizer" else 6)  # 2 summaries between 3 rounds
    verdict = verdict_of(out)
    assert verdict is not None and verdict.label == "tie"  # 8-6 and 6-8: equal means
    rounds = verdict.detail.pop("round_judgments")
    assert verdict.detail == {"rounds": 3, "max_rounds": 3, "stopped": None, "consensus": False}
    # every referee's judgment of every round is kept (``judgments`` holds the last round's only)
    assert sorted((r["round"], r["agent"], r["label"]) for r in rounds) == [
        (t, name, label) for t in (1, 2, 3) for name, label in (("Critic", "2"), ("General Public", "1"))]


def test_who_heard_what_when_the_panel_comes_round_in_round_two() -> None:
    model = panel({1: {"General Public": "1", "Critic": "2"}, 2: {"General Public": "2", "Critic": "2"}})
    out = create_chateval(turns=4, stop_when="consensus").compile().invoke(
        {"item": ITEM}, context=JuryContext(default=model))
    gp = [p for p in model.prompts() if speaker(p) == "General Public"]
    critic = [p for p in model.prompts() if speaker(p) == "Critic"]
    assert len(gp) == len(critic) == 2  # rounds 1 and 2; rounds 3 and 4 never happen
    # one-by-one as in the paper: round 2's General Public heard both round-1 judgments, in order
    assert history_slot(gp[1]) == ("[General Public]: " + pairwise_reply(8, 6, "General Public round 1") + "\n"
                                   "[Critic]: " + pairwise_reply(6, 8, "Critic round 1"))
    assert history_slot(critic[1]).endswith("[General Public]: " + pairwise_reply(6, 8, "General Public round 2"))
    assert [m.response_metadata["turn"] for m in out["transcript"]] == [1, 1, 2, 2]
    verdict = verdict_of(out)
    assert verdict is not None and verdict.detail["rounds"] == 2 and verdict.detail["stopped"] == "consensus"
    assert verdict.label == "2" and (verdict.score_1, verdict.score_2) == (6, 8)  # the round-2 judgments
    assert [(r["round"], r["agent"], r["label"]) for r in verdict.detail["round_judgments"]] == [
        (1, "General Public", "1"), (1, "Critic", "2"), (2, "General Public", "2"), (2, "Critic", "2")]


@pytest.mark.parametrize(("tolerance", "calls"), [(0.0, 4), (1.0, 2)])
def test_scores_agree_within_the_tolerance(tolerance: float, calls: int) -> None:
    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        return "Evaluation evidence: fine.\nThe score: " + ("3" if speaker(prompt) == "Critic" else "4")

    model = FakeJudge(respond=respond)
    out = create_chateval(turns=2, stop_when="consensus", consensus_tolerance=tolerance).compile().invoke(
        {"item": SCORE_ITEM}, context=JuryContext(default=model))
    assert len(model.calls) == calls
    verdict = verdict_of(out)
    assert verdict is not None and verdict.score == 3.5
    assert verdict.detail["rounds"] == calls // 2


def test_consensus_rule() -> None:
    def pair(agent: str, s1: float, s2: float) -> Judgment:
        return Judgment(agent=agent, kind="pairwise", score_1=s1, score_2=s2, label="1" if s1 > s2 else "2" if s2 > s1
                        else "tie")

    assert consensus([pair("a", 8, 6), pair("b", 9, 2)])  # the same winner, different scores
    assert not consensus([pair("a", 8, 6), pair("b", 6, 6)])
    assert consensus([pair("a", 7, 7), pair("b", 5, 5)])  # both say tie
    missing = Judgment.missing_for("b", "pairwise", "?", "unreadable", 2)
    assert not consensus([pair("a", 8, 6), missing])  # a missing judgment never agrees
    assert not consensus([])
    scores = [Judgment(agent="a", kind="score", score=3), Judgment(agent="b", kind="score", score=3.5)]
    assert not consensus(scores) and consensus(scores, 0.5)


def test_per_order_consensus_under_position_calibration() -> None:
    # the referees agree when Answer two is shown second, and disagree when the orders are swapped:
    # consensus is per run, so the swapped order pays for every round
    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        swapped = prompt.index("Answer two.") < prompt.index("Answer one.")
        if swapped and speaker(prompt) == "Critic":
            return pairwise_reply(6, 8)
        return pairwise_reply(8, 6) if swapped else pairwise_reply(6, 8)

    model = FakeJudge(respond=respond)
    out = calibrate(create_chateval(turns=3, stop_when="consensus"), "bpc").compile().invoke(
        {"item": ITEM}, context=JuryContext(default=model))
    swapped = [p for p in model.prompts() if p.index("Answer two.") < p.index("Answer one.")]
    assert len(model.calls) - len(swapped) == 2 and len(swapped) == 6
    # the calibrated verdict says where each order stopped
    runs = out["verdict"]["detail"]["runs"]
    assert (runs["original_order"]["rounds"], runs["original_order"]["stopped"]) == (1, "consensus")
    assert (runs["swapped_order"]["rounds"], runs["swapped_order"]["stopped"]) == (3, None)


def test_default_is_the_paper_answer_form_on_the_final_turn_only_and_no_exit() -> None:
    builder = create_chateval(turns=3)
    assert not builder.branches and ("critic_t1", "general_public_t2") in edges_of(builder)
    model = panel(AGREE)
    out = builder.compile().invoke({"item": ITEM}, context=JuryContext(default=model))
    assert len(model.calls) == 6 and [FINAL in p for p in model.prompts()] == [False] * 4 + [True] * 2
    assert "rounds" not in out["verdict"]["detail"]


def test_stop_when_is_checked() -> None:
    with pytest.raises(ValueError, match="stop_when"):
        create_chateval(stop_when="unanimity")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tolerance"):
        create_chateval(stop_when="consensus", consensus_tolerance=-1)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_mermaid_early_stop(strategy: str, snapshot) -> None:
    assert create_chateval(strategy=strategy, turns=3, stop_when="consensus").compile().get_graph() \
        .draw_mermaid() == snapshot


def test_cli_records_early_stop_and_sends_one_round_when_the_panel_agrees(openai_server, tmp_path: Path) -> None:
    server = openai_server(lambda request, index: pairwise_reply(6, 8) if FINAL in prompt_of(request) else "?")
    out = tmp_path / "run"
    code = main(["eval", "--protocol", "chateval", "--turns", "3", "--stop-when", "consensus",
                 "--consensus-tolerance", "0.5", "--model", "judge", "--base-url", server.base_url, "--dataset",
                 "faireval", "--limit", "2", "--out", str(out), "--quiet", "--no-calibrate"])
    assert code == 0
    assert len(server.requests) == 2 * 2  # two items, two referees, one round each
    assert all(r["verdict"]["detail"]["rounds"] == 1 for r in read_results(out))
    parameters = json.loads((out / "manifest.json").read_text())["parameters"]
    assert parameters["stop_when"] == "consensus" and parameters["consensus_tolerance"] == 0.5
