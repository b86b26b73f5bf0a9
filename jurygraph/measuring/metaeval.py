"""From a run's records to agreement with humans: ``metaeval(run_dir)``.

A run's ``results.jsonl`` (see :mod:`jurygraph.running.runner`) holds one record per item: ``status``,
``dataset``, ``aspect``, ``group``, ``human`` and the ``verdict``. Here:

- predicted score = ``verdict["score"]``, human score = ``human[aspect]``;
- predicted label = ``verdict["label"]`` (pairwise) or ``verdict["answer"]`` (choice) vs ``human``'s;
- a record that failed, or whose verdict is missing or has no value, is a *missing verdict*: counted
  and excluded, never imputed; a record without the human label is counted apart (``no_human``);
- a record with a missing judgment (a reply that could not be read, or a ReFeR peer whose model failed) is
  counted in ``unreadable`` whatever its verdict: its verdict was reached without that judgment (jurygraph's
  rule), or is a tie by ChatEval's released-code rule (``--unreadable code``).
- a ``--per-turn`` run's turns are measured against per-turn human labels (``human["turns"]``) by
  :func:`turn_records` (``jurygraph metaeval --per-turn``).

The correlation level follows the literature for each benchmark (:func:`default_level`): SummEval is
summary-level (per document, averaged), everything else pooled (Topical-Chat turn-level as in ChatEval,
G-Eval, UniEval, ReFeR); ``level="grouped"`` gives DEBATE's per-context average on Topical-Chat.
Tables in the papers' layouts are built by :mod:`jurygraph.measuring.tables`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from jurygraph.judging.judgments import PAIRWISE_LABELS
from jurygraph.measuring import metrics
from jurygraph.measuring.metrics import Correlation, Interval
from jurygraph.measuring.votes import VoteAgreement, vote_agreement
from jurygraph.running.rundir import MANIFEST, RESULTS, read_results

Level = Literal["pooled", "grouped"]


def default_level(dataset: str | None) -> Level:
    """Summary-level for SummEval (G-Eval, UniEval, DEBATE); pooled for the rest (Topical-Chat turn-level)."""
    return "grouped" if dataset == "summeval" else "pooled"


# --- records -> paired arrays ----------------------------------------------------------------------


@dataclass
class ScoreData:
    """Predicted and human scores of one aspect, for the items that have both."""

    aspect: str
    ids: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    predicted: list[float] = field(default_factory=list)
    human: list[float] = field(default_factory=list)
    missing: int = 0  # items whose verdict is missing (failed run, unreadable judgments): excluded
    missing_ids: list[str] = field(default_factory=list)
    no_human: int = 0  # items without a human score for this aspect: excluded
    unreadable: int = 0  # items (with a human score) with at least one missing judgment, verdict or not
    unreadable_ids: list[str] = field(default_factory=list)


@dataclass
class LabelData:
    """Predicted and human labels (pairwise verdicts or choice answers) for the items that have both."""

    kind: str
    ids: list[str] = field(default_factory=list)
    predicted: list[str] = field(default_factory=list)
    human: list[str] = field(default_factory=list)
    missing: int = 0
    missing_ids: list[str] = field(default_factory=list)
    no_human: int = 0
    unreadable: int = 0
    unreadable_ids: list[str] = field(default_factory=list)


def latest_records(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One record per (aspect, id): the last one (a resumed run may have rewritten an item)."""
    latest: dict[tuple[Any, Any], Mapping[str, Any]] = {}
    for record in records:
        latest[(record.get("aspect"), record.get("id"))] = record
    return list(latest.values())


def _verdict_value(record: Mapping[str, Any], key: str) -> Any:
    """The verdict's value, or None when the verdict counts as missing."""
    verdict = record.get("verdict") or {}
    if record.get("status", "ok") != "ok" or verdict.get("missing"):
        return None
    return verdict.get(key)


def has_unreadable(record: Mapping[str, Any]) -> bool:
    """Does a record hold a missing judgment (an unreadable reply, a failed peer)? Older records without their
    judgments say so by their count, ``n_missing``."""
    judgments = record.get("judgments")
    if isinstance(judgments, Mapping) and judgments:
        return any(isinstance(j, Mapping) and j.get("missing") for j in judgments.values())
    return int(record.get("n_missing") or 0) > 0


