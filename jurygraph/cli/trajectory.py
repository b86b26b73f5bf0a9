"""``--trajectory-match`` and its options: the tool-call match that decides what it can before the panel
(:mod:`jurygraph.graphs.trajectory`), read by every protocol (``eval``, ``draw``, ``bench``; a run's manifest keeps
them, so ``--resume``, ``review`` and ``report`` rebuild the same graph)."""

from __future__ import annotations

import argparse
from typing import Any

from jurygraph.cli.preflight import UsageError
from jurygraph.graphs.trajectory import ON_MISMATCH, match_first
from jurygraph.judging.trajectory import ARGS_MODES, MATCH_MODES, TrajectoryMatch

DESTS = ("trajectory_match", "tool_args", "tool_args_override", "trajectory_mismatch")


def add_trajectory_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("trajectory match (conversation items with a reference trajectory)")
    group.add_argument("--trajectory-match", choices=MATCH_MODES,
                       help="match each item's tool calls against its reference trajectory first (agentevals' modes: "
                            "strict = same messages and calls in order, unordered = same calls in any order, subset = "
                            "no call beyond the reference's, superset = every reference call made); a match decides "
                            "the item (the top of its scale; pairwise: the side that matches wins) for no model call, "
                            "the panel judges the rest (jurygraph's own, beyond the papers)")
    group.add_argument("--tool-args", choices=ARGS_MODES, default=None,
                       help="--trajectory-match: how two calls' arguments compare: exact (default), ignore, subset "
                            "(the agent's are part of the reference's) or superset (they include all of them)")
    group.add_argument("--tool-args-override", action="append", metavar="TOOL=MODE|KEY,KEY",
                       help="--trajectory-match: compare one tool's arguments by another mode, or by some keys only "
                            "(a dotted key reaches into objects), e.g. search=ignore or weather=city,units "
                            "(repeatable)")
    group.add_argument("--trajectory-mismatch", choices=ON_MISMATCH, default=None,
                       help="--trajectory-match: what a mismatch does: panel (default; another route may still be "
                            "right) or fail (the bottom of the scale, as agentevals' match alone would say)")


def overrides_of(values: list[str] | None) -> dict[str, str | list[str]]:
    """``TOOL=MODE`` or ``TOOL=KEY,KEY`` options as the match's overrides."""
    found: dict[str, str | list[str]] = {}
    for value in values or []:
        tool, sep, rule = value.partition("=")
        if not sep or not tool.strip() or not rule.strip():
            raise UsageError(f"--tool-args-override {value!r}: write TOOL=MODE ({', '.join(ARGS_MODES)}) or "
                             "TOOL=KEY,KEY")
        rule = rule.strip()
        found[tool.strip()] = rule if rule in ARGS_MODES else [key.strip() for key in rule.split(",") if key.strip()]
    return found


def trajectory_params(args: argparse.Namespace) -> dict[str, Any] | None:
    """The match the options ask for, as the manifest records it (None: no match)."""
    mode = getattr(args, "trajectory_match", None)
    if mode is None:
        given = [f"--{dest.replace('_', '-')}" for dest in DESTS[1:] if getattr(args, dest, None)]
        if given:
            raise UsageError(f"{', '.join(given)} shape(s) the trajectory match: give --trajectory-match MODE too")
        return None
    return {"mode": mode, "tool_args": getattr(args, "tool_args", None) or "exact",
            "overrides": overrides_of(getattr(args, "tool_args_override", None)),
            "on_mismatch": getattr(args, "trajectory_mismatch", None) or "panel"}


def trajectory_setup(graph: Any, params: dict[str, Any], args: argparse.Namespace) -> Any:
    """The panel's graph with the match before it when the options ask for one; ``params`` records it."""
    found = trajectory_params(args)
    if found is None:
        return graph
    params["trajectory_match"] = found
    match = TrajectoryMatch(found["mode"], found["tool_args"], found["overrides"])
    return match_first(graph, match, on_mismatch=found["on_mismatch"])
