"""D3 (SAMRE and MORE) with scripted agents: what each agent heard and when, how many calls each made, when SAMRE's
budgeted stopping ends the debate, the jury's personas and tally, the options that depart from the released code,
resume from a SQLite checkpoint, and the diagrams."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, SystemMessage

import jurygraph.prompts
from jurygraph import EvalItem, JuryContext, verdict_of
from jurygraph.graphs.d3 import create_d3
from jurygraph.judging.doubt import doubt_signals
from jurygraph.measuring.members import member_names
from jurygraph.nodes.d3 import Stopping, anonymize, converged, d3_prompt, draw_jury, persona_pool, stop_reason
from jurygraph.testing import FakeJudge

ITEM = EvalItem(id="q1", task="pairwise", question="How do I boil an egg?", response_1="Boil it for 9 minutes.",
                response_2="Put it in boiling water for 7-9 minutes, then cool it.", human={"label": "2"})
CURATED = ["A retired professor of ethics", "A young environmental activist", "A middle-aged business owner",
           "A social worker specializing in community development", "A technology entrepreneur with a background in AI"]
# the default jury: five of the pool, drawn with seed 42 (personas.get_random_personas(5, seed=42))
POOL_42 = ["An early childhood education specialist", "An economist at a central bank",
           "A bioethics researcher at a university hospital", "A science communicator and author",
           "A technology policy analyst at a think tank"]


class Advocate:
    """An advocate that says 'DEFENSE <side> #k' and summarises it as 'SUMMARY <side> #k'."""

    def __init__(self, side: int) -> None:
        self.side, self.defenses, self.summaries = side, 0, 0

    def __call__(self, prompt: str, messages: Sequence[BaseMessage]) -> str:
        if prompt.startswith("Summarize the following content"):
            self.summaries += 1
            return f"SUMMARY {self.side} #{self.summaries}"
        self.defenses += 1
        return f"DEFENSE {self.side} #{self.defenses}"


def judge(scores: Sequence[tuple[int, int] | None]) -> Callable[[str, Sequence[BaseMessage]], str]:
    """The judge's evaluation of round k ends with ``scores[k]`` (None: no tuple at all); it summarises too."""
    state = {"k": 0}

    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        if prompt.startswith("Summarize the following content"):
            return "JUDGE SUMMARY"
        if "Your reply could not be read" in prompt:
            return "Still no tuple, sorry."
        state["k"] += 1
        score = scores[state["k"] - 1]
        if score is None:
            return f"EVALUATION {state['k']}: Feedback for Advocate 1: clear. Advocate2 is vague.\nI cannot decide."
        return (f"EVALUATION {state['k']}: Feedback for Advocate 1: clear. Advocate2 is vague. [18, 12]\n"
                f"Final tally: ({score[0]}, {score[1]})")

    return respond


def juror(vote: str) -> FakeJudge:
    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        if prompt.startswith("Summarize the following content"):
            return "JUROR SUMMARY"
        return f"Reasoning: the transcript decides.\nVote: {vote}"

    return FakeJudge(respond=respond)


def samre(scores: Sequence[tuple[int, int] | None], votes: Sequence[str] = ("(0, 1)",) * 5,
          **options: Any) -> tuple[dict[str, FakeJudge], dict[str, Any], list[str]]:
    models = {"Advocate1": FakeJudge(respond=Advocate(1)), "Advocate2": FakeJudge(respond=Advocate(2)),
              "Judge": FakeJudge(respond=judge(scores)),
              **{f"Jury{i}": juror(v) for i, v in enumerate(votes, 1)}}
    graph = create_d3(mode="samre", jurors=len(votes), **options).compile()
    nodes: list[str] = []
    out: dict[str, Any] = {}
    context = JuryContext(models=models, default=FakeJudge(fail_when=lambda p: True, model_name="unexpected"))
    for mode, chunk in graph.stream({"item": ITEM}, context=context, stream_mode=["updates", "values"]):
        if mode == "updates":
            nodes += list(chunk)
        else:
            out = chunk
    return models, out, nodes


