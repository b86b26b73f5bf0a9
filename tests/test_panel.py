"""Panel diagnostics on records whose members' judgments are scripted, so that every figure is known: an oracle
that agrees with every human label, a seeded coin, a twin that copies the coin, a noisy judge. Each expected
value is computed here from the scripts, with numpy formulas independent of jurygraph's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jurygraph.graphs import debate, single
from jurygraph.graphs.debate import AFTER, BEFORE
from jurygraph.measuring.conformity import conformity
from jurygraph.measuring.families import family_of, parse_rules
from jurygraph.measuring.members import member_judgments, member_names
from jurygraph.measuring.metaeval import evaluate_records
from jurygraph.measuring.metrics import effective_number, error_correlation
from jurygraph.measuring.panel import member_position, panel_diagnostics, panel_json, same_family
from jurygraph.measuring.position import calibrated_pairs
from jurygraph.nodes.faireval import FAIREVAL_AGENT

LABELS = np.array(["1", "2", "tie"])
ORD = {"1": 1.0, "tie": 0.0, "2": -1.0}
N = 120


def scripted_labels() -> dict[str, np.ndarray]:
    human = np.random.default_rng(2024).choice(LABELS, size=N)
    coin = np.random.default_rng(7).choice(LABELS, size=N)
    rng = np.random.default_rng(11)
    other = np.array([rng.choice([x for x in LABELS if x != h]) for h in human])
    noisy = np.where(rng.random(N) < 0.6, human, other)
    return {"human": human, "oracle": human.copy(), "coin": coin, "twin": coin.copy(), "noisy": noisy}


def majority(labels: list[str]) -> str:
    counts = {label: labels.count(label) for label in set(labels)}
    top = max(counts.values())
    winners = [label for label, n in counts.items() if n == top]
    return winners[0] if len(winners) == 1 else "tie"


def pairwise_records(script: dict[str, np.ndarray]) -> list[dict]:
    members = ["oracle", "coin", "twin", "noisy"]
    records = []
    for i in range(N):
        labels = {m: str(script[m][i]) for m in members}
        records.append({
            "id": str(i), "status": "ok", "task": "pairwise", "dataset": "synthetic",
            "human": {"label": str(script["human"][i])},
            "verdict": {"kind": "pairwise", "label": majority(list(labels.values())), "missing": False},
            "judgments": {m: {"agent": m, "kind": "pairwise", "label": label, "missing": False}
                          for m, label in labels.items()},
            "usage": {m: {"model": f"openai:{m}@http://127.0.0.1:1/v1"} for m in members},
        })
    return records


def kappa(pred: np.ndarray, gold: np.ndarray) -> float:
    p_o = float(np.mean(pred == gold))
    p_e = sum(float(np.mean(pred == c)) * float(np.mean(gold == c)) for c in LABELS)
    return (p_o - p_e) / (1 - p_e)


def test_members_error_correlation_and_effective_judges_of_a_scripted_pairwise_panel() -> None:
    script = scripted_labels()
    records = pairwise_records(script)
    verdict = evaluate_records(records, "panel", resamples=200)
    [panel] = panel_diagnostics("panel", records, verdict, resamples=200)
    human = script["human"]
    by_name = {m.name: m.result.labels for m in panel.members}
    assert list(by_name) == ["oracle", "coin", "twin", "noisy"]
    for name in by_name:
        found = by_name[name]
        assert found is not None and found.n == N
        assert found.accuracy == pytest.approx(float(np.mean(script[name] == human)))
        assert found.kappa == pytest.approx(kappa(script[name], human))
    assert by_name["oracle"].accuracy == 1.0 and by_name["oracle"].kappa == pytest.approx(1.0)
    # the coin agrees about a third of the time, as a coin should
    assert 0.2 < by_name["coin"].accuracy < 0.45

    # panel minus best member: the oracle is best, and the majority of four is worse than it
    verdict_labels = np.array([majority([str(script[m][i]) for m in ("oracle", "coin", "twin", "noisy")])
                               for i in range(N)])
    best = panel.vs_best
    assert best is not None and best.best == "oracle" and best.statistic == "accuracy"
    assert best.test.difference == pytest.approx(float(np.mean(verdict_labels == human)) - 1.0)
    assert best.test.low <= best.test.difference <= best.test.high < 0

    # error correlation: signed label errors; the oracle never errs, so it has no correlation
    errors = panel.errors
    assert errors is not None and errors.items == N and errors.counted == ["coin", "twin", "noisy"]
    signed = {m: np.array([ORD[p] - ORD[h] for p, h in zip(script[m], human, strict=True)])
              for m in ("coin", "twin", "noisy")}
    expected = np.corrcoef(np.vstack([signed["coin"], signed["twin"], signed["noisy"]]))
    oracle = errors.members.index("oracle")
    assert np.isnan(np.delete(errors.matrix[oracle], oracle)).all() and errors.matrix[oracle, oracle] == 1
    counted = [errors.members.index(m) for m in ("coin", "twin", "noisy")]
    assert np.allclose(errors.matrix[np.ix_(counted, counted)], expected)
    assert errors.matrix[counted[0], counted[1]] == pytest.approx(1.0)  # the twin copies the coin
    # effective number: k^2 / sum of squared correlations (the participation ratio, without eigenvalues)
    assert errors.effective == pytest.approx(9 / float(np.sum(expected ** 2)))
    assert 1.0 < errors.effective < 2.0  # two copies count once, the noisy judge shares the coin's blind spots
    assert errors.interval is not None and errors.interval.low <= errors.effective <= errors.interval.high

    # the same, as JSON with the field names
    data = panel_json(panel)
    assert [m["name"] for m in data["members"]] == ["oracle", "coin", "twin", "noisy"]
    assert data["panel_vs_best"]["best"] == "oracle"
    assert data["effective_judges"] == pytest.approx(errors.effective)
    assert data["error_correlation"]["matrix"][oracle][counted[0]] is None
    assert data["members"][0]["model"] == "openai:oracle@http://127.0.0.1:1/v1"
    assert data["conformity"] is None  # no protocol here records a judgment per round


def test_scored_members_are_measured_as_the_verdict_is() -> None:
    rng = np.random.default_rng(3)
    human = rng.integers(1, 6, size=80).astype(float)
    scores = {"exact": human.copy(), "random": rng.integers(1, 6, size=80).astype(float)}
    scores["copy"] = scores["random"].copy()
    scores["noisy"] = human + rng.normal(0, 1, size=80)
    records = [{"id": str(i), "task": "score", "aspect": "coherence", "human": {"coherence": float(human[i])},
                "verdict": {"kind": "score", "score": float(np.mean([s[i] for s in scores.values()])),
                            "missing": False},
                "judgments": {m: {"agent": m, "kind": "score", "score": float(s[i]), "missing": False}
                              for m, s in scores.items()}} for i in range(80)]
    verdict = evaluate_records(records, "panel", resamples=100)
    [panel] = panel_diagnostics("panel", records, verdict, statistic="pearson", resamples=100)
    assert panel.target == "coherence" and panel.statistic == "pearson"
    for member in panel.members:
        found = member.result.aspects["coherence"].correlation
        assert found.pearson == pytest.approx(float(np.corrcoef(scores[member.name], human)[0, 1]))
    assert panel.vs_best is not None and panel.vs_best.best == "exact"
    errors = panel.errors
    assert errors is not None and errors.counted == ["random", "copy", "noisy"]
    residuals = np.vstack([scores[m] - human for m in ("random", "copy", "noisy")])
    expected = np.corrcoef(residuals)
    assert errors.effective == pytest.approx(9 / float(np.sum(expected ** 2)))


@pytest.mark.parametrize(("matrix", "expected"), [
    (np.eye(4), 4.0),  # independent judges
    (np.ones((3, 3)), 1.0),  # the same errors three times
    (np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1.0]]), 9 / 5),  # a pair of copies and one independent judge
    (np.full((5, 5), 0.5) + 0.5 * np.eye(5), 5 / (1 + 4 * 0.25)),  # equicorrelated: k / (1 + (k-1) rho^2)
])
def test_effective_number_of_known_correlation_matrices(matrix: np.ndarray, expected: float) -> None:
    assert effective_number(matrix) == pytest.approx(expected)


def test_error_correlation_leaves_a_constant_judge_undefined() -> None:
    found = error_correlation(np.array([[0, 0, 0, 0], [1, -1, 0, 1], [2, -2, 0, 2.0]]))
    assert np.isnan(found[0, 1]) and np.isnan(found[2, 0]) and found[0, 0] == 1
    assert found[1, 2] == pytest.approx(1.0)
    assert math.isnan(effective_number(found))


def debate_record(item: str, human: float, scores: list[float | None]) -> dict:
    return {"id": item, "task": "score", "aspect": "coherence", "human": {"coherence": human},
            "verdict": {"kind": "score", "score": scores[-1], "missing": False,
                        "detail": {"ended": "no_issue", "decided_by": "Scorer", "scores": scores}},
            "judgments": {"Scorer": {"agent": "Scorer", "kind": "score", "score": scores[-1], "missing": False}},
            "usage": {"Scorer": {"model": "openai:gpt-4o"}}}


def test_debate_members_are_the_scorer_before_and_after_critique_and_its_revisions_are_counted() -> None:
    records = [debate_record("a", 4.0, [2.0, 3.0, 5.0]),  # toward the human score, then level with it
               debate_record("b", 4.0, [4.0, 2.0]),  # away
               debate_record("c", 3.0, [3.0]),  # NO ISSUE at once: no transition
               debate_record("d", 1.0, [None, 2.0])]  # an unreadable first score: no transition
    panel = debate.SPEC.panel  # who DEBATE's members are is its spec's to say
    assert member_names(records, panel) == [BEFORE, AFTER]
    assert member_judgments(records[0], panel) == {BEFORE: {"kind": "score", "missing": False, "score": 2.0},
                                                   AFTER: {"kind": "score", "missing": False, "score": 5.0}}
    assert member_judgments(records[3], panel)[BEFORE]["missing"] is True
    [scorer, total] = conformity(records, panel) or []
    assert (scorer.member, scorer.transitions, scorer.moves) == ("Scorer", 3, 3)
    assert (scorer.toward_human, scorer.away_from_human) == (1, 1)  # 2->3 toward, 4->2 away, 3->5 neither
    assert scorer.with_others == 0 and math.isnan(scorer.conformity)  # the Critic gives no score
    assert total.moves == 3


def rounds_record(rounds: list[dict[str, str]], human: str, run: str | None = None) -> dict:
    entries = [{"round": r, "agent": agent, "label": label, "missing": False}
               for r, said in enumerate(rounds, 1) for agent, label in said.items()]
    detail: dict = {"round_judgments": entries}
    if run is not None:
        detail = {"calibration": "bpc", "runs": {run: {"label": "tie", "round_judgments": entries}}}
    return {"id": "q", "task": "pairwise", "human": {"label": human},
            "verdict": {"kind": "pairwise", "label": "2", "missing": False, "detail": detail}}


def test_conformity_counts_moves_toward_the_others_and_toward_the_human_label() -> None:
    # round 1: A says 1, B and C say 2; round 2: A comes round to 2 (toward the others, toward the human 2);
    # C goes to 1 (its others, A=1 and B=2, average to a tie: neither toward nor away; away from the human)
    record = rounds_record([{"A": "1", "B": "2", "C": "2"}, {"A": "2", "B": "2", "C": "1"}], human="2")
    found = {m.member: m for m in conformity([record]) or []}
    assert (found["A"].moves, found["A"].toward_others, found["A"].toward_human) == (1, 1, 1)
    assert (found["B"].moves, found["B"].transitions) == (0, 1)
    assert (found["C"].moves, found["C"].toward_others, found["C"].away_from_others) == (1, 0, 0)
    assert found["C"].away_from_human == 1
    assert found["all"].conformity == pytest.approx(1 / 3)
    # the same rounds said in the swapped order are mapped back first: A's "2" there is Assistant 1 here
    swapped = rounds_record([{"A": "2", "B": "1"}, {"A": "1", "B": "1"}], human="2", run="swapped_order")
    moved = {m.member: m for m in conformity([swapped]) or []}
    assert (moved["A"].toward_others, moved["A"].toward_human) == (1, 1)


def calibrated_record(item: str, said: dict[str, tuple[str, str]], human: str = "1") -> dict:
    """Each member's label in the original order and, as said, in the swapped order."""
    scores = {"1": (8, 4), "2": (4, 8), "tie": (6, 6)}
    judgments = {}
    for member, (original, swapped) in said.items():
        for run, label in (("original_order", original), ("swapped_order", swapped)):
            one, two = scores[label]
            judgments[f"{run}/{member}"] = {"agent": member, "kind": "pairwise", "label": label, "score_1": one,
                                            "score_2": two, "missing": False}
    return {"id": item, "task": "pairwise", "human": {"label": human}, "judgments": judgments,
            "verdict": {"kind": "pairwise", "label": "1", "missing": False, "detail": {"calibration": "bpc"}}}


