"""Does the panel earn its cost? Diagnostics of a run whose verdict combines several judges.

For each target of a run (its pairwise or choice verdicts; each scored aspect):

- ``members``: each member's own agreement with the human labels, measured as the verdict's is (accuracy and
  kappa, or correlations; :mod:`jurygraph.measuring.members` says who the members are), beside the panel's;
- ``panel_vs_best``: the panel's statistic minus the best member's, on the items both judged, with a paired
  bootstrap CI (:func:`~jurygraph.measuring.metaeval.compare_labels` / ``compare_scores``). The best member is
  chosen on the same items, so the difference leans against the panel: a panel that still wins, wins;
- ``error_correlation``: the correlation of the members' errors on the items every member judged (scores: the
  score minus the human score; pairwise: the label minus the human label on the scale 1 = +1, tie = 0,
  2 = -1, so two judges wrong the same way correlate and wrong opposite ways anti-correlate; choices: 1 when
  wrong), and ``effective_judges``, the participation ratio of its eigenvalues
  (:func:`~jurygraph.measuring.metrics.effective_number`), with a bootstrap CI;
- ``conformity`` where the protocol records a judgment per round (:mod:`jurygraph.measuring.conformity`);
- each member's position consistency when both answer orders were judged (:func:`member_position`, through
  :func:`~jurygraph.measuring.position.run_biases`, as the verdict's);
- the same-family warning (:func:`same_family`) for any pairwise run whose items name their systems.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jurygraph.judging.panel import PanelMembers
from jurygraph.measuring import metrics
from jurygraph.measuring.conformity import ORDINAL, Moves, conformity
from jurygraph.measuring.families import FAMILIES, Rule, family_of, model_name
from jurygraph.measuring.members import member_judgments, member_models, member_views
from jurygraph.measuring.metaeval import (
    MIN_UNITS_FOR_INTERVAL,
    LabelData,
    Level,
    MethodResult,
    ScoreData,
    compare_labels,
    compare_scores,
    evaluate_records,
    latest_records,
    units_of,
)
from jurygraph.measuring.metrics import Interval, PairedTest
from jurygraph.measuring.position import PositionBias, position_table, run_biases
from jurygraph.measuring.tables import SYMBOL, Table, number, percent

ERRORS = {
    "score": "score minus the human score",
    "pairwise": "label minus the human label, on 1 = +1, tie = 0, 2 = -1",
    "choice": "1 when the answer is wrong, else 0",
}
EFFECTIVE = ("participation ratio of the error correlation matrix's eigenvalues, (Σλ)² / Σλ² (Gao et al. 2017, "
             "bioRxiv 214262)")


@dataclass
class MemberResult:
    """One member: its model and its agreement with humans (a :class:`MethodResult` of its judgments)."""

    name: str
    model: str | None
    result: MethodResult


@dataclass
class VsBest:
    """The panel's statistic minus its best member's, on the items both judged (paired bootstrap)."""

    best: str
    statistic: str
    panel: float
    best_value: float
    test: PairedTest


@dataclass
class ErrorCorrelation:
    """The members' error correlation matrix and the effective number of independent judges behind it."""

    members: list[str]
    matrix: np.ndarray
    items: int
    error: str
    effective: float
    interval: Interval | None
    counted: list[str]  # members in the effective number: those whose errors vary on these items


@dataclass
class Panel:
    """The diagnostics of one run's panel on one target (``pairwise``, ``choice`` or an aspect)."""

    name: str
    target: str
    statistic: str
    members: list[MemberResult]
    verdict: MethodResult
    vs_best: VsBest | None
    errors: ErrorCorrelation | None
    conformity: list[Moves] | None
    position: list[PositionBias] = field(default_factory=list)


# --- a member's figures on a target -----------------------------------------------------------------


def _value(result: MethodResult, target: str, statistic: str) -> float:
    if result.labels is not None and result.labels.kind == target:
        return result.labels.accuracy
    aspect = result.aspects.get(target)
    return aspect.value(statistic) if aspect is not None else math.nan