def _count_unreadable(data: ScoreData | LabelData, record: Mapping[str, Any]) -> None:
    if has_unreadable(record):
        data.unreadable += 1
        data.unreadable_ids.append(str(record.get("id")))


def human_score(human: Mapping[str, Any] | None, aspect: str) -> float | None:
    """The human score of ``aspect`` in a record's ``human``; None when it is absent, not a number or NaN."""
    if not human or human.get(aspect) is None:
        return None
    try:
        value = float(human[aspect])
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def score_data(records: Iterable[Mapping[str, Any]]) -> dict[str, ScoreData]:
    """Score records grouped by aspect (records without an aspect go under ``"score"``)."""
    out: dict[str, ScoreData] = {}
    for record in latest_records(records):
        if record.get("task", "score") != "score":
            continue
        aspect = record.get("aspect") or "score"
        data = out.setdefault(aspect, ScoreData(aspect))
        human = human_score(record.get("human"), aspect)
        if human is None:
            data.no_human += 1
            continue
        _count_unreadable(data, record)
        value = _verdict_value(record, "score")
        if value is None:
            data.missing += 1
            data.missing_ids.append(str(record.get("id")))
            continue
        data.ids.append(str(record.get("id")))
        data.groups.append(str(record.get("group") if record.get("group") is not None else record.get("id")))
        data.predicted.append(float(value))
        data.human.append(human)
    return out


def label_data(records: Iterable[Mapping[str, Any]], kind: str = "pairwise") -> LabelData:
    """Pairwise (``verdict.label`` vs ``human.label``) or choice (``answer``) records of a run."""
    key = "label" if kind == "pairwise" else "answer"
    data = LabelData(kind)
    for record in latest_records(records):
        if record.get("task") != kind:
            continue
        human = (record.get("human") or {}).get(key)
        if human is None:
            data.no_human += 1
            continue
        _count_unreadable(data, record)
        value = _verdict_value(record, key)
        if value is None:
            data.missing += 1
            data.missing_ids.append(str(record.get("id")))
            continue
        data.ids.append(str(record.get("id")))
        data.predicted.append(str(value))
        data.human.append(str(human))
    return data


