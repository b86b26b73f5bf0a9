"""A panel's record of one item as openevals-shaped results: the panel's, then one per member.

- The panel's result: ``key`` (the evaluator's feedback key), ``score`` (a score item: the verdict on the scale, or
  normalised to 0-1; a pairwise item: 1.0 / 0.0 / 0.5 when the first response wins / the second / a tie, with
  ``value`` "1", "2" or "tie"), ``comment`` (who said what, then the verdict) and ``metadata`` (the verdict, the
  doubt signals, the item's id in the run directory).
- One result per member (``key="<key>/<member>"``): its own judgment, the same way, so a harness's dashboard shows
  each judge beside the panel. The members are those ``jurygraph metaeval`` reads (:mod:`jurygraph.measuring.members`
  with the protocol's spec's reading: ChatEval's referees, ReFeR's peers and area chair, DEBATE's Scorer before and
  after critique...), each in the original answer order.
- A verdict or judgment that could not be read is reported as missing: ``score`` None (the harness's "no score"),
  the reason in the comment. Never a 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jurygraph.judging.items import Scale, TaskKind, format_score
from jurygraph.judging.panel import PanelMembers

PAIRWISE_SCORES = {"1": 1.0, "2": 0.0, "tie": 0.5}
PAIRWISE_WORDS = {"1": "response 1", "2": "response 2", "tie": "tie"}


def is_missing(judgment: Mapping[str, Any] | None) -> bool:
    return not judgment or bool(judgment.get("missing"))


def scored(judgment: Mapping[str, Any] | None, task: TaskKind, scale: Scale | None,
           normalize: bool) -> tuple[float | None, str | None]:
    """(score, value) of a verdict or judgment: None when it is missing (or lacks what its task needs)."""
    if is_missing(judgment):
        return None, None
    assert judgment is not None
    if task is TaskKind.PAIRWISE:
        label = judgment.get("label")
        return (PAIRWISE_SCORES[label], str(label)) if label in PAIRWISE_SCORES else (None, None)
    raw = judgment.get("score")
    if raw is None:
        return None, None
    if normalize and scale is not None:
        return (float(raw) - scale.low) / (scale.high - scale.low), None
    return float(raw), None


def said(judgment: Mapping[str, Any] | None, task: TaskKind) -> str:
    """What a judge or the panel concluded, in a few words: "4", "response 1 (8 vs 6)", "no readable judgment"."""
    if is_missing(judgment):
        reason = (judgment or {}).get("reason")
        return "no readable judgment" + (f" ({reason})" if reason else "")
    assert judgment is not None
    if task is TaskKind.PAIRWISE:
        label = judgment.get("label")
        words = PAIRWISE_WORDS.get(str(label), str(label))
        s1, s2 = judgment.get("score_1"), judgment.get("score_2")
        return f"{words} ({format_score(s1)} vs {format_score(s2)})" if s1 is not None and s2 is not None else words
    return format_score(judgment["score"]) if judgment.get("score") is not None else "no score"


def comment(record: Mapping[str, Any], members: Mapping[str, Mapping[str, Any]], task: TaskKind,
            scale: Scale | None, protocol: str) -> str:
    """The short account a harness shows: each member's conclusion, the verdict, the doubt signals."""
    verdict = record.get("verdict") or {}
    parts = [f"{name}: {said(judgment, task)}" for name, judgment in members.items()]
    on = f" on {scale}" if task is TaskKind.SCORE and scale is not None else ""
    if is_missing(verdict):
        ending = f"{protocol} gave no verdict: no judgment could be read"
    elif task is TaskKind.PAIRWISE:
        label = str(verdict.get("label"))
        ending = f"verdict: {'tie' if label == 'tie' else PAIRWISE_WORDS[label] + ' wins'}" + \
            (f" ({format_score(verdict['score_1'])} vs {format_score(verdict['score_2'])})"
             if verdict.get("score_1") is not None and verdict.get("score_2") is not None else "")
    else:
        ending = f"verdict: {said(verdict, task)}{on}"
    doubt = record.get("doubt") or {}
    # the signals that say something: a flip or a missing judge only when there is one
    signals = ", ".join("the order changed the verdict" if name == "flip" else
                        f"{name} {format_score(value) if isinstance(value, float) else value}"
                        for name, value in doubt.items() if value or name not in ("flip", "missing"))
    return "; ".join([*parts, ending]) + (f" ({signals})" if signals else "")


def panel_results(record: Mapping[str, Any], *, key: str, task: TaskKind, scale: Scale | None, normalize: bool,
                  protocol: str, panel: PanelMembers | None = None, run_dir: str | None = None) -> list[dict[str, Any]]:
    """The panel's result, then one per member (see the module's doc); ``panel``: who the members are (the
    protocol's spec's reading)."""
    # imported here: the measuring layer loads numpy and scipy (~1 s), which an evaluator's import need not wait for
    from jurygraph.measuring.members import member_judgments

    verdict = record.get("verdict") or {}
    members = member_judgments(record, panel)
    score, value = scored(verdict, task, scale, normalize)
    metadata: dict[str, Any] = {"protocol": protocol, "item_id": record.get("id"), "doubt": record.get("doubt") or {},
                                "missing": score is None}
    if task is TaskKind.SCORE:
        metadata.update(verdict=verdict.get("score"), scale=[scale.low, scale.high] if scale else None,
                        normalized=normalize)
    else:
        metadata.update(verdict=verdict.get("label"), score_1=verdict.get("score_1"), score_2=verdict.get("score_2"))
    if run_dir is not None:
        metadata["run_dir"] = run_dir
    verdict_result: dict[str, Any] = {"key": key, "score": score, "metadata": metadata,
                                      "comment": comment(record, members, task, scale, protocol)}
    if task is TaskKind.PAIRWISE:
        verdict_result["value"] = value
    results = [verdict_result]
    for name, judgment in members.items():
        member_score, member_value = scored(judgment, task, scale, normalize)
        evidence = judgment.get("evidence")
        result: dict[str, Any] = {
            "key": f"{key}/{name}", "score": member_score,
            "comment": f"{name}: {said(judgment, task)}" + (f". {evidence}" if evidence else ""),
            "metadata": {"member": name, "item_id": record.get("id"), "missing": member_score is None,
                         **({"score": judgment.get("score")} if task is TaskKind.SCORE else
                            {"label": judgment.get("label"), "score_1": judgment.get("score_1"),
                             "score_2": judgment.get("score_2")})}}
        if task is TaskKind.PAIRWISE:
            result["value"] = member_value
        results.append(result)
    return results