STEADY = [(90, 80)] * 5  # the same gap every round: converges once allowed
GROWING = [(60, 58), (70, 60), (80, 62), (90, 64), (99, 66)]  # a strictly growing gap never converges


def test_samre_who_heard_what_round_by_round() -> None:
    models, out, nodes = samre(GROWING)
    rounds = 5
    debate = 3 * rounds + 1
    assert nodes[:debate] == ["advocate_1", "advocate_2", "judge"] * rounds + ["transcript"]
    assert sorted(nodes[debate:-1]) == [f"jury_{i}" for i in range(1, 6)] and nodes[-1] == "verdict"  # one superstep
    a1, a2, j = (models[n].calls for n in ("Advocate1", "Advocate2", "Judge"))
    assert (len(a1), len(a2), len(j)) == (2 * rounds, 2 * rounds, 2 * rounds)  # defense + summary; evaluation + summary
    for call in [*a1, *a2, *j]:
        assert isinstance(call.messages[0], SystemMessage) and len(call.messages) == 2
    assert a1[0].messages[0].text == "You are a , named Advocate1, your goal is . "
    assert j[0].messages[0].text == "You are a , named Judge, your goal is . "
    for r in range(1, rounds + 1):
        defend1, summarize1, defend2, summarize2 = a1[2 * r - 2], a1[2 * r - 1], a2[2 * r - 2], a2[2 * r - 1]
        evaluation = j[2 * r - 2]
        # advocate 1 hears advocate 2's summary of the previous round and the judge's whole last evaluation
        if r == 1:
            assert "Latest feedback: \n" in defend1.prompt and "Opponent's last argument: \n" in defend1.prompt
        else:
            said = f"EVALUATION {r - 1}: Feedback for Advocate 1: clear. Advocate2 is vague. [18, 12]\n" \
                   f"Final tally: ({GROWING[r - 2][0]}, {GROWING[r - 2][1]})\n\nScores: ({GROWING[r - 2][0]}, " \
                   f"{GROWING[r - 2][1]})"
            assert f"Latest feedback: {said}\n" in defend1.prompt and f"Latest feedback: {said}\n" in defend2.prompt
            assert f"Opponent's last argument: SUMMARY 2 #{r - 1}\n" in defend1.prompt
        # advocate 2 hears advocate 1's summary of this round (they speak in turn)
        assert f"Opponent's last argument: SUMMARY 1 #{r}\n" in defend2.prompt
        # each summarises its own defense, and nobody else ever hears the defense
        assert summarize1.prompt.endswith(f"DEFENSE 1 #{r}") and summarize2.prompt.endswith(f"DEFENSE 2 #{r}")
        # the judge scores this round's two summaries, with the scores of the rounds before
        assert f"Defense for 1st answer: SUMMARY 1 #{r}\n" in evaluation.prompt
        assert f"Defense for 2nd answer: SUMMARY 2 #{r}\n" in evaluation.prompt
        assert f"Current round: {r}\n    Max rounds: 5\n" in evaluation.prompt
        assert f"Previous scores: {GROWING[:r - 1]!s}\n" in evaluation.prompt
        assert j[2 * r - 1].prompt.endswith(f"Scores: ({GROWING[r - 1][0]}, {GROWING[r - 1][1]})")
    everyone_else = [c.prompt for name, m in models.items() for c in m.calls if name != "Advocate1"]
    assert not any("DEFENSE 1 #" in p for p in everyone_else)

    # the jury: each juror its persona of the pool, the anonymized transcript (summaries, judge, scores), no defenses
    for i, identity in enumerate(POOL_42, 1):
        vote, summary = models[f"Jury{i}"].calls
        assert vote.messages[0].text == f"You are a , named Jury{i}, your goal is . "
        assert vote.prompt.startswith(f"As a jury member with the identity of {identity}, you are observing a debate "
                                      f"on the question: {ITEM.question}\n        This is the debate:\n        "
                                      "Transcript: ANONYMIZED DEBATE TRANSCRIPT:\n====")
        assert "Defense A:\nSUMMARY 1 #1" in vote.prompt and "Defense B:\nSUMMARY 2 #5" in vote.prompt
        assert "Scores: Defense A: 99, Defense B: 66" in vote.prompt
        assert "Feedback for Defense A: clear. Defense B is vague." not in vote.prompt  # "Advocate 1" stays
        assert "Feedback for Advocate 1: clear. Defense B is vague." in vote.prompt
        debate = vote.prompt.split("Based on the arguments presented")[0]
        assert "DEFENSE" not in debate and "Advocate2" not in debate
        assert summary.prompt.endswith("Reasoning: the transcript decides.\nVote: (0, 1)")
    assert {a: u["requests"] for a, u in out["usage"].items()} == {
        "Advocate1": 10, "Advocate2": 10, "Judge": 10, **{f"Jury{i}": 2 for i in range(1, 6)}}

    verdict = verdict_of(out)
    assert verdict is not None
    assert (verdict.label, verdict.votes, verdict.method) == ("2", {"1": 0, "2": 5}, "jury vote")
    assert verdict.detail["rounds"] == 5 and verdict.detail["stopped"] == "max_rounds_reached"
    assert verdict.detail["round_scores"] == [list(s) for s in GROWING]
    # the judge's own result: its mean score over the rounds (the released experiments' "court result")
    assert verdict.detail["judge"] == {"score_1": 79.8, "score_2": 62.0, "label": "1"}
    assert [j["identity"] for j in verdict.detail["jury"]] == POOL_42 and verdict.detail["persona_seed"] == 42
    # what each agent said and heard is kept, call by call: system message, prompt, reply
    history = out["histories"]["Advocate1"]
    assert len(history) == 3 * 2 * rounds and history[2].text == "DEFENSE 1 #1" and history[5].text == "SUMMARY 1 #1"