def _data(result: MethodResult, target: str) -> LabelData | ScoreData | None:
    if result.labels is not None and result.labels.kind == target:
        return result.labels.data
    aspect = result.aspects.get(target)
    return aspect.data if aspect is not None else None


def _shared_units(a: LabelData | ScoreData, b: LabelData | ScoreData) -> int:
    """The bootstrap's units among the items both judged: groups (documents, contexts), else items."""
    both = set(b.ids)
    groups = a.groups if isinstance(a, ScoreData) else a.ids
    return len({g for i, g in zip(a.ids, groups, strict=True) if i in both})


def _vs_best(verdict: MethodResult, members: Sequence[MemberResult], target: str, statistic: str,
             resamples: int, seed: int | None) -> VsBest | None:
    scored = [(m, _value(m.result, target, statistic)) for m in members]
    scored = [(m, v) for m, v in scored if not math.isnan(v)]
    if not scored:
        return None
    best, value = max(scored, key=lambda pair: pair[1])
    ours, theirs = _data(verdict, target), _data(best.result, target)
    if ours is not None and theirs is not None and _shared_units(ours, theirs) < MIN_UNITS_FOR_INTERVAL:
        resamples = 0  # one document or context: every resample is the sample, an interval of no width
    if isinstance(ours, LabelData) and isinstance(theirs, LabelData):
        test = compare_labels(ours, theirs, resamples=resamples, seed=seed)["bootstrap"]
    elif isinstance(ours, ScoreData) and isinstance(theirs, ScoreData):
        level = verdict.aspects[target].level
        test = compare_scores(ours, theirs, level, statistic, resamples=resamples, seed=seed)["bootstrap"]
    else:
        return None
    return VsBest(best.name, statistic, _value(verdict, target, statistic), value, test)


# --- error correlation ------------------------------------------------------------------------------


def _errors(data: LabelData | ScoreData) -> dict[str, float]:
    """Item id -> the judge's error on it (see the module's doc for each task)."""
    if isinstance(data, ScoreData):
        return {i: p - h for i, p, h in zip(data.ids, data.predicted, data.human, strict=True)}
    if data.kind == "pairwise":
        return {i: ORDINAL[p] - ORDINAL[h] for i, p, h in zip(data.ids, data.predicted, data.human, strict=True)
                if p in ORDINAL and h in ORDINAL}
    return {i: float(p != h) for i, p, h in zip(data.ids, data.predicted, data.human, strict=True)}


def _error_correlation(members: Sequence[MemberResult], target: str, *, resamples: int, confidence: float,
                       seed: int | None) -> ErrorCorrelation | None:
    datas = [_data(m.result, target) for m in members]
    if any(d is None for d in datas):
        return None
    errors = [_errors(d) for d in datas if d is not None]
    first = datas[0]
    assert first is not None
    common = [i for i in first.ids if all(i in e for e in errors)]
    kind = "score" if isinstance(first, ScoreData) else first.kind
    names = [m.name for m in members]
    if len(common) < 2:
        return ErrorCorrelation(names, np.full((len(names), len(names)), math.nan), len(common), ERRORS[kind],
                                math.nan, None, [])
    table = np.array([[e[i] for i in common] for e in errors])
    matrix = metrics.error_correlation(table)
    # a member whose errors do not vary has no correlation (its row is NaN): the effective number is over the rest
    counted = [k for k in range(len(names)) if float(np.ptp(table[k])) > 0]
    effective = metrics.effective_number(matrix[np.ix_(counted, counted)]) if counted else math.nan
    # resample the units metaeval resamples: documents or contexts when the items have groups, else items
    groups = first.groups if isinstance(first, ScoreData) else list(first.ids)
    group_of = dict(zip(first.ids, groups, strict=True))
    _, members_of = units_of([group_of[item] for item in common])
    interval = None
    if resamples and counted and len(members_of) >= 2:
        chosen = table[counted]

        def effective_of(draw: Sequence[int]) -> float:
            columns = [c for unit in draw for c in members_of[unit]]
            return metrics.effective_number(metrics.error_correlation(chosen[:, columns]))

        interval = metrics.bootstrap_ci(effective_of, len(members_of), resamples=resamples, confidence=confidence,
                                        seed=seed)
    return ErrorCorrelation(names, matrix, len(common), ERRORS[kind], effective, interval,
                            [names[k] for k in counted])


