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
