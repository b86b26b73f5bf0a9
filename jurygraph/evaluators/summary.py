"""The panel diagnostics of a whole experiment, as a summary evaluator's results (docs/PANEL.md).

From the records of the experiment's rows (their human labels from ``reference_outputs``), the measures of
:mod:`jurygraph.measuring.panel`, each one result:

- ``<key>/agreement``: the panel's agreement with the reference labels (accuracy for pairwise verdicts, the
  correlation ``statistic`` for scores), with its CI in the comment;
- ``<key>/<member>/agreement``: each member's, measured as the verdict is;
- ``<key>/panel_minus_best``: the panel's statistic minus its best member's on the items both judged (paired
  bootstrap CI in the comment): below 0, the panel costs more than its best judge and does worse;
- ``<key>/effective_judges``: how many independent judges the members' error correlations amount to.

With no reference labels there is nothing to measure: each score is None and the comment says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from jurygraph.judging.panel import PanelMembers
from jurygraph.measuring.metaeval import evaluate_records
from jurygraph.measuring.panel import agreement_json, panel_diagnostics, panel_json, targets


def summary_results(records: Sequence[Mapping[str, Any]], *, key: str, protocol: str,
                    panel: PanelMembers | None = None, statistic: str = "spearman",
                    resamples: int = 1000) -> list[dict[str, Any]]:
    """The diagnostics of the panel's records as results (see the module's doc); ``panel``: who the members are
    (the protocol's spec's reading)."""
    verdict = evaluate_records(records, protocol, resamples=resamples)
    found = targets(verdict)
    panels = {diagnosed.target: panel_json(diagnosed)
              for diagnosed in panel_diagnostics(protocol, records, verdict, statistic=statistic,
                                                 resamples=resamples, panel=panel)}
    results: list[dict[str, Any]] = []
    for target in found:
        prefix = key if len(found) == 1 else f"{key}/{target}"
        stat = "accuracy" if target in ("pairwise", "choice") else statistic
        agreement = agreement_json(verdict, target)
        results.append(_agreement(f"{prefix}/agreement", "the panel", agreement, stat))
        found_panel = panels.get(target)
        if found_panel is None:
            continue
        results.extend(_agreement(f"{prefix}/{member['name']}/agreement", member["name"], member, stat)
                       for member in found_panel["members"])
        results.append(_vs_best(f"{prefix}/panel_minus_best", found_panel["panel_vs_best"]))
        results.append(_effective(f"{prefix}/effective_judges", found_panel))
    if not results:
        results.append({"key": f"{key}/agreement", "score": None,
                        "comment": "no verdict to measure: the experiment has no judged rows"})
    return results


def _agreement(key: str, who: str, agreement: Mapping[str, Any], stat: str) -> dict[str, Any]:
    value, n = _number(agreement.get(stat)), agreement.get("n") or 0
    if value is None:
        why = f"{stat} undefined on {n} items: its verdicts or the labels do not vary" if n else \
            "no reference labels to agree with"
        return {"key": key, "score": None, "comment": f"{who}: {why}"}
    ci = (agreement.get("ci") or {}).get(stat)
    return {"key": key, "score": value,
            "comment": f"{who}: {stat} {value:.3f}{_interval(ci)} with the reference labels on {n} items"
                       + (f" ({agreement['missing']} without a verdict)" if agreement.get("missing") else "")}


def _vs_best(key: str, best: Mapping[str, Any] | None) -> dict[str, Any]:
    if not best or _number(best.get("difference")) is None:
        return {"key": key, "score": None, "comment": "no member could be compared with the panel"}
    difference = float(best["difference"])
    return {"key": key, "score": difference,
            "comment": f"panel {best['statistic']} {best['panel']:.3f} minus the best member's ({best['best']}, "
                       f"{best['best_value']:.3f}) on the items both judged: {difference:+.3f}"
                       f"{_interval(best.get('ci'))} (paired bootstrap)"}


def _effective(key: str, panel: Mapping[str, Any]) -> dict[str, Any]:
    effective = _number(panel.get("effective_judges"))
    errors = panel.get("error_correlation") or {}
    members = len(errors.get("members") or [])
    if effective is None:
        return {"key": key, "score": None, "comment": f"too few items with every member's judgment and a reference "
                                                      f"label ({errors.get('items', 0)}) to correlate errors"}
    counted = errors.get("counted") or []
    constant = "" if len(counted) == members else \
        f" ({members - len(counted)} left out: their errors do not vary on these items)"
    return {"key": key, "score": effective,
            "comment": f"{len(counted)} of {members} members judge like {effective:.2f} independent judges"
                       f"{_interval(panel.get('effective_judges_ci'))}{constant}; errors: {errors.get('error')}, "
                       f"on {errors.get('items')} items"}


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    number = float(value)
    return None if math.isnan(number) else number


def _interval(ci: Sequence[Any] | None) -> str:
    if not ci or any(_number(v) is None for v in ci):
        return ""
    return f" [{float(ci[0]):.3f}, {float(ci[1]):.3f}]"