# --- the diagnostics of a run -----------------------------------------------------------------------


def targets(verdict: MethodResult) -> list[str]:
    """What a run's verdicts are measured on: its label kind and/or each of its aspects."""
    return ([verdict.labels.kind] if verdict.labels is not None else []) + list(verdict.aspects)


def of_target(records: Sequence[Mapping[str, Any]], target: str) -> list[Mapping[str, Any]]:
    """The records measured on ``target``: its task's (``pairwise``, ``choice``), else the aspect's score records
    (``score``: those without an aspect), as :func:`~jurygraph.measuring.metaeval.evaluate_records` groups them."""
    if target in ("pairwise", "choice"):
        return [r for r in records if r.get("task") == target]
    return [r for r in records if r.get("task", "score") == "score" and (r.get("aspect") or "score") == target]


def panel_diagnostics(name: str, records: Sequence[Mapping[str, Any]], verdict: MethodResult, *,
                      statistic: str = "spearman", level: Level | None = None, resamples: int = 1000,
                      confidence: float = 0.95, seed: int | None = 0, panel: PanelMembers | None = None) -> list[Panel]:
    """The panel diagnostics of one run (``verdict`` = its own :class:`MethodResult`), one per target; empty
    when the verdict does not combine several judges. ``panel``: who the members are, as the run's protocol says
    (its spec's :class:`~jurygraph.judging.panel.PanelMembers`; default: every agent with a judgment)."""
    records = latest_records(records)
    views = member_views(records, panel)
    if len(views) < 2:
        return []
    models = member_models(records, list(views), panel)
    members = [MemberResult(m, models[m], evaluate_records(view, m, level=level, resamples=resamples,
                                                           confidence=confidence, seed=seed))
               for m, view in views.items()]
    panels = []
    for target in targets(verdict):
        stat = "accuracy" if target in ("pairwise", "choice") else statistic
        present = [m for m in members if _data(m.result, target) is not None]
        panels.append(Panel(
            name, target, stat, present, verdict,
            _vs_best(verdict, present, target, stat, resamples, seed),
            _error_correlation(present, target, resamples=resamples, confidence=confidence, seed=seed)
            if len(present) >= 2 else None,
            conformity(of_target(records, target), panel)))
    return panels


def member_position(names: Sequence[str], records: Sequence[Sequence[Mapping[str, Any]]],
                    manifests: Sequence[Mapping[str, Any] | None],
                    panels: Sequence[PanelMembers | None] | None = None) -> dict[int, list[PositionBias]]:
    """Each member's position bias, for runs with both answer orders (a calibration, or a run and its
    ``--reverse`` run, paired by :func:`run_biases` as the verdicts are): run index -> one per member.
    ``panels``: each run's protocol's reading of its members."""
    found: dict[int, list[PositionBias]] = {}
    readings = list(panels) if panels is not None else [None] * len(records)
    per_run = [member_views(run, reading) for run, reading in zip(records, readings, strict=True)]
    members = list(dict.fromkeys(member for views in per_run for member in views))
    for member in members:
        # a run the member is absent from gives no pairs, so no bias: the filter below drops it
        views = [views.get(member, []) for views in per_run]
        for indices, bias in run_biases(names, views, manifests):
            if bias.pairs:
                bias.name = member
                found.setdefault(indices[0], []).append(bias)
    return found


# --- same family ------------------------------------------------------------------------------------


@dataclass
class FamilyWarning:
    """A judge whose model is of the family of a system it judged, and how often it picked that system."""

    run: str
    member: str
    model: str
    family: str
    system: str
    items: int  # items where the system is one of the two answers
    judged: int  # ... with a readable judgment by the member
    picks: int  # ... where the member picked the system
    others: float  # the other members' share of picks for the system (NaN: no other member)
    verdict: float  # the verdict's share
    human: float  # the human labels' share (NaN: no human label)