def turn_records(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The per-turn verdicts of a ``--per-turn`` run as records of their own, each beside the human label of its
    turn: ``human["turns"]`` maps a turn (``"2"``) to its label (a score item: a number, the record's aspect, or
    ``{aspect: number}``; a pairwise item: ``"1"``/``"2"``/``"tie"`` or ``{"label": ...}``). A turn record's id is
    ``<id>#turn<k>``, its group the conversation's (the bootstrap resamples conversations, whose turns are not
    independent). Records without per-turn verdicts are left out."""
    out: list[dict[str, Any]] = []
    for record in latest_records(records):
        verdict = record.get("verdict") or {}
        turns = (verdict.get("detail") or {}).get("turns")
        if not isinstance(turns, list):
            continue
        labels = (record.get("human") or {}).get("turns") or {}
        aspect = record.get("aspect") or "score"
        for entry in turns:
            turn = entry.get("turn")
            label = labels.get(str(turn))
            if label is not None and not isinstance(label, Mapping):
                label = {"label": label} if record.get("task") == "pairwise" else {aspect: label}
            out.append({**{k: record.get(k) for k in ("task", "dataset", "aspect", "status")},
                        "id": f"{record.get('id')}#turn{turn}", "turn": turn,
                        "group": record.get("group") if record.get("group") is not None else record.get("id"),
                        "human": label, "verdict": entry})
    return out


# --- results ---------------------------------------------------------------------------------------


@dataclass
class AspectResult:
    """Correlations of one method on one aspect, with bootstrap intervals and the counts behind them."""

    aspect: str
    level: Level
    correlation: Correlation
    intervals: dict[str, Interval]
    missing: int
    no_human: int
    data: ScoreData

    def value(self, statistic: str) -> float:
        return self.correlation.get(statistic)


@dataclass
class LabelResult:
    """Accuracy and Cohen's kappa of one method's labels, with intervals, counts and confusion matrix."""

    kind: str
    accuracy: float
    kappa: float
    n: int
    missing: int
    no_human: int
    intervals: dict[str, Interval]
    labels: tuple[str, ...]
    confusion: np.ndarray
    data: LabelData


@dataclass
class MethodResult:
    """Everything measured for one method (a protocol/model setting) on one benchmark."""

    name: str
    dataset: str | None
    aspects: dict[str, AspectResult] = field(default_factory=dict)
    labels: LabelResult | None = None
    votes: VoteAgreement | None = None  # items with several people's votes: agreement with them, and theirs


def _correlation_of(data: ScoreData, level: Level, rows: Sequence[int] | None = None) -> Correlation:
    pred = np.asarray(data.predicted, dtype=float)
    gold = np.asarray(data.human, dtype=float)
    if level == "pooled":
        return metrics.pooled(pred, gold) if rows is None else metrics.pooled(pred[rows], gold[rows])
    return metrics.grouped(pred, gold, data.groups)


def units_of(groups: Sequence[str]) -> tuple[list[str], list[list[int]]]:
    """The bootstrap's units of items with these groups: each group once, in order of first appearance, and the
    positions of its items."""
    order: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        order.setdefault(g, []).append(i)
    return list(order), list(order.values())


MIN_UNITS_FOR_INTERVAL = 2


def single_unit_warnings(method: MethodResult) -> list[str]:
    """One line per result whose confidence interval was left out because it rests on fewer than two units."""
    lines = []
    for aspect, result in method.aspects.items():
        groups = len(units_of(result.data.groups)[1])
        if result.data.predicted and groups < MIN_UNITS_FOR_INTERVAL:
            lines.append(f"{method.name} / {aspect}: {groups} group only, so no confidence interval "
                         "(the bootstrap resamples groups: it needs at least 2)")
    if method.labels is not None and 0 < method.labels.n < MIN_UNITS_FOR_INTERVAL:
        lines.append(f"{method.name} / {method.labels.kind}: {method.labels.n} item only, so no confidence interval")
    return lines


def score_result(data: ScoreData, level: Level, *, resamples: int = 1000, confidence: float = 0.95,
                 seed: int | None = 0) -> AspectResult:
    """Correlations of one aspect at ``level`` with percentile bootstrap CIs over groups
    (documents/contexts; items when there are no groups)."""
    correlation = _correlation_of(data, level)
    _, members = units_of(data.groups)
    intervals: dict[str, Interval] = {}
    # resampling a single group (or item) gives the same value every time: an interval [x, x] that claims a
    # certainty it does not have, so there is none (`metaeval` says why)
    if resamples and data.predicted and len(members) >= MIN_UNITS_FOR_INTERVAL:
        if level == "grouped":
            # a resample of whole groups only reweights the per-group correlations: compute them once
            per_group = [metrics.correlations([data.predicted[i] for i in rows], [data.human[i] for i in rows])
                         if len(rows) > 1 else Correlation(math.nan, math.nan, math.nan, len(rows))
                         for rows in members]
            table = np.array([[c.get(s) for s in metrics.STATISTICS] for c in per_group], dtype=float)

            def mean_of(draw: Sequence[int]) -> dict[str, float]:
                chosen = table[list(draw)]
                return {s: float(np.nanmean(col)) if (~np.isnan(col)).any() else math.nan
                        for s, col in zip(metrics.STATISTICS, chosen.T, strict=True)}
            intervals = metrics.bootstrap_cis(mean_of, len(members), resamples=resamples,
                                              confidence=confidence, seed=seed)
        else:
            def pooled_of(draw: Sequence[int]) -> dict[str, float]:
                rows = [i for unit in draw for i in members[unit]]
                found = _correlation_of(data, "pooled", rows)
                return {s: found.get(s) for s in metrics.STATISTICS}
            intervals = metrics.bootstrap_cis(pooled_of, len(members), resamples=resamples,
                                              confidence=confidence, seed=seed)
    return AspectResult(data.aspect, level, correlation, intervals, data.missing, data.no_human, data)


def label_result(data: LabelData, *, resamples: int = 1000, confidence: float = 0.95,
                 seed: int | None = 0) -> LabelResult:
    """Accuracy and Cohen's kappa (FairEval / ChatEval Table 1) with bootstrap CIs over questions."""
    labels = PAIRWISE_LABELS if data.kind == "pairwise" else tuple(sorted({*data.predicted, *data.human}))
    pred, gold = data.predicted, data.human
    intervals: dict[str, Interval] = {}
    if resamples and len(pred) >= MIN_UNITS_FOR_INTERVAL:
        # accuracy and kappa on integer codes: the classes of ``labels`` first (only they enter p_e, as in
        # cohen_kappa), then any other value; ~50x faster, which a panel's members multiply
        codes = {label: k for k, label in enumerate(dict.fromkeys([*labels, *pred, *gold]))}
        pred_codes = np.array([codes[x] for x in pred])
        gold_codes = np.array([codes[x] for x in gold])

        def both(draw: Sequence[int]) -> dict[str, float]:
            rows = np.asarray(draw)
            p, g = pred_codes[rows], gold_codes[rows]
            return {"accuracy": float(np.mean(p == g)), "kappa": metrics.kappa_from_codes(p, g, len(labels))}
        intervals = metrics.bootstrap_cis(both, len(pred), resamples=resamples, confidence=confidence, seed=seed)
    return LabelResult(data.kind, metrics.accuracy(pred, gold), metrics.cohen_kappa(pred, gold, labels),
                       len(pred), data.missing, data.no_human, intervals, labels,
                       metrics.confusion(pred, gold, labels) if set(pred) | set(gold) <= set(labels)
                       else np.zeros((len(labels), len(labels)), dtype=int), data)


