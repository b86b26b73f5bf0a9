"""Known answers from published material (tests/data, provenance notes beside the files).

- UniEval's released Topical-Chat predictions, pooled over all 360 items, must give the table of
  UniEval's ``reproduce/README.md`` to 6 decimals.
- ChatEval's three early development runs on FairEval, recomputed from the released answers with
  jurygraph's aggregation (ChatEval's default and the majority option), must give the accuracy and kappa
  of the provenance note (majority vote).
Both go through the same path as a jurygraph run: records in results.jsonl -> ``metaeval(run_dir)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jurygraph.judging.aggregation import aggregate
from jurygraph.judging.items import TaskKind
from jurygraph.judging.judgments import Judgment, pairwise_label
from jurygraph.measuring.metaeval import metaeval
from jurygraph.running.datasets import load_faireval, load_topical_chat

DATA = Path(__file__).parent / "data"

# UniEval reproduce/README.md, "Results for dialogue response generation" (Pearson, Spearman, Kendall)
UNIEVAL_TOPICAL_CHAT = {
    "naturalness": (0.443666, 0.513986, 0.373973),
    "coherence": (0.595143, 0.612942, 0.465915),
    "engagingness": (0.55651, 0.604739, 0.455941),
    "groundedness": (0.536209, 0.574954, 0.451533),
    "understandability": (0.380038, 0.467807, 0.360741),
}

# chateval_outputs/PROVENANCE.md: majority vote, "Assistant 1" -> gpt35, "Assistant 2" -> vicuna,
# anything else -> tie, a 3-way tie of counts -> tie; FairEval's get_kappa. The note gives kappa to 3
# decimals; the exact values (third element) are 0.169473 (the note's 0.170 is 0.1695 rounded twice),
# 0.187130 and 0.130885.
CHATEVAL_RUNS = {
    "multi_role_two_turns_sequential_direct_pair_comparison": (0.5375, 0.170, 0.169473),
    "multi_role_three_turns_sequential_direct_pair_comparison": (0.550, 0.187, 0.187130),
    "single_role_direct_pair_comparison": (0.475, 0.131, 0.130885),
}


def _write_run(run_dir: Path, records: list[dict[str, Any]]) -> Path:
    run_dir.mkdir(parents=True)
    with (run_dir / "results.jsonl").open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    return run_dir


def unieval_run(tmp_path: Path) -> Path:
    """UniEval's predictions as the records of a jurygraph run (one record per item and aspect)."""
    predictions = json.loads((DATA / "unieval_predictions" / "topical_chat_result.json").read_text())
    records = []
    for aspect in UNIEVAL_TOPICAL_CHAT:
        dataset = load_topical_chat(aspect=aspect)
        assert len(dataset.items) == len(predictions) == 360
        for item, row in zip(dataset.items, predictions, strict=True):
            assert row["system_output"] == item.response  # same order as the shipped Topical-Chat file
            records.append({"id": item.id, "status": "ok", "task": "score", "dataset": "topical-chat",
                            "aspect": aspect, "group": item.group, "human": item.human,
                            "verdict": {"kind": "score", "method": "unieval", "score": row["predict_scores"][aspect]}})
    return _write_run(tmp_path / "unieval", records)


def test_unieval_pooled_correlations_equal_the_published_table(tmp_path: Path) -> None:
    result = metaeval(unieval_run(tmp_path), name="UniEval", resamples=0)
    assert set(result.aspects) == set(UNIEVAL_TOPICAL_CHAT)
    for aspect, (pearson, spearman, kendall) in UNIEVAL_TOPICAL_CHAT.items():
        found = result.aspects[aspect]
        assert found.level == "pooled"
        assert found.correlation.n == 360 and found.missing == 0
        assert round(found.correlation.pearson, 6) == pearson, aspect
        assert round(found.correlation.spearman, 6) == spearman, aspect
        assert round(found.correlation.kendall, 6) == kendall, aspect


def chateval_judgments(run: str, silence: str) -> list[list[Judgment]]:
    """Per question: each referee's released final answer as a judgment.

    The development runs are direct-choice runs: every answer is a bare label ("Assistant 1",
    "Assistant 2", "Same"), none carries scores. ``silence="tie"`` follows the original code (a failed
    generation, ``[Silence]``, counts as a tie vote); ``silence="missing"`` is jurygraph's rule (a missing
    judgment, left out and counted)."""
    rows = json.loads((DATA / "chateval_outputs" / run / "pair_comparison_results.json").read_text())
    out = []
    for row in rows:
        judgments = []
        for entry in row["evaluation"]:
            text = entry["evaluation"].strip()
            answer = text.splitlines()[-1].removeprefix("Answer:").strip() if text else text
            agent = entry["role"] or "?"
            if answer == "[Silence]" and silence == "missing":
                judgments.append(Judgment.missing_for(agent, TaskKind.PAIRWISE, text, "failed generation", 1))
                continue
            label = {"Assistant 1": "1", "Assistant 2": "2"}.get(answer, "tie")
            judgments.append(Judgment(agent=agent, kind=TaskKind.PAIRWISE, raw=text, label=label))
        out.append(judgments)
    return out


def chateval_labels(run: str, silence: str, method: str | None = None) -> list[tuple[str | None, int]]:
    """Per question: the verdict of jurygraph's aggregation (default: ChatEval's) and the unreadable count."""
    return [(aggregate(judgments, TaskKind.PAIRWISE, method).label,
             sum(j.missing or j.raw == "[Silence]" for j in judgments))
            for judgments in chateval_judgments(run, silence)]