def test_a_calibrated_member_is_mapped_back_and_its_position_bias_measured() -> None:
    # Biased says "1" in both orders: the answer shown first, i.e. a different answer each time;
    # Steady says "1" then "2" as shown: Assistant 1 both times
    records = [calibrated_record(str(i), {"Biased": ("1", "1"), "Steady": ("1", "2")}) for i in range(3)]
    views = member_judgments(records[0])
    assert views["Steady"]["label"] == "1" and views["Biased"]["label"] == "tie"  # 8-4 and 4-8: equal means
    biases = {b.name: b for b in member_position(["run"], [records], [None])[0]}
    assert (biases["Biased"].pairs, biases["Biased"].flips, biases["Biased"].favoured) == (3, 3, "first")
    assert (biases["Steady"].flips, biases["Steady"].first, biases["Steady"].second) == (0, 3, 3)


def test_same_family_warns_with_the_judges_picks_beside_the_others_and_the_humans() -> None:
    records = []
    for i, human in enumerate(["1", "2", "1", "tie"]):
        records.append({"id": str(i), "task": "pairwise", "human": {"label": human},
                        "verdict": {"kind": "pairwise", "label": "1", "missing": False},
                        "judgments": {"Mini": {"kind": "pairwise", "label": "1", "missing": False},
                                      "Llama": {"kind": "pairwise", "label": "2", "missing": False},
                                      "Other": {"kind": "pairwise", "label": "tie", "missing": False}},
                        "usage": {"Mini": {"model": "openai:gpt-4o-mini@http://127.0.0.1:9/v1"},
                                  "Llama": {"model": "openai:llama3@http://127.0.0.1:9/v1"},
                                  "Other": {"model": "openai:acme-7b"}}})
    systems = {str(i): ("gpt35", "vicuna") for i in range(4)}
    warnings = {(w.member, w.system): w for w in same_family("run", records, systems)}
    assert set(warnings) == {("Mini", "gpt35"), ("Llama", "vicuna")}
    mini = warnings[("Mini", "gpt35")]
    assert (mini.family, mini.items, mini.judged, mini.picks) == ("GPT (OpenAI)", 4, 4, 4)
    assert mini.others == pytest.approx(0.0) and mini.human == pytest.approx(0.5) and mini.verdict == 1.0
    llama = warnings[("Llama", "vicuna")]
    assert (llama.picks, llama.others, llama.human) == (4, 0.0, 0.25)  # Mini picks gpt35, Other says tie
    # a rule of one's own comes first
    assert family_of("openai:acme-7b", [*parse_rules(["Acme=acme-"])]) == "Acme"
    assert {w.member for w in same_family("run", records, {k: ("acme-1", "vicuna") for k in systems},
                                          [*parse_rules(["Acme=acme-"])])} == {"Other"}
    with pytest.raises(ValueError, match="NAME=REGEX"):
        parse_rules(["no-equals"])
    with pytest.raises(ValueError, match="--family"):
        parse_rules(["Bad=("])