def _picks(labels: Sequence[tuple[str, int]]) -> float:
    """Share of labels (label, side of the system: 1 or 2) that pick the system."""
    return sum(label == str(side) for label, side in labels) / len(labels) if labels else math.nan


def same_family(run: str, records: Sequence[Mapping[str, Any]], systems: Mapping[str, tuple[str, str]],
                rules: Rule = FAMILIES, panel: PanelMembers | None = None) -> list[FamilyWarning]:
    """A warning per (member, system) when the member's model and a system it judged are of one family.
    ``systems``: item id -> (system of Assistant 1, system of Assistant 2)."""
    records = [r for r in latest_records(records) if r.get("task") == "pairwise" and str(r.get("id")) in systems]
    judged = [member_judgments(record, panel) for record in records]
    names = list(dict.fromkeys(name for found in judged for name in found))
    models = member_models(records, names, panel)
    seen = {s for pair in systems.values() for s in pair}
    warnings = []
    for member in names:
        model = models.get(member)
        family = family_of(model, rules)
        if model is None or family is None:
            continue
        for system in sorted(s for s in seen if family_of(s, rules) == family):
            own: list[tuple[str, int]] = []
            others: list[tuple[str, int]] = []
            verdicts: list[tuple[str, int]] = []
            humans: list[tuple[str, int]] = []
            items = 0
            for record, found in zip(records, judged, strict=True):
                pair = systems[str(record.get("id"))]
                if system not in pair:
                    continue
                items += 1
                side = pair.index(system) + 1
                for who, judgment in found.items():
                    if record.get("status", "ok") == "ok" and not judgment.get("missing") and judgment.get("label"):
                        (own if who == member else others).append((str(judgment["label"]), side))
                verdict = record.get("verdict") or {}
                if record.get("status", "ok") == "ok" and not verdict.get("missing") and verdict.get("label"):
                    verdicts.append((str(verdict["label"]), side))
                if (record.get("human") or {}).get("label") is not None:
                    humans.append((str(record["human"]["label"]), side))
            warnings.append(FamilyWarning(run, member, model_name(model), family, system, items, len(own),
                                          sum(label == str(side) for label, side in own), _picks(others),
                                          _picks(verdicts), _picks(humans)))
    return warnings


# --- tables -----------------------------------------------------------------------------------------


def _ci(interval: Interval | None, digits: int = 3, scale: float = 1.0) -> str:
    if interval is None or math.isnan(interval.low):
        return ""
    return f" [{interval.low * scale:.{digits}f}, {interval.high * scale:.{digits}f}]"


def _model(label: str | None) -> str:
    return model_name(label) if label else "–"


def members_table(panel: Panel) -> Table:
    """Each member's agreement with humans beside the panel's, and the panel minus the best member."""
    target = panel.target
    rows = []
    labelled = target in ("pairwise", "choice")
    for who, model, result in [*((m.name, m.model, m.result) for m in panel.members),
                               ("panel (verdict)", None, panel.verdict)]:
        if labelled and result.labels is not None:
            lab = result.labels
            rows.append([who, _model(model), str(lab.n), str(lab.missing),
                         number(100 * lab.accuracy, 1) + _ci(lab.intervals.get("accuracy"), 1, 100),
                         number(lab.kappa) + _ci(lab.intervals.get("kappa"))])
        elif not labelled and target in result.aspects:
            aspect = result.aspects[target]
            rows.append([who, _model(model), str(aspect.correlation.n), str(aspect.missing),
                         *(number(aspect.value(s)) + _ci(aspect.intervals.get(s))
                           for s in ("pearson", "spearman", "kendall"))])
    columns = (["Member", "Model", "n", "missing", "Acc. % [CI]", "Kap. [CI]"] if labelled else
               ["Member", "Model", "n", "missing", "r [CI]", "ρ [CI]", "τ [CI]"])
    notes = []
    best = panel.vs_best
    if best is not None:
        symbol = {"accuracy": "acc.", **SYMBOL}[best.statistic]
        test = best.test
        interval = "" if math.isnan(test.low) else f" [{test.low:+.3f}, {test.high:+.3f}]"
        p = "" if math.isnan(test.p_value) else f", p = {test.p_value:.3g}" if test.p_value > 0 or not test.resamples \
            else f", p < {1 / test.resamples:.2g}"  # no resample reached 0
        difference = "–" if math.isnan(test.difference) else f"{test.difference:+.3f}"
        notes.append(f"panel - best member ({best.best}) in {symbol}: {difference}{interval}{p} "
                     f"(paired bootstrap over the items both judged; the best member is picked on the same items)")
    return Table(f"Panel {panel.name} / {target}: each member's agreement with humans", columns, rows, notes=notes)