@pytest.mark.parametrize(("scores", "options", "rounds", "stopped"), [
    pytest.param(STEADY, {}, 3, "converged", id="converges-at-the-code's-minimum-round-3"),
    pytest.param(GROWING, {}, 5, "max_rounds_reached", id="a-strictly-growing-gap-runs-R-rounds"),
    pytest.param([(90, 80), (87, 80), (90, 80)], {}, 3, "converged", id="oscillation-within-epsilon"),
    pytest.param([(90, 80), (85, 80), (90, 80), (88, 80), (90, 80)], {}, 5, "max_rounds_reached",
                 id="a-range-of-epsilon-is-not-below-it"),
    pytest.param([(90, 80), (90, 70), (90, 80), (90, 80), (90, 80)], {}, 5, "max_rounds_reached",
                 id="range-of-10-is-not-below-epsilon-until-round-5-is-R"),
    pytest.param(STEADY, {"convergence_window": 2, "min_rounds": 2}, 2, "converged", id="readme-reading-round-2"),
    pytest.param(STEADY, {"rounds": 2}, 2, "max_rounds_reached", id="R=2"),
    pytest.param(GROWING, {"epsilon": 0.0}, 5, "max_rounds_reached", id="epsilon-0-never-converges"),
])
def test_samre_budgeted_stopping(scores: list[tuple[int, int]], options: dict[str, Any], rounds: int,
                                 stopped: str) -> None:
    models, out, _ = samre(scores, **options)
    verdict = verdict_of(out)
    assert verdict is not None and (verdict.detail["rounds"], verdict.detail["stopped"]) == (rounds, stopped)
    assert len(models["Judge"].calls) == 2 * rounds and len(models["Advocate1"].calls) == 2 * rounds


def test_the_token_budget_stops_after_the_round_that_passes_it() -> None:
    _, out, _ = samre(GROWING, token_budget=1)
    verdict = verdict_of(out)
    assert verdict is not None and (verdict.detail["rounds"], verdict.detail["stopped"]) == (1, "token_budget_exceeded")
    # the budget counts every call of the debate so far (from each reply's usage): a round's tokens reach it
    _, out, _ = samre(GROWING)
    per_round = out["debate_tokens"] / 5
    _, out, _ = samre(GROWING, token_budget=int(2.5 * per_round))
    assert verdict_of(out).detail["rounds"] == 3  # type: ignore[union-attr]


