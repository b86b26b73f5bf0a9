"""A trajectory match as a cheap first stage: items whose tool calls the match can decide get their verdict from it,
for no model call; the panel judges the rest. Built with the wiring helpers the escalation uses (its routing after
the verdict, :func:`~jurygraph.graphs.escalation.route_doubtful`, is a conditional edge from
:func:`~jurygraph.graphs.wiring.branch_when`; this is the same edge, before the panel instead of after it)::

    START --> trajectory_match -.->|decided by the trajectory match| END
              trajectory_match -.-> (the panel's first nodes) ... aggregate --> record_match --> END

What the match decides (:mod:`jurygraph.judging.trajectory` for the modes):

- a score item whose ``messages`` match its ``reference`` trajectory: the top of its scale; with
  ``on_mismatch="fail"`` a mismatch decides too, the bottom of the scale (agentevals' own pass/fail).
- a pairwise item (``messages_1``, ``messages_2``, one ``reference``): when one trajectory matches and the other does
  not, the one that matches wins (``score_1``/``score_2`` are 1 for a match, 0 for a mismatch); with
  ``on_mismatch="fail"`` two mismatches are a tie too. Two matches go to the panel: the same tool calls say nothing
  of which answer is better.
- an item without a reference trajectory, or with a trajectory the match cannot read: the panel.

A mismatch goes to the panel by default because an agent may reach the goal by another route than the reference's:
that is what the panel is for. Every verdict carries ``detail.trajectory_match`` = ``{mode, tool_args, overrides,
matched, decided, reason}``: the node after the panel's verdict (``record_match``) adds it to the panel's verdict too,
so a results line always says what the match found. A decided item's verdict is recorded as decided by
``trajectory_match`` (:func:`jurygraph.judging.doubt.decided_by`).

Apply it to the panel's graph before :func:`~jurygraph.graphs.escalation.route_doubtful`: the escalation then follows
the panel's verdict (``record_match``) as usual, and items the match decided end before it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, START, StateGraph

from jurygraph.graphs.escalation import verdict_node
from jurygraph.graphs.wiring import branch_when, edges_of, insert_after, replace_edges
from jurygraph.judging.items import TaskKind
from jurygraph.judging.judgments import pairwise_label
from jurygraph.judging.trajectory import TrajectoryMatch

__all__ = ["ON_MISMATCH", "RECORD_MATCH", "TRAJECTORY_MATCH", "match_first", "match_record"]

TRAJECTORY_MATCH = "trajectory_match"  # the first node, and what decided_by says of the items it decided
RECORD_MATCH = "record_match"
DECIDED = "decided by the trajectory match"
OnMismatch = Literal["panel", "fail"]
ON_MISMATCH: tuple[str, ...] = get_args(OnMismatch)


def _trajectories(item: Mapping[str, Any]) -> list[list[Any]]:
    """The agent's whole trajectory (a pairwise item: each side's, after their shared prefix)."""
    if item.get("task") == TaskKind.PAIRWISE.value:
        prefix = list(item.get("messages") or [])
        return [[*prefix, *side] if side else [] for side in (item.get("messages_1"), item.get("messages_2"))]
    return [list(item.get("messages") or [])]


def match_record(item: Mapping[str, Any], match: TrajectoryMatch, on_mismatch: OnMismatch = "panel") -> dict[str, Any]:
    """What the match found for an item (its state form): whether each trajectory matched and whether that decides."""
    record: dict[str, Any] = {"mode": match.mode, "tool_args": match.tool_args,
                              "overrides": sorted(match.overrides), "decided": False}
    reference = item.get("reference")
    trajectories = _trajectories(item)
    if item.get("task") not in (TaskKind.SCORE.value, TaskKind.PAIRWISE.value):
        return {**record, "reason": "the match decides score and pairwise items only"}
    if not isinstance(reference, list) or not reference:
        return {**record, "reason": "the item has no reference trajectory"}
    if not all(trajectories):
        return {**record, "reason": "the item has no trajectory (messages) to match"}
    try:
        matched = [match(trajectory, reference) for trajectory in trajectories]
    except (TypeError, ValueError) as err:
        return {**record, "reason": f"the trajectory could not be read: {err}"}
    if len(matched) == 1:
        decided = matched[0] or on_mismatch == "fail"
        reason = "the trajectory matches the reference" if matched[0] else \
            "the trajectory does not match the reference" + (" (a mismatch fails)" if decided else
                                                              ": another route may still be right")
        return {**record, "matched": matched[0], "decided": decided, "reason": reason}
    decided = matched[0] != matched[1] or (on_mismatch == "fail" and not any(matched))
    if matched[0] and matched[1]:
        reason = "both trajectories match the reference: the match cannot tell them apart"
    elif decided:
        reason = "one trajectory matches the reference" if any(matched) else \
            "neither trajectory matches the reference (a mismatch fails)"
    else:
        reason = "neither trajectory matches the reference: other routes may still be right"
    return {**record, "matched": matched, "decided": decided, "reason": reason}


def _verdict(item: Mapping[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """The verdict of an item the match decided."""
    matched = record["matched"]
    base = {"method": "trajectory match", "n_judgments": 0, "n_missing": 0, "missing": False,
            "detail": {TRAJECTORY_MATCH: record}}
    if isinstance(matched, list):
        score_1, score_2 = float(matched[0]), float(matched[1])
        return {**base, "kind": TaskKind.PAIRWISE.value, "score_1": score_1, "score_2": score_2,
                "label": pairwise_label(score_1, score_2)}
    scale = item.get("scale") or {}
    return {**base, "kind": TaskKind.SCORE.value, "score": float(scale["high"] if matched else scale["low"])}


def match_first(builder: StateGraph, match: TrajectoryMatch | str = "strict", *, on_mismatch: OnMismatch = "panel",
                source: str | None = None) -> StateGraph:
    """Put the trajectory match before the panel of ``builder`` (see the module's doc); returns ``builder``, edited.

    ``match``: a :class:`~jurygraph.judging.trajectory.TrajectoryMatch` or a mode name (strict, unordered, subset,
    superset); ``on_mismatch``: ``"panel"`` (default) or ``"fail"``; ``source``: the node that writes the panel's
    verdict (default: the one that ends the graph)."""
    check = match if isinstance(match, TrajectoryMatch) else TrajectoryMatch(match)  # type: ignore[arg-type]
    if on_mismatch not in ON_MISMATCH:
        raise ValueError(f"on_mismatch must be one of {', '.join(ON_MISMATCH)}, not {on_mismatch!r}")
    source = source or verdict_node(builder)
    starts = sorted(target for origin, target in edges_of(builder) if origin == START)
    fan_out = builder.branches.get(START) or {}
    if bool(starts) == bool(fan_out) or len(fan_out) > 1:
        raise ValueError("the panel's graph should start with plain edges from START, or with one conditional edge "
                         "(a fan-out such as per_turn's)")

    def first(state: dict[str, Any]) -> dict[str, Any]:
        item = state["item"]
        record = match_record(item, check, on_mismatch)
        return {"verdict": _verdict(item, record)} if record["decided"] else {}

    def after_panel(state: dict[str, Any]) -> dict[str, Any]:
        verdict = dict(state.get("verdict") or {})
        record = match_record(state["item"], check, on_mismatch)
        return {"verdict": {**verdict, "detail": {**(verdict.get("detail") or {}), TRAJECTORY_MATCH: record}}}

    def decided(state: dict[str, Any]) -> bool:
        detail = (state.get("verdict") or {}).get("detail") or {}
        return bool((detail.get(TRAJECTORY_MATCH) or {}).get("decided"))

    node: RunnableLambda = RunnableLambda(first, name=TRAJECTORY_MATCH)
    builder.add_node(TRAJECTORY_MATCH, node)
    if starts:
        replace_edges(builder, remove=[(START, target) for target in starts],
                      add=[(START, TRAJECTORY_MATCH), *((TRAJECTORY_MATCH, target) for target in starts)])
        branch_when(builder, TRAJECTORY_MATCH, [(DECIDED, decided, END)])
    else:  # the panel starts with a conditional edge (per_turn's Send fan-out): the match routes before it
        (panel,) = builder.branches.pop(START).values()

        def route(state: dict[str, Any]) -> Any:
            return DECIDED if decided(state) else panel.path.invoke(state)

        builder.add_edge(START, TRAJECTORY_MATCH)
        builder.add_conditional_edges(TRAJECTORY_MATCH, route, {**(panel.ends or {}), DECIDED: END})
    insert_after(builder, source, RECORD_MATCH, RunnableLambda(after_panel, name=RECORD_MATCH))
    return builder
