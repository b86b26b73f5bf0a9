"""Where to set the threshold of an escalation or a review: each doubt signal's coverage–agreement curve, and the
agreement of the items the panel decided, the stronger judge decided and a person decided.

- **Coverage–agreement curve** (one per doubt signal of :mod:`jurygraph.judging.doubt`): the items that have the
  signal, a human label and a readable panel verdict are ordered by the signal; at each threshold, the items that
  ``--escalate-when SIGNAL<t`` (low values doubtful: ``agreement``, ``margin``) or ``SIGNAL>t`` (high values
  doubtful: ``spread``, ``sample_spread``, ``missing``; ``flip``: flipped) would *leave to the panel* are kept, and
  the point is their share of the items (coverage) and the panel's agreement with humans on them: accuracy for
  pairwise and choice verdicts, the chosen correlation (pooled over the kept items) for scores. The first point
  keeps every item; each next threshold is the next value of the signal. Agreement is always the **panel's**
  verdict's (before any escalation or review): the curve says what a threshold would leave to the panel, whatever
  this run did. Items waiting for a review count (their panel verdict is known); items whose panel verdict is
  missing do not (``excluded``).
- **Split**: the finished items by who decided them (``panel``, ``escalation``, ``review``), each group's agreement
  with humans and, for the escalated and reviewed ones, the panel's agreement on the same items (what the extra
  judge changed). Items still waiting for a review are counted apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jurygraph.judging.doubt import SIGNALS, Condition, decided_by, doubt_signals, panel_verdict
from jurygraph.measuring import metrics
from jurygraph.measuring.metaeval import human_score, latest_records
from jurygraph.measuring.panel import of_target
from jurygraph.measuring.tables import Table
from jurygraph.running.rundir import AWAITING_REVIEW

GROUPS = ("panel", "trajectory_match", "escalation", "review")


@dataclass
class CurvePoint:
    """The items a threshold leaves to the panel: the rule that escalates the others (None: no rule, every item)."""

    rule: str | None
    kept: int
    coverage: float
    agreement: float


@dataclass
class Curve:
    signal: str
    n: int  # items with the signal, a human label and a readable panel verdict
    points: list[CurvePoint] = field(default_factory=list)


@dataclass
class Group:
    """Who decided: how many items, their verdicts' agreement with humans, the panel's on the same items."""

    group: str
    n: int
    agreement: float
    panel_agreement: float | None


@dataclass
class DoubtReport:
    """One run's target (``pairwise``, ``choice`` or an aspect): its curves and its split by who decided."""

    name: str
    target: str
    statistic: str
    curves: list[Curve]
    split: list[Group]
    awaiting_review: int
    excluded: int  # items left out of the curves: no readable panel verdict


@dataclass
class _Row:
    signals: dict[str, Any]
    panel: Any  # the panel verdict's value (label, answer or score)
    final: Any  # the decided verdict's value, None while the item waits or when it is missing
    human: Any
    decided: str
    waiting: bool


def _value(verdict: Mapping[str, Any], key: str) -> Any:
    return None if not verdict or verdict.get("missing") else verdict.get(key)


def _rows(records: Sequence[Mapping[str, Any]], target: str) -> tuple[list[_Row], int]:
    key = "label" if target == "pairwise" else "answer" if target == "choice" else "score"
    rows, excluded = [], 0
    for record in records:
        status = record.get("status", "ok")
        human = human_score(record.get("human"), target) if key == "score" else (record.get("human") or {}).get(key)
        if status not in ("ok", AWAITING_REVIEW) or human is None:
            continue
        panel = _value(panel_verdict(record), key)
        waiting = status == AWAITING_REVIEW
        if panel is None:
            excluded += 1
        signals = record.get("doubt") if isinstance(record.get("doubt"), Mapping) else doubt_signals(record)
        rows.append(_Row(dict(signals or {}), panel, None if waiting else _value(record.get("verdict") or {}, key),
                         human, decided_by(record.get("verdict")), waiting))
    return rows, excluded


def _agreement(pairs: Sequence[tuple[Any, Any]], statistic: str) -> float:
    if not pairs:
        return math.nan
    if statistic == "accuracy":
        return metrics.accuracy([str(p) for p, _ in pairs], [str(h) for _, h in pairs])
    if len(pairs) < 3:
        return math.nan
    return metrics.correlation(statistic, [float(p) for p, _ in pairs], [float(h) for _, h in pairs])


def _curve(signal: str, rows: Sequence[_Row], statistic: str) -> Curve | None:
    have = [r for r in rows if r.panel is not None and r.signals.get(signal) is not None]
    if not have:
        return None
    spec = SIGNALS[signal]
    curve = Curve(signal, len(have))

    def point(rule: Condition | None) -> CurvePoint:
        kept = [(r.panel, r.human) for r in have if rule is None or not rule.holds(r.signals)]
        return CurvePoint(None if rule is None else rule.text, len(kept), len(kept) / len(have),
                          _agreement(kept, statistic))

    curve.points.append(point(None))
    if spec.kind == "flag":
        curve.points.append(point(Condition(signal)))
        return curve
    values = sorted({float(r.signals[signal]) for r in have}, reverse=spec.doubtful == ">")
    for threshold in values[1:]:  # the first value would leave every item to the panel: the point above
        curve.points.append(point(Condition(signal, spec.doubtful, threshold)))
    return curve