def test_the_convergence_rule_of_the_released_code() -> None:
    assert converged([(90, 80)] * 3, 5.0, 3, 3) and not converged([(90, 80)] * 2, 5.0, 3, 3)
    assert not converged([(90, 80), (91, 80), (92, 80)], 5.0, 3, 3)  # strictly growing gap: a trend, not converged
    assert not converged([(92, 80), (91, 80), (90, 80)], 5.0, 3, 3)  # strictly shrinking
    assert converged([(90, 80), (91, 80), (91, 80)], 5.0, 3, 3)  # a plateau is not strict
    assert converged([(90, 80), (94, 80), (91, 80)], 5.0, 3, 3) and not converged([(90, 80), (95, 80), (91, 80)],
                                                                                    5.0, 3, 3)
    assert converged([(80, 90), (90, 80), (80, 90)], 5.0, 3, 3)  # the gap's size: |s1 - s2|
    assert not converged([(90, 80), None, (90, 80)], 5.0, 3, 3)  # a round without a score is not a stable gap
    assert converged([(90, 80), None, (90, 80), (90, 80), (90, 80)], 5.0, 3, 3)
    assert not converged([(90, 80)] * 3, 5.0, 3, 4)  # min_rounds
    assert stop_reason([(90, 80)] * 2, 10**6, Stopping(max_rounds=2, token_budget=5)) == "max_rounds_reached"
    assert stop_reason([(90, 80)], 6, Stopping(token_budget=5)) == "token_budget_exceeded"
    assert stop_reason([(90, 80)], 5, Stopping(token_budget=5)) is None  # "exceeds": more than the budget


def more(votes: Sequence[str] = ("(1, 0)",) * 5, scorer_reply: str = "[18, 12] ... (95, 87) then (60, 99)",
         **options: Any) -> tuple[dict[str, FakeJudge], dict[str, Any]]:
    k = options.get("advocates", 3)
    models: dict[str, FakeJudge] = {}
    for side in (1, 2):
        for i in range(1, k + 1):
            models[f"AdvocateGroup{side}_Advocate{i}"] = FakeJudge(script=[f"DEFENSE {side}.{i}"])
        models[f"AdvocateGroup{side}_Aggregator"] = FakeJudge(script=[f"MERGED {side}"])
    models["Judge"] = FakeJudge(script=["FEEDBACK: AdvocateGroup1 must cite sources."])
    models["Scorer"] = FakeJudge(script=[scorer_reply])
    models.update({f"Jury{i}": FakeJudge(script=[f"Reasoning: r.\nVote: {v}"]) for i, v in enumerate(votes, 1)})
    graph = create_d3(mode="more", jurors=len(votes), **options).compile()
    out = graph.invoke({"item": ITEM}, context=JuryContext(models=models))
    return models, out