@pytest.mark.parametrize("method", [None, "majority"])
@pytest.mark.parametrize("run", sorted(CHATEVAL_RUNS))
def test_chateval_development_runs_give_the_provenance_accuracy_and_kappa(tmp_path: Path, run: str,
                                                                          method: str | None) -> None:
    """Recomputed from the released answers with jurygraph's aggregation: the default (ChatEval's average)
    and the majority option give the same accuracy and kappa, because these direct-choice answers carry no
    scores to average, so both vote the labels (the verdict says so: ``detail.no_scores``)."""
    questions = load_faireval().items
    verdicts = chateval_labels(run, silence="tie", method=method)
    assert len(verdicts) == len(questions) == 80
    assert all(aggregate(js, TaskKind.PAIRWISE, method).detail == {"no_scores": True}
               for js in chateval_judgments(run, "tie"))
    records = [{"id": item.id, "status": "ok", "task": "pairwise", "dataset": "faireval", "human": item.human,
                "verdict": {"kind": "pairwise", "method": "majority", "label": label}}
               for item, (label, _) in zip(questions, verdicts, strict=True)]
    result = metaeval(_write_run(tmp_path / run, records), resamples=0)
    accuracy, kappa, exact = CHATEVAL_RUNS[run]
    assert result.labels is not None and result.labels.n == 80
    assert result.labels.accuracy == pytest.approx(accuracy, abs=1e-12)
    assert result.labels.kappa == pytest.approx(kappa, abs=6e-4)
    assert round(result.labels.kappa, 6) == exact


def test_chateval_silence_as_missing_judgment_changes_the_votes_not_the_count() -> None:
    """With [Silence] left out (jurygraph's rule) every question still has a verdict from the others."""
    tie_rule = chateval_labels("multi_role_two_turns_sequential_direct_pair_comparison", "tie")
    missing_rule = chateval_labels("multi_role_two_turns_sequential_direct_pair_comparison", "missing")
    assert sum(unreadable for _, unreadable in missing_rule) == 3
    assert all(label is not None for label, _ in missing_rule)
    changed = [i for i, (a, b) in enumerate(zip(tie_rule, missing_rule, strict=True)) if a[0] != b[0]]
    assert all(tie_rule[i][1] for i in changed)  # only questions with a [Silence] can change


def test_average_and_majority_differ_where_the_issue_says_on_scored_judgments() -> None:
    """The aggregation both verdicts above go through: 8-7 and 6-9 average to 7.0 vs 8.0 (Assistant 2),
    while the vote is 1 against 1 (a tie)."""
    judgments = [Judgment(agent=a, kind=TaskKind.PAIRWISE, score_1=s1, score_2=s2, label=pairwise_label(s1, s2))
                 for a, (s1, s2) in {"General Public": (8, 7), "Critic": (6, 9)}.items()]
    average, vote = aggregate(judgments, TaskKind.PAIRWISE), aggregate(judgments, TaskKind.PAIRWISE, "majority")
    assert (average.method, average.label, average.score_1, average.score_2) == ("mean", "2", 7.0, 8.0)
    assert (vote.method, vote.label, vote.votes) == ("majority", "tie", {"1": 1, "2": 1})


# DEBATE, Table 2 (Appendix B): score distribution (%) of the HUMAN ratings, per aspect, points low..high
DEBATE_HUMAN_DISTRIBUTION = {
    ("summeval", "coherence"): [2.37, 20.36, 26.36, 36.16, 14.74],
    ("summeval", "consistency"): [2.19, 5.12, 2.31, 3.69, 86.70],
    ("summeval", "fluency"): [0.62, 2.44, 5.12, 11.12, 80.70],
    ("summeval", "relevance"): [0.69, 7.50, 22.61, 52.28, 16.93],
    ("topical-chat", "naturalness"): [14.68, 40.72, 44.60],
    ("topical-chat", "coherence"): [17.73, 39.89, 42.38],
    ("topical-chat", "engagingness"): [20.22, 43.49, 36.29],
}


@pytest.mark.parametrize(("dataset", "aspect"), sorted(DEBATE_HUMAN_DISTRIBUTION))
def test_human_score_distribution_matches_debate_table_2(dataset: str, aspect: str) -> None:
    """Rounding the human means half up reproduces DEBATE's human counts exactly, up to one thing: every
    column of the paper's table is N+1 items (1601, 361) with one more item at the top score than the
    data has, as if one top-scored row had been counted twice. The paper's percentages are therefore
    compared as counts out of N+1."""
    from jurygraph.measuring.metrics import score_distribution
    from jurygraph.running.datasets import load_dataset

    items = load_dataset(dataset, aspect=aspect).items
    low, high = (1, 5) if dataset == "summeval" else (1, 3)
    ours = score_distribution([item.human[aspect] for item in items], low, high)
    counts = [round(ours[p] * len(items) / 100) for p in range(low, high + 1)]
    counts[-1] += 1  # the paper's extra top-scored item
    paper = DEBATE_HUMAN_DISTRIBUTION[(dataset, aspect)]
    assert [round(100 * c / (len(items) + 1), 2) for c in counts] == pytest.approx(paper, abs=0.0051)