def _split(rows: Sequence[_Row], statistic: str) -> list[Group]:
    groups = []
    for group in GROUPS:
        members = [r for r in rows if not r.waiting and r.decided == group and r.final is not None]
        if not members:
            continue
        # the panel never judged the items the trajectory match decided: nothing to compare
        panel = None if group in ("panel", "trajectory_match") else _agreement(
            [(r.panel, r.human) for r in members if r.panel is not None], statistic)
        groups.append(Group(group, len(members), _agreement([(r.final, r.human) for r in members], statistic), panel))
    return groups


def _routed(record: Mapping[str, Any]) -> bool:
    """An escalation or a review decided the record, or it waits for a review (with the panel's verdict)."""
    verdict = record.get("verdict") or {}
    return bool({"escalation", "review"} & set(verdict.get("detail") or {})
                or (record.get("status") == AWAITING_REVIEW and verdict))


def panel_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records as the panel alone decided them: each verdict replaced by the panel's own (an item waiting for a
    review has one too), for what measures the panel itself (its diagnostics, its position bias). A run without
    escalation or review gets its own list back, the same object, so ``is`` tells a caller nothing changed."""
    routed = [_routed(record) for record in records]
    if not any(routed):
        return records
    return [{**record, "status": "ok", "verdict": panel_verdict(record)} if flag else dict(record)
            for record, flag in zip(records, routed, strict=True)]


def doubt_reports(name: str, records: Sequence[Mapping[str, Any]], statistic: str = "spearman") -> list[DoubtReport]:
    """One run's coverage–agreement curves and its split, per target; ``statistic`` for scores (labels: accuracy).
    Empty when the run's records carry no doubt signals (runs written before them)."""
    latest = latest_records(records)
    if not any(isinstance(r.get("doubt"), Mapping) for r in latest):
        return []
    targets: list[str] = []
    for record in latest:
        task = record.get("task", "score")
        target = str(task) if task in ("pairwise", "choice") else str(record.get("aspect") or "score")
        if target not in targets:
            targets.append(target)
    reports = []
    for target in targets:
        stat = "accuracy" if target in ("pairwise", "choice") else statistic
        rows, excluded = _rows(of_target(latest, target), target)
        curves = [c for signal in SIGNALS if (c := _curve(signal, rows, stat)) is not None]
        if not curves:
            continue
        reports.append(DoubtReport(name, target, stat, curves, _split(rows, stat),
                                   sum(1 for r in rows if r.waiting), excluded))
    return reports


def _shown(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}"


def coverage_tables(report: DoubtReport) -> list[tuple[str, Table]]:
    """The curves (one table, a row per point) and the split, as text tables."""
    rows = [[curve.signal, point.rule or "(none: all kept)", str(point.kept), f"{point.coverage:.3f}",
             _shown(point.agreement)] for curve in report.curves for point in curve.points]
    notes = [f"the panel's verdict on the items each rule leaves to it; {report.excluded} items without a readable "
             "panel verdict left out" if report.excluded else "the panel's verdict on the items each rule leaves to it"]
    curves = Table(f"coverage–agreement: {report.name} · {report.target} ({report.statistic})",
                   ["signal", "escalate or review when", "kept", "coverage", report.statistic], rows, notes=notes)
    split_rows = [[g.group, str(g.n), _shown(g.agreement), "" if g.panel_agreement is None else
                   _shown(g.panel_agreement)] for g in report.split]
    split_notes = [f"{report.awaiting_review} items await review"] if report.awaiting_review else []
    split = Table(f"decided by: {report.name} · {report.target} ({report.statistic})",
                  ["decided by", "items", report.statistic, "panel on the same items"], split_rows, notes=split_notes)
    return [("coverage", curves), ("decided_by", split)]


def _num(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else round(float(value), 6)


def doubt_json(report: DoubtReport) -> dict[str, Any]:
    """A report as plain data: ``curves`` (signal -> points), ``split`` (who decided), ``awaiting_review``."""
    return {
        "name": report.name, "target": report.target, "statistic": report.statistic,
        "curves": {c.signal: {"n": c.n, "points": [{"escalate_when": p.rule, "kept": p.kept,
                                                     "coverage": round(p.coverage, 6), "agreement": _num(p.agreement)}
                                                    for p in c.points]} for c in report.curves},
        "split": {g.group: {"n": g.n, "agreement": _num(g.agreement), "panel_agreement": _num(g.panel_agreement)}
                  for g in report.split},
        "awaiting_review": report.awaiting_review, "excluded": report.excluded,
    }