def evaluate_records(records: Iterable[Mapping[str, Any]], name: str = "run", *, level: Level | None = None,
                     resamples: int = 1000, confidence: float = 0.95, seed: int | None = 0,
                     vote_judges: str | None = None) -> MethodResult:
    """Meta-evaluate a method's records (one or several aspects, or pairwise/choice verdicts); ``vote_judges``: the
    agreement with several people's votes counts only the votes of judges whose name starts with it."""
    records = list(records)
    datasets = {r.get("dataset") for r in records if r.get("dataset")}
    dataset = datasets.pop() if len(datasets) == 1 else None
    result = MethodResult(name, dataset)
    chosen = level or default_level(dataset)
    for aspect, data in score_data(records).items():
        result.aspects[aspect] = score_result(data, chosen, resamples=resamples, confidence=confidence, seed=seed)
    for kind in ("pairwise", "choice"):
        if any(r.get("task") == kind for r in records):
            result.labels = label_result(label_data(records, kind), resamples=resamples, confidence=confidence,
                                         seed=seed)
            result.votes = vote_agreement(latest_records(records), kind, vote_judges)
    return result


def run_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of a run directory, or of every run directory below ``path`` (one per aspect)."""
    root = Path(path)
    if (root / RESULTS).exists():
        return read_results(root)
    found = sorted(root.rglob(RESULTS))
    if not found:
        raise FileNotFoundError(f"{root}: no {RESULTS} here or below (is it a jurygraph run directory?)")
    return [record for file in found for record in read_results(file.parent)]


def run_name(path: str | Path) -> str:
    """A method name for a run directory: its manifest's protocol, else the directory name."""
    manifest = Path(path) / MANIFEST
    if manifest.exists():
        protocol = json.loads(manifest.read_text(encoding="utf-8")).get("protocol")
        if protocol:
            return str(protocol)
    return Path(path).name


def metaeval(run_dir: str | Path, *, name: str | None = None, level: Level | None = None,
             resamples: int = 1000, confidence: float = 0.95, seed: int | None = 0) -> MethodResult:
    """Agreement with humans of a finished run (``RUN_DIR/results.jsonl``, or run dirs below it)."""
    return evaluate_records(run_records(run_dir), name or run_name(run_dir), level=level, resamples=resamples,
                            confidence=confidence, seed=seed)


# --- comparing two judges on the same items ------------------------------------------------------------


