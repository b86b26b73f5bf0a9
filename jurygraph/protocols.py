"""The protocols the command line knows, and how command-line options become a graph and its models.

Each protocol module exposes ``CLI_PROTOCOLS`` (a list of :class:`CLIProtocol`) and may expose
``CLI_WRAPPERS`` (functions that wrap any protocol's graph, e.g. position calibration; a wrapper with an
``add_arguments(options)`` method declares its own options). Add a module to
``MODULES`` to make its protocols available to ``jurygraph eval`` and ``jurygraph draw``.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from langgraph.graph import StateGraph

MODULES = [
    "jurygraph.graphs.chateval",
    "jurygraph.graphs.debate",
    "jurygraph.graphs.refer",
    "jurygraph.graphs.single",
    "jurygraph.graphs.ensemble",
    "jurygraph.graphs.geval",
    "jurygraph.graphs.calibration",
]


@dataclass
class ProtocolSetup:
    """A protocol ready to run: its uncompiled graph, the models per agent name/role, the parameters."""

    graph: StateGraph
    models: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)

    def requests_per_item(self) -> int:
        """The most model requests one item can cost under these parameters (every format re-ask and loop
        iteration included): what `eval` shows before a large plan starts, and what a dry run would print."""
        params = self.params
        count = _REQUEST_PLANS.get(str(params.get("protocol")), _by_nodes)(self, params)
        mode = str(params.get("calibrate") or "")
        if "mec" in mode:
            count *= int(params.get("mec_k") or 1)
        if "bpc" in mode:
            count *= 2  # both answer orders
        return count


def _panel_size(params: dict[str, Any]) -> int:
    personas = params.get("personas")
    if isinstance(personas, str) and personas != "same-role":
        return len([p for p in personas.split(",") if p.strip()])
    return int(params.get("agents") or 2)


def _chateval_plan(setup: ProtocolSetup, params: dict[str, Any]) -> int:
    referees, turns = _panel_size(params), int(params.get("turns") or 2)
    summaries = turns - 1 if params.get("strategy") == "summarizer" else 0
    return referees * turns + summaries + referees  # every final judgment may be re-asked once


def _debate_plan(setup: ProtocolSetup, params: dict[str, Any]) -> int:
    n = int(params.get("max_iterations") or 1)
    # n Scorer turns (each may be re-asked) and n Critic reviews, the tie-breaker (and its re-ask), the Commander
    return 3 * n + (2 if params.get("tie_breaker") else 0) + (1 if params.get("commander_llm") else 0)


def _refer_plan(setup: ProtocolSetup, params: dict[str, Any]) -> int:
    return 2 * int(params.get("peers") or 3) + int(params.get("samples") or 1)  # n samples: n requests at most


def _samples_plan(setup: ProtocolSetup, params: dict[str, Any]) -> int:
    return int(params.get("samples") or 20)


def _by_nodes(setup: ProtocolSetup, params: dict[str, Any]) -> int:
    """A protocol without its own plan: two requests (a call and a re-ask) per node, loops not counted."""
    return 2 * max(1, len(setup.graph.nodes))


_REQUEST_PLANS: dict[str, Callable[[ProtocolSetup, dict[str, Any]], int]] = {
    "chateval": _chateval_plan, "debate": _debate_plan, "refer": _refer_plan,
    "geval": _samples_plan, "analyze-rate": _samples_plan,
    "single": lambda setup, params: 2, "ensemble": lambda setup, params: 2 * _panel_size(params),
}


@dataclass(frozen=True)
class CLIProtocol:
    name: str
    help: str
    add_arguments: Callable[[Any], None]
    build: Callable[[argparse.Namespace], ProtocolSetup]


Wrapper = Callable[[ProtocolSetup, argparse.Namespace], ProtocolSetup]


@cache
def registry() -> tuple[dict[str, CLIProtocol], list[Wrapper]]:
    protocols: dict[str, CLIProtocol] = {}
    wrappers: list[Wrapper] = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for protocol in getattr(module, "CLI_PROTOCOLS", []):
            protocols[protocol.name] = protocol
        wrappers.extend(getattr(module, "CLI_WRAPPERS", []))
    return protocols, wrappers


class SharedOptions:
    """An argument group where protocols may declare the same option (e.g. ``--samples``): first one wins."""

    def __init__(self, group: Any) -> None:
        self._group = group
        self._seen: set[str] = set()
        self.dests: list[str] = []

    def add_argument(self, *flags: str, **kwargs: Any) -> None:
        if any(flag in self._seen for flag in flags):
            return
        self._seen.update(flags)
        self.dests.append(self._group.add_argument(*flags, **kwargs).dest)


def add_protocol_arguments(parser: argparse.ArgumentParser) -> None:
    protocols, wrappers = registry()
    parser.add_argument("--protocol", choices=sorted(protocols), default="chateval",
                        help="which protocol (default: chateval)")
    options = SharedOptions(parser.add_argument_group("protocol options"))
    for protocol in protocols.values():
        protocol.add_arguments(options)
    for wrap in wrappers:
        getattr(wrap, "add_arguments", lambda options: None)(options)
    # remembered so a run's manifest can record, and --resume restore, exactly the protocol's options
    parser.set_defaults(protocol_dests=options.dests)


def build_protocol(args: argparse.Namespace) -> ProtocolSetup:
    protocols, wrappers = registry()
    setup = protocols[args.protocol].build(args)
    setup.params.setdefault("protocol", args.protocol)
    for wrap in wrappers:
        setup = wrap(setup, args)
    return setup