def test_more_who_heard_what() -> None:
    models, out = more(personas="curated")  # the released code's jury
    prompt = {name: m.calls[0].prompt for name, m in models.items()}
    assert all(len(m.calls) == 1 for m in models.values())
    for i in (1, 2, 3):
        first, second = prompt[f"AdvocateGroup1_Advocate{i}"], prompt[f"AdvocateGroup2_Advocate{i}"]
        assert f"(Advocate {i}) in a group defending this answer: {ITEM.response_1} " in first
        assert f"(Advocate {i}) in a group defending this answer: {ITEM.response_2} " in second
        assert "Your team's previous arguments: ['', '', '']\n" in first
        # group 1 speaks first and hears nobody; group 2 hears group 1's merged defense
        assert "Opponent's last argument: \n" in first and "Opponent's last argument: MERGED 1\n" in second
        assert "Latest feedback: \n" in first and "Latest feedback: \n" in second
    assert "Individual defenses:\n    DEFENSE 1.1\nDEFENSE 1.2\nDEFENSE 1.3\n" in prompt["AdvocateGroup1_Aggregator"]
    assert "Individual defenses:\n    DEFENSE 2.1\nDEFENSE 2.2\nDEFENSE 2.3\n" in prompt["AdvocateGroup2_Aggregator"]
    for agent in ("Judge", "Scorer"):
        assert "Defense for 1st answer: MERGED 1\n    Defense for 2nd answer: MERGED 2\n" in prompt[agent]
        assert "Previous scores: []\n" in prompt[agent] and "FEEDBACK" not in prompt[agent]
    assert "Current round: 1\n    Total rounds: 1\n" in prompt["Judge"]
    for i, identity in enumerate(CURATED, 1):
        vote = prompt[f"Jury{i}"]
        assert vote.startswith(f"As a jury member with the identity of {identity}, you are observing a debate on the "
                               f"question: {ITEM.question}\n        This is the debate:\n        =====")
        assert "Defense A:\nMERGED 1\n\nDefense B:\nMERGED 2" in vote
        assert "Judge's Round 1 Feedback:\nFEEDBACK: Defense A must cite sources.\nScores: Defense A: 95, " \
               "Defense B: 87" in vote  # the scorer's FIRST tuple, the judge's anonymized feedback
        assert "DEFENSE" not in vote
    verdict = verdict_of(out)
    assert verdict is not None and (verdict.label, verdict.votes) == ("1", {"1": 5, "2": 0})
    assert verdict.detail["judge"] == {"score_1": 95.0, "score_2": 87.0, "label": "1"}
    assert (verdict.detail["rounds"], verdict.detail["advocates"], verdict.detail["stopped"]) == (1, 3, None)
    assert out["usage"]["Scorer"]["role"] == "scorer" and out["usage"]["AdvocateGroup2_Aggregator"]["role"] == \
        "aggregator"


def test_panel_members_are_the_jurors_and_the_judge_not_the_advocates() -> None:
    _, out = more(advocates=2)
    record = {"verdict": out["verdict"], "judgments": out["judgments"]}
    assert member_names([record]) == ["Scorer", "Jury1", "Jury2", "Jury3", "Jury4", "Jury5"]
    _, samre_out, _ = samre(STEADY)
    assert sorted(samre_out["judgments"]) == ["Judge", "Jury1", "Jury2", "Jury3", "Jury4", "Jury5"]
    # the judge's judgment is its mean over the rounds; the panel split 5-1 gives the agreement signal
    signals = doubt_signals({"verdict": samre_out["verdict"], "judgments": samre_out["judgments"]})
    assert signals["agreement"] == pytest.approx(5 / 6) and signals["missing"] == 0


@pytest.mark.parametrize(("votes", "ties", "label"), [
    (("(1, 0)", "(0, 1)", "(1, 0)", "(0, 1)"), "keep", "tie"),
    (("(1, 0)", "(0, 1)", "(1, 0)", "(0, 1)"), "code", "2"),  # the code's `A if votes[0] > votes[1] else B`
    (("(1, 0)", "(1, 0)", "(0, 1)", "(0, 1)", "(1, 0)"), "code", "1"),
    (("(1, 1)", "(0, 0)", "(1, 0)"), "keep", "1"),  # tuples are added up as the code adds them
])
def test_the_tally_and_ties(votes: tuple[str, ...], ties: str, label: str) -> None:
    _, out = more(votes=votes, ties=ties)
    verdict = verdict_of(out)
    assert verdict is not None and verdict.label == label


def test_vote_reading_binary_by_default_and_the_samre_codes_any_tuple() -> None:
    votes = ("(1, 0) -- I weigh it as (95, 87)",) * 3
    _, out = more(votes=votes)
    assert verdict_of(out).votes == {"1": 3, "2": 0}  # type: ignore[union-attr]
    _, out = more(votes=votes, vote_reading="any")
    assert verdict_of(out).votes == {"1": 285, "2": 261}  # type: ignore[union-attr]


def test_verdict_by_the_judge() -> None:
    _, out, _ = samre(GROWING, votes=("(0, 1)",) * 3, verdict="judge")
    verdict = verdict_of(out)
    assert verdict is not None and (verdict.label, verdict.method) == ("1", "judge")
    assert (verdict.score_1, verdict.score_2) == (79.8, 62.0) and verdict.detail["jury_votes"] == {"1": 0, "2": 3}