def error_table(panel: Panel) -> Table | None:
    errors = panel.errors
    if errors is None:
        return None
    rows = [[name, *(number(v, 2) for v in row)] for name, row in zip(errors.members, errors.matrix, strict=True)]
    left_out = [m for m in errors.members if m not in errors.counted]
    k = len(errors.counted)
    notes = [f"errors: {errors.error}, on the {errors.items} items every member judged",
             f"effective number of independent judges: {number(errors.effective, 2)}{_ci(errors.interval, 2)} "
             f"of {k} ({EFFECTIVE})"]
    if left_out:
        notes.append(f"left out (errors constant on these items, so no correlation): {', '.join(left_out)}")
    return Table(f"Panel {panel.name} / {panel.target}: error correlation between members",
                 ["Member", *errors.members], rows, notes=notes)


def conformity_table(panel: Panel) -> Table | None:
    if panel.conformity is None:
        return None
    rows = [[m.member, str(m.transitions), str(m.moves), str(m.toward_others) if m.with_others else "–",
             str(m.away_from_others) if m.with_others else "–", percent(m.conformity), str(m.toward_human),
             str(m.away_from_human)] for m in panel.conformity]
    return Table(f"Panel {panel.name} / {panel.target}: conformity between rounds",
                 ["Member", "transitions", "moves", "toward others", "away", "conformity %", "toward human",
                  "away from human"], rows,
                 notes=["a transition: a member's judgments in two consecutive rounds; conformity: the share of "
                        "transitions in which it moved toward the others' previous round (– : no others, e.g. "
                        "DEBATE's Scorer); toward/away from human: its moves, by the distance to the human label"])


def member_position_table(panel: Panel) -> Table | None:
    if not panel.position:
        return None
    table = position_table(panel.position)
    table.title = f"Panel {panel.name}: each member's position consistency (both answer orders)"
    table.columns[0] = "Member"
    return table


def family_tables(warnings: Sequence[FamilyWarning], rules: Rule = FAMILIES) -> list[tuple[str, Table]]:
    """The warnings, and the rows of the family rule they rest on (none without a warning)."""
    if not warnings:
        return []
    rows = [[w.run, w.member, w.model, w.system, w.family, str(w.items), str(w.judged),
             percent(w.picks / w.judged if w.judged else math.nan), percent(w.others), percent(w.verdict),
             percent(w.human)]
            for w in warnings]
    used = {w.family for w in warnings}
    rule_rows = [[family, pattern] for family, pattern in rules if family in used]
    return [("same_family", Table("Same-family warning: a judge of the family of a system it judges",
                  ["Run", "Member", "Model", "System", "Family", "items", "judged", "picks it %", "others %",
                   "verdict %", "humans %"], rows,
                  notes=["picks it %: the member's verdicts for its family's system (ties count as not picking "
                         "it); others/verdict/humans: the same share for the other members, the panel's "
                         "verdict and the human labels"])),
            ("family_rule", Table("Family rule used (model or system name, lower case, searched; first match wins)",
                  ["Family", "Pattern"], rule_rows,
                  notes=["the whole table: jurygraph.measuring.families.FAMILIES; --family NAME=REGEX adds rules"]))]