def test_faireval_s_own_evaluator_is_one_judge_however_many_reviews() -> None:
    said = {"original_order #1": (8, 4), "swapped_order #1": (4, 8), "original_order #2": (7, 7),
            "swapped_order #2": (6, 5)}  # as the model said them, in the order it was shown
    judgments = {name: {"agent": name, "kind": "pairwise", "score_1": one, "score_2": two, "missing": False,
                        "label": "1" if one > two else "2" if two > one else "tie"}
                 for name, (one, two) in said.items()}
    reviews = {"original_order #1": {"score_1": 8, "score_2": 4}, "swapped_order #1": {"score_1": 8, "score_2": 4},
               "original_order #2": {"score_1": 7, "score_2": 7}, "swapped_order #2": {"score_1": 5, "score_2": 6}}
    record = {"id": "1", "task": "pairwise", "judgments": judgments,
              "verdict": {"kind": "pairwise", "label": "1", "missing": False,
                          "detail": {"calibration": "bpc+mec", "k": 2, "reviews": reviews}}}
    panel = single.SPEC.panel  # --protocol single --calibrate runs it: the single agent's spec reads its reviews
    assert member_names([record], panel) == [FAIREVAL_AGENT]  # one judge, not four: no panel
    assert member_judgments(record, panel)[FAIREVAL_AGENT]["label"] == "1"  # mean 7.0 vs 5.5, mapped back
    # its two orders are paired by sample, as a calibration's runs are
    assert calibrated_pairs(record) == [("1", "1"), ("tie", "2")]