def test_an_unreadable_judge_round_is_missing_not_zero() -> None:
    scores = [(90, 80), None, (90, 80), (90, 80), (90, 80)]
    models, out, _ = samre(scores)
    judge_calls = models["Judge"].calls
    # re-asked once with the answer form, then missing: no "Scores:" line, not among the previous scores
    assert "Your reply could not be read (no score tuple (score1, score2) in the reply)" in judge_calls[3].prompt
    assert "Sum up the scores and return the final score tuple (score1, score2). Example: (95, 87)" in \
        judge_calls[3].prompt
    assert "Previous scores: [(90, 80)]\n" in judge_calls[5].prompt
    round_2 = out["judge_rounds"][1]
    assert round_2["missing"] and "Scores:" not in round_2["feedback"]
    verdict = verdict_of(out)
    assert verdict is not None and verdict.detail["round_scores"][1] is None
    # the window of rounds 1-3 holds a missing round: the debate converges at round 5, not 3
    assert (verdict.detail["rounds"], verdict.detail["stopped"]) == (5, "max_rounds_reached")
    # what the judge said last (its answer to the re-ask) is its feedback of the round, without a scores line
    assert "Judge's Round 2 Feedback:\nStill no tuple, sorry.\n\n--- Round 3" in out["anonymized_transcript"]
    assert "Latest feedback: Still no tuple, sorry.\n" in models["Advocate1"].calls[4].prompt


def test_the_codes_reading_of_an_unreadable_reply_is_an_option() -> None:
    scores = [(90, 80), None, (90, 80), (90, 80), (90, 80)]
    models, out, _ = samre(scores, unreadable="code")
    assert not any("could not be read" in c.prompt for c in models["Judge"].calls)  # no re-ask
    assert out["judge_rounds"][1]["feedback"].endswith("I cannot decide.\n\nScores: (0, 0)")
    assert "Previous scores: [(90, 80), (0, 0)]\n" in models["Judge"].calls[4].prompt
    verdict = verdict_of(out)
    assert verdict is not None and verdict.detail["round_scores"][1] == [0, 0] and verdict.detail["rounds"] == 5


def test_unread_summaries_can_be_left_out() -> None:
    models, _, _ = samre(STEADY, unread_summaries=False)
    assert len(models["Judge"].calls) == 3 and all(len(models[f"Jury{i}"].calls) == 1 for i in range(1, 6))
    assert len(models["Advocate1"].calls) == 6  # the advocates' summaries are heard: always sent


def test_the_jury_personas() -> None:
    pool = persona_pool()
    # by default, drawn from the pool as the released get_random_personas(n, seed=seed) draws:
    # random.seed(seed); random.sample(pool, n)
    random.seed(7)
    expected = random.sample(pool, 5)
    assert [j.persona for j in draw_jury(5, "pool", 7)] == [p["name"] for p in expected]
    assert [j.identity for j in draw_jury(5, "pool", 42)] == POOL_42
    graph = create_d3(mode="more", persona_seed=7).compile()
    models = {"advocate": FakeJudge(respond=lambda p, m: "x"), "aggregator": FakeJudge(respond=lambda p, m: "x"),
              "judge": FakeJudge(respond=lambda p, m: "x"), "scorer": FakeJudge(respond=lambda p, m: "(2, 1)"),
              "juror": FakeJudge(respond=lambda p, m: "Vote: (1, 0)")}
    out = graph.invoke({"item": ITEM}, context=JuryContext(models=models))
    verdict = verdict_of(out)
    assert verdict is not None and verdict.detail["persona_seed"] == 7 and verdict.detail["personas"] == "pool"
    assert [j["persona"] for j in verdict.detail["jury"]] == [p["name"] for p in expected]
    identities = [c.prompt.split("identity of ")[1].split(", you are")[0] for c in models["juror"].calls]
    assert sorted(identities) == sorted(j["identity"] for j in verdict.detail["jury"])
    # the released code's curated five, cycled beyond five as the code does; or names of the pool
    assert len(pool) == 50 and [j.identity for j in draw_jury(7, "curated")] == [*CURATED, *CURATED[:2]]
    assert [j.persona for j in draw_jury(2, ["Economist", "Pediatrician"])] == ["Economist", "Pediatrician"]