def _common(a: ScoreData, b: ScoreData) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Items both judges scored: their groups, A's and B's predictions and the human scores."""
    index_b = {i: k for k, i in enumerate(b.ids)}
    rows = [(k, index_b[i]) for k, i in enumerate(a.ids) if i in index_b]
    groups = [a.groups[k] for k, _ in rows]
    return (groups, np.array([a.predicted[k] for k, _ in rows]), np.array([b.predicted[j] for _, j in rows]),
            np.array([a.human[k] for k, _ in rows]))


def compare_scores(a: ScoreData, b: ScoreData, level: Level, statistic: str = "spearman", *,
                   resamples: int = 1000, seed: int | None = 0) -> dict[str, metrics.PairedTest]:
    """Is judge A closer to humans than judge B on this aspect? Only items both scored are used.

    - ``bootstrap``: paired bootstrap of the difference in ``statistic`` (at ``level``), resampling groups;
    - ``permutation``: swap A's and B's scores within random groups;
    - ``t-test``: ReFeR's paired t-test (Appendix M), on each item's absolute error to the human score
      (the paper does not say which per-item quantity it tested; absolute error is the one that
      measures closeness to humans; difference < 0 means A's errors are smaller).
    """
    groups, pred_a, pred_b, human = _common(a, b)
    names, members = units_of(groups)
    if level == "grouped":
        # resampling or swapping whole groups only moves per-group correlations around: compute them once
        per_a = np.array([metrics.correlation(statistic, pred_a[rows], human[rows]) for rows in members])
        per_b = np.array([metrics.correlation(statistic, pred_b[rows], human[rows]) for rows in members])

        def mean_of(values: np.ndarray, draw: Sequence[int]) -> float:
            chosen = values[list(draw)]
            chosen = chosen[~np.isnan(chosen)]
            return float(chosen.mean()) if chosen.size else math.nan
        units = list(range(len(names)))
        return {
            "bootstrap": metrics.paired_bootstrap(lambda d: mean_of(per_a, d), lambda d: mean_of(per_b, d),
                                                  len(names), resamples=resamples, seed=seed),
            "permutation": metrics.permutation_test(mean_of, per_a, per_b, units, resamples=resamples, seed=seed),
            "t-test": metrics.paired_t_test(np.abs(pred_a - human), np.abs(pred_b - human)),
        }
    unit_of_item = np.empty(len(groups), dtype=int)
    for u, rows in enumerate(members):
        unit_of_item[rows] = u

    def pooled_of(pred: np.ndarray, draw: Sequence[int]) -> float:
        rows = [i for unit in draw for i in members[unit]]
        return metrics.correlation(statistic, pred[rows], human[rows])

    return {
        "bootstrap": metrics.paired_bootstrap(lambda d: pooled_of(pred_a, d), lambda d: pooled_of(pred_b, d),
                                              len(names), resamples=resamples, seed=seed),
        "permutation": metrics.permutation_test(pooled_of, pred_a, pred_b, unit_of_item.tolist(),
                                                resamples=resamples, seed=seed),
        "t-test": metrics.paired_t_test(np.abs(pred_a - human), np.abs(pred_b - human)),
    }


def compare_labels(a: LabelData, b: LabelData, *, resamples: int = 1000,
                   seed: int | None = 0) -> dict[str, metrics.PairedTest]:
    """Is judge A more accurate than judge B on the same questions? (paired bootstrap, permutation,
    paired t-test on per-question correctness)."""
    index_b = {i: k for k, i in enumerate(b.ids)}
    rows = [(k, index_b[i]) for k, i in enumerate(a.ids) if i in index_b]
    right_a = np.array([float(a.predicted[k] == a.human[k]) for k, _ in rows])
    right_b = np.array([float(b.predicted[j] == b.human[j]) for _, j in rows])

    def acc(correct: np.ndarray, draw: Sequence[int]) -> float:
        return float(correct[list(draw)].mean()) if len(draw) else math.nan

    return {
        "bootstrap": metrics.paired_bootstrap(lambda d: acc(right_a, d), lambda d: acc(right_b, d), len(rows),
                                              resamples=resamples, seed=seed),
        "permutation": metrics.permutation_test(acc, right_a, right_b, list(range(len(rows))),
                                                resamples=resamples, seed=seed),
        "t-test": metrics.paired_t_test(right_a, right_b),
    }
