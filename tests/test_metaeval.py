"""From run records to agreement tables: missing verdicts, levels, skip rule, layouts, paired tests."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jurygraph.measuring import metrics
from jurygraph.measuring.metaeval import (
    compare_labels,
    compare_scores,
    evaluate_records,
    label_data,
    metaeval,
    score_data,
)
from jurygraph.measuring.tables import correlation_table, detail_table, distribution_table, label_table, results_csv
from jurygraph.running.datasets import load_summeval


def record(item_id: str, aspect: str, group: str, human: float, score: float | None, *,
           status: str = "ok", missing: bool = False, dataset: str = "topical-chat") -> dict[str, Any]:
    verdict = None if status != "ok" else {"kind": "score", "method": "mean", "score": score, "missing": missing}
    out = {"id": item_id, "status": status, "task": "score", "dataset": dataset, "aspect": aspect, "group": group,
           "human": {aspect: human}, "verdict": verdict}
    return {k: v for k, v in out.items() if v is not None}


def test_missing_verdicts_are_counted_and_excluded_never_imputed() -> None:
    records = [
        record("a", "coherence", "g1", 1.0, 1.0),
        record("b", "coherence", "g1", 2.0, 2.0),
        record("c", "coherence", "g1", 3.0, 3.0),
        record("d", "coherence", "g2", 3.0, None, missing=True),  # unreadable judgments
        record("e", "coherence", "g2", 1.0, None, status="failed"),  # the item failed
        {"id": "f", "status": "ok", "task": "score", "aspect": "coherence", "group": "g2", "human": {},
         "verdict": {"score": 2.0}},  # no human label
    ]
    data = score_data(records)["coherence"]
    assert data.ids == ["a", "b", "c"] and data.predicted == [1.0, 2.0, 3.0]
    assert (data.missing, sorted(data.missing_ids), data.no_human) == (2, ["d", "e"], 1)
    result = evaluate_records(records, "m", resamples=0).aspects["coherence"]
    assert result.correlation.n == 3 and result.value("spearman") == pytest.approx(1.0)
    assert result.missing == 2


def test_last_record_of_an_item_wins() -> None:
    """A resumed run can hold an item twice; the later line is the current one."""
    records = [record("a", "x", "g", 1.0, None, status="failed"), record("a", "x", "g", 1.0, 3.0)]
    data = score_data(records)["x"]
    assert data.predicted == [3.0] and data.missing == 0


def test_summeval_summary_level_skips_documents_with_constant_human_scores() -> None:
    """The shipped SummEval has 4 documents whose consistency scores are all equal: skipped, counted."""
    dataset = load_summeval(aspect="consistency")
    rng = np.random.default_rng(3)
    records = [record(item.id, "consistency", str(item.group), item.human["consistency"],
                      item.human["consistency"] + float(rng.normal(0, 0.8)), dataset="summeval")
               for item in dataset.items]
    result = evaluate_records(records, "noisy", resamples=50).aspects["consistency"]
    assert result.level == "grouped"
    assert (result.correlation.groups, result.correlation.skipped) == (96, 4)
    by_hand = []
    for doc in sorted({r["group"] for r in records}):
        pred = [r["verdict"]["score"] for r in records if r["group"] == doc]
        human = [r["human"]["consistency"] for r in records if r["group"] == doc]
        if len(set(human)) > 1:
            by_hand.append(metrics.correlations(pred, human).kendall)
    assert result.value("kendall") == pytest.approx(np.mean(by_hand), abs=1e-12)
    interval = result.intervals["kendall"]
    assert interval.low < result.value("kendall") < interval.high
    table = correlation_table([evaluate_records(records, "noisy", resamples=0)])
    assert "summary-level" in table.title
    assert "noisy/consistency: 4" in table.text()


def tc_records(scores: dict[str, list[float]], noise: float, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for aspect, human in scores.items():
        for i, h in enumerate(human):
            out.append(record(f"tc-{i // 3:02d}-{i % 3}", aspect, f"tc-{i // 3:02d}", h,
                              round(h + float(rng.normal(0, noise)), 2)))
    return out


HUMAN = {"naturalness": [1, 2, 3, 3, 2, 1, 2, 2, 3, 1, 3, 2, 2, 1, 3],
         "coherence": [3, 1, 2, 2, 3, 1, 1, 2, 3, 3, 2, 1, 1, 3, 2]}


def test_topical_chat_table_has_the_chateval_layout_and_average() -> None:
    good = evaluate_records(tc_records(HUMAN, 0.3, 0), "GPT-4(MA)", resamples=0)
    weak = evaluate_records(tc_records(HUMAN, 2.0, 1), "ChatGPT(SA)", resamples=0)
    table = correlation_table([good, weak])
    text = table.text().splitlines()
    assert text[0] == "topical-chat: turn-level (pooled over all items) correlation with human ratings"
    assert text[1].split() == ["Naturalness", "Coherence", "Average"]
    assert text[2].split() == ["Method", "ρ", "τ", "ρ", "τ", "ρ", "τ"]
    row = text[4].split()
    assert row[0] == "GPT-4(MA)"
    nat, coh = good.aspects["naturalness"], good.aspects["coherence"]
    assert row[1:5] == [f"{nat.value('spearman'):.3f}", f"{nat.value('kendall'):.3f}",
                        f"{coh.value('spearman'):.3f}", f"{coh.value('kendall'):.3f}"]
    assert row[5] == f"{(nat.value('spearman') + coh.value('spearman')) / 2:.3f}"
    assert "| Method | Naturalness ρ | Naturalness τ |" in table.markdown()
    assert table.csv().splitlines()[0].startswith("Method,Naturalness ρ,Naturalness τ,Coherence ρ")


def test_average_is_not_taken_over_fewer_aspects() -> None:
    full = evaluate_records(tc_records(HUMAN, 0.3, 0), "full", resamples=0)
    half = evaluate_records(tc_records({"naturalness": HUMAN["naturalness"]}, 0.3, 0), "half", resamples=0)
    rows = correlation_table([full, half]).rows
    assert rows[1][-2:] == ["–", "–"] and rows[1][3:5] == ["–", "–"]
    assert rows[0][-1] != "–"


def test_debate_per_context_layout_uses_pearson_and_spearman() -> None:
    result = evaluate_records(tc_records(HUMAN, 0.3, 0), "DEBATE", level="grouped", resamples=0)
    table = correlation_table([result])
    assert "per-context" in table.title
    assert table.columns[1:3] == ["r", "ρ"]
    assert result.aspects["naturalness"].correlation.groups == 5
    with pytest.raises(ValueError, match="one correlation level"):
        correlation_table([result, evaluate_records(tc_records(HUMAN, 0.3, 0), "x", resamples=0)])


def test_detail_table_and_results_csv_carry_cis_and_counts() -> None:
    records = [*tc_records(HUMAN, 0.5, 2), record("tc-09-0", "coherence", "tc-09", 2.0, None, missing=True)]
    result = evaluate_records(records, "m", resamples=100, seed=4)
    details = detail_table([result]).text()
    coherence = next(line for line in details.splitlines() if "coherence" in line)
    ci = result.aspects["coherence"].intervals["spearman"]
    assert f"{result.aspects['coherence'].value('spearman'):.3f} [{ci.low:.3f}, {ci.high:.3f}]" in coherence
    assert coherence.split()[6] == "1"  # missing verdicts
    rows = results_csv([result]).splitlines()
    assert rows[0].startswith("method,dataset,aspect,level,statistic,value,ci_low,ci_high")
    assert len(rows) == 1 + 2 * 3
    again = evaluate_records(records, "m", resamples=100, seed=4)
    assert again.aspects["coherence"].intervals == result.aspects["coherence"].intervals


def test_distribution_table_counts_each_score_point() -> None:
    result = evaluate_records(tc_records(HUMAN, 0.0, 0), "exact", resamples=0)
    table = distribution_table(result)
    assert table.columns == ["Score", "Human", "exact", "Human", "exact"]
    nat = HUMAN["naturalness"]
    assert [row[0] for row in table.rows] == ["1", "2", "3"]
    assert table.rows[0][1] == f"{100 * nat.count(1) / len(nat):.2f}" == table.rows[0][2]


def pairwise(ids: list[str], predicted: list[str | None], human: list[str]) -> list[dict[str, Any]]:
    return [{"id": i, "status": "ok", "task": "pairwise", "dataset": "faireval", "human": {"label": h},
             "verdict": {"kind": "pairwise", "label": p} if p else {"kind": "pairwise", "missing": True}}
            for i, p, h in zip(ids, predicted, human, strict=True)]


def test_pairwise_accuracy_kappa_and_the_chateval_table() -> None:
    records = pairwise(["q0", "q1", "q2", "q3", "q4"], ["1", "1", "2", "tie", None], ["1", "2", "2", "2", "1"])
    result = evaluate_records(records, "ChatGPT(MA)", resamples=50)
    labels = result.labels
    assert labels is not None and labels.n == 4 and labels.missing == 1
    assert labels.accuracy == 0.5 and labels.kappa == pytest.approx(3 / 11)
    assert labels.confusion.tolist() == [[1, 0, 0], [1, 1, 1], [0, 0, 0]]
    table = label_table([result])
    assert table.columns == ["Method", "Acc.", "Kap.", "n", "missing"]
    assert table.rows == [["ChatGPT(MA)", "50.0", "0.273", "4", "1"]]
    assert label_data(records).missing_ids == ["q4"]


def test_compare_scores_on_shared_items_only() -> None:
    human = {"naturalness": [float(x) for x in np.random.default_rng(0).integers(1, 4, size=60)]}
    good = tc_records(human, 0.2, 1)
    bad = tc_records(human, 3.0, 2)[:-3]  # B lacks the last context: compared on the shared items
    a = score_data(good)["naturalness"]
    b = score_data(bad)["naturalness"]
    tests = compare_scores(a, b, "pooled", "spearman", resamples=200, seed=0)
    assert tests["bootstrap"].difference > 0 and tests["bootstrap"].p_value < 0.05
    assert tests["permutation"].p_value < 0.05
    assert tests["t-test"].difference < 0 and tests["t-test"].detail["df"] == 56
    same = compare_scores(a, a, "grouped", "kendall", resamples=50, seed=0)
    assert same["bootstrap"].difference == 0 and same["permutation"].p_value == 1.0
    assert math.isnan(same["t-test"].p_value)  # identical errors: no variance to test


def test_compare_labels() -> None:
    human = ["1", "2", "tie", "1", "2"] * 8
    a = label_data(pairwise([f"q{i}" for i in range(40)], human, human))
    b = label_data(pairwise([f"q{i}" for i in range(40)], ["1"] * 40, human))
    tests = compare_labels(a, b, resamples=200, seed=0)
    assert tests["bootstrap"].difference == pytest.approx(1 - 16 / 40)
    assert tests["permutation"].p_value < 0.01


def test_metaeval_reads_a_run_directory_or_the_runs_below_it(tmp_path: Path) -> None:
    for aspect in HUMAN:
        run = tmp_path / "bench" / aspect
        run.mkdir(parents=True)
        lines = [json.dumps(r) for r in tc_records({aspect: HUMAN[aspect]}, 0.3, 0)]
        (run / "results.jsonl").write_text("\n".join(lines) + "\n{\"torn", encoding="utf-8")
        (run / "manifest.json").write_text(json.dumps({"protocol": "chateval"}), encoding="utf-8")
    one = metaeval(tmp_path / "bench" / "coherence", resamples=0)
    assert one.name == "chateval" and list(one.aspects) == ["coherence"]
    both = metaeval(tmp_path / "bench", name="MA", resamples=0)
    assert set(both.aspects) == set(HUMAN) and both.name == "MA"
    with pytest.raises(FileNotFoundError, match=r"no results\.jsonl"):
        metaeval(tmp_path / "nothing-here")