@pytest.mark.parametrize(("options", "message"), [
    ({"mode": "more", "rounds": 3}, "rounds: SAMRE option"),
    ({"mode": "more", "token_budget": 100}, "token_budget: SAMRE option"),
    ({"mode": "samre", "advocates": 2}, "advocates: MORE option"),
    ({"personas": "curated", "persona_seed": 3}, "needs personas='pool'"),
    ({"jurors": 51}, "too many"),
    ({"personas": ["Nobody"]}, "unknown persona"),
    ({"mode": "both"}, "mode must be one of samre, more"),
    ({"ties": "b"}, "ties must be one of keep, code"),
    ({"jurors": 0}, "at least 1"),
    ({"rounds": 0}, "at least 1"),
])
def test_options_that_cannot_take_effect_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        create_d3(**options)


def test_only_pairwise_items() -> None:
    item = EvalItem(id="s1", task="score", response="A summary.", scale={"low": 1, "high": 5})
    graph = create_d3(mode="more").compile()
    with pytest.raises(ValueError, match="item 's1': D3 compares two answers"):
        graph.invoke({"item": item}, context=JuryContext(default=FakeJudge(respond=lambda p, m: "x")))


def test_anonymization_as_the_released_anonymizer() -> None:
    assert anonymize("advocate1 and ADVOCATE2 vs Opponent of Advocate1; AdvocateGroup2") == \
        "Defense A and Defense B vs Opposing Defense A; Defense B"
    assert anonymize("Feedback for Advocate 1:") == "Feedback for Advocate 1:"  # the judge's own spelling stays


def test_resume_from_a_sqlite_checkpoint_pays_nothing_twice(sqlite_saver) -> None:
    failing = {"once": True}

    def flaky(prompt: str) -> bool:
        if "Current round: 2" in prompt and failing["once"]:
            failing["once"] = False
            return True
        return False

    judge_model = FakeJudge(respond=judge(STEADY), fail_when=flaky)
    models = {"Advocate1": FakeJudge(respond=Advocate(1)), "Advocate2": FakeJudge(respond=Advocate(2)),
              "Judge": judge_model, "juror": juror("(1, 0)")}
    graph = create_d3(unread_summaries=False).compile(checkpointer=sqlite_saver)
    config = {"configurable": {"thread_id": ITEM.id}}
    with pytest.raises(RuntimeError, match="scripted failure"):
        graph.invoke({"item": ITEM}, config, context=JuryContext(models=models))
    out = graph.invoke(None, config, context=JuryContext(models=models))
    verdict = verdict_of(out)
    assert verdict is not None and verdict.detail["rounds"] == 3 and verdict.label == "1"
    # round 2's advocates are not asked again; the judge's failed call is
    assert len(models["Advocate1"].calls) == 6 and len(judge_model.calls) == 4


@pytest.mark.parametrize(("mode", "options"), [("samre", {}), ("more", {"advocates": 2, "jurors": 3})],
                         ids=["samre", "more-k2-n3"])
def test_mermaid_diagram(mode: str, options: dict[str, Any], snapshot) -> None:
    mermaid = create_d3(mode=mode, **options).compile().get_graph().draw_mermaid()
    assert "transcript --> jury_1" in mermaid and "verdict --> __end__" in mermaid
    assert mermaid == snapshot


def test_every_d3_prompt_file_says_where_it_comes_from() -> None:
    folder = Path(jurygraph.prompts.__file__).parent / "d3"
    files = sorted(folder.glob("*.txt"))
    assert len(files) == 10
    for path in files:
        assert path.read_text(encoding="utf-8").startswith("#: "), path.name
        assert not d3_prompt(path.stem).startswith("#:"), path.name