def panel_tables(panel: Panel) -> list[tuple[str, Table]]:
    """The panel's tables, each with a short name (for file names): members, errors, conformity, position."""
    found = [("members", members_table(panel)), ("errors", error_table(panel)),
             ("conformity", conformity_table(panel)), ("position", member_position_table(panel))]
    return [(kind, table) for kind, table in found if table is not None]


# --- JSON -------------------------------------------------------------------------------------------


def _num(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _interval(interval: Interval | None) -> list[float | None] | None:
    return None if interval is None else [_num(interval.low), _num(interval.high)]


def agreement_json(result: MethodResult, target: str) -> dict[str, Any]:
    """A method's (or member's) agreement on one target: its statistics, CIs and counts."""
    if result.labels is not None and result.labels.kind == target:
        lab = result.labels
        return {"n": lab.n, "missing": lab.missing, "unreadable": lab.data.unreadable,
                "accuracy": _num(lab.accuracy), "kappa": _num(lab.kappa),
                "ci": {s: _interval(i) for s, i in lab.intervals.items()}}
    aspect = result.aspects.get(target)
    if aspect is None:
        return {}
    return {"n": aspect.correlation.n, "missing": aspect.missing, "unreadable": aspect.data.unreadable,
            "level": aspect.level,
            **{s: _num(aspect.value(s)) for s in metrics.STATISTICS},
            "ci": {s: _interval(i) for s, i in aspect.intervals.items()}}


def position_json(bias: PositionBias) -> dict[str, Any]:
    return {"name": bias.name, "pairs": bias.pairs, "flips": bias.flips,
            "flip_rate": _num(bias.share(bias.flips, of_verdicts=False)), "first_wins": _num(bias.share(bias.first)),
            "second_wins": _num(bias.share(bias.second)), "ties": _num(bias.share(bias.ties)),
            "favours": bias.favoured}


def moves_json(moves: Moves) -> dict[str, Any]:
    return {"member": moves.member, "transitions": moves.transitions, "moves": moves.moves,
            "toward_others": moves.toward_others if moves.with_others else None,
            "away_from_others": moves.away_from_others if moves.with_others else None,
            "conformity": _num(moves.conformity), "toward_human": moves.toward_human,
            "away_from_human": moves.away_from_human}


def panel_json(panel: Panel) -> dict[str, Any]:
    """One panel as plain data, with the issue's field names."""
    errors, best = panel.errors, panel.vs_best
    return {
        "name": panel.name, "target": panel.target, "statistic": panel.statistic,
        "members": [{"name": m.name, "model": m.model, **agreement_json(m.result, panel.target)}
                    for m in panel.members],
        "panel": agreement_json(panel.verdict, panel.target),
        "panel_vs_best": None if best is None else {
            "best": best.best, "statistic": best.statistic, "panel": _num(best.panel),
            "best_value": _num(best.best_value),
            "difference": _num(best.test.difference), "ci": [_num(best.test.low), _num(best.test.high)],
            "p_value": _num(best.test.p_value), "resamples": best.test.resamples},
        "error_correlation": None if errors is None else {
            "members": errors.members, "matrix": [[_num(v) for v in row] for row in errors.matrix],
            "items": errors.items, "error": errors.error, "counted": errors.counted},
        "effective_judges": None if errors is None else _num(errors.effective),
        "effective_judges_ci": None if errors is None else _interval(errors.interval),
        "effective_judges_definition": EFFECTIVE,
        "conformity": None if panel.conformity is None else [moves_json(m) for m in panel.conformity],
        "position": [position_json(b) for b in panel.position],
    }


def family_json(warning: FamilyWarning) -> dict[str, Any]:
    return {"run": warning.run, "member": warning.member, "model": warning.model, "family": warning.family,
            "system": warning.system, "items": warning.items, "judged": warning.judged, "picks": warning.picks,
            "picks_share": _num(warning.picks / warning.judged) if warning.judged else None,
            "others_share": _num(warning.others), "verdict_share": _num(warning.verdict),
            "human_share": _num(warning.human)}
