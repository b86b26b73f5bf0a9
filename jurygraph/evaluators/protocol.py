"""The protocol an evaluator runs: a built-in name, ``"module:factory"``, a factory, or a graph, with its options.

This is the evaluators' one door to the protocols. It resolves a name and its options to the uncompiled graph and
the parameters a run directory records; the task's own defaults (ChatEval and its baselines judge pairwise items
in both answer orders, as ChatEval's position calibration) are applied here, as ``jurygraph eval`` applies them.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph.graph import StateGraph

from jurygraph.graphs import (
    calibrate,
    create_analyze_rate,
    create_chateval,
    create_debate,
    create_ensemble,
    create_geval,
    create_refer,
    create_single_agent,
)
from jurygraph.judging.items import TaskKind

# the built-in protocols by their command-line names
BUILTIN: dict[str, Callable[..., StateGraph]] = {
    "chateval": create_chateval, "debate": create_debate, "refer": create_refer, "single": create_single_agent,
    "ensemble": create_ensemble, "geval": create_geval, "analyze-rate": create_analyze_rate,
}
# the papers' pairwise default: both answer orders (ChatEval §3.2, FairEval's BPC), as `jurygraph eval` does
BOTH_ORDERS = ("chateval", "single", "ensemble")
CALIBRATION_OPTIONS = ("calibrate", "mec_k", "mec_temperature")


@dataclass(frozen=True)
class PanelProtocol:
    """A protocol ready to judge: its name, its uncompiled graph and the parameters a run records."""

    name: str
    graph: StateGraph
    params: dict[str, Any] = field(default_factory=dict)


def resolve_protocol(protocol: str | Callable[..., StateGraph] | StateGraph, task: TaskKind,
                     options: Mapping[str, Any]) -> PanelProtocol:
    """``protocol`` with ``options`` (the factory's keyword arguments, plus ``calibrate``/``mec_k``/
    ``mec_temperature`` for a pairwise task) as a graph; ValueError naming what cannot be resolved."""
    own = {k: v for k, v in options.items() if k not in CALIBRATION_OPTIONS}
    name, factory = _factory(protocol)
    if isinstance(protocol, StateGraph):
        if own:
            raise ValueError(f"protocol options {', '.join(sorted(own))} need a factory; a graph is taken as it is")
        graph = protocol
    else:
        try:
            graph = factory(**own)
        except TypeError as err:
            raise ValueError(f"protocol {name}: {err}") from None
        if not isinstance(graph, StateGraph):
            raise ValueError(f"protocol {name}: the factory returned {type(graph).__name__}, not a StateGraph")
    mode = options.get("calibrate", "bpc" if name in BOTH_ORDERS else None)
    params: dict[str, Any] = {"protocol": name, **{k: _plain(v) for k, v in own.items()}}
    if mode:
        if task is not TaskKind.PAIRWISE:
            if "calibrate" in options:
                raise ValueError(f"calibrate={mode!r} wraps pairwise protocols; this evaluator scores ({task.value})")
        else:
            k, temperature = int(options.get("mec_k", 3)), float(options.get("mec_temperature", 1.0))
            graph = calibrate(graph, str(mode), k=k, temperature=temperature)
            params["calibrate"] = mode
            if "mec" in str(mode):
                params.update(mec_k=k, mec_temperature=temperature)
    return PanelProtocol(name, graph, params)


def _factory(protocol: Any) -> tuple[str, Callable[..., StateGraph]]:
    if isinstance(protocol, StateGraph):
        return "graph", lambda: protocol
    if callable(protocol):
        return f"{protocol.__module__}:{protocol.__qualname__}", protocol
    if not isinstance(protocol, str):
        raise ValueError(f"protocol: give a protocol's name ({', '.join(BUILTIN)}), 'module:factory', a factory or "
                         f"a StateGraph; got {type(protocol).__name__}")
    if protocol in BUILTIN:
        return protocol, BUILTIN[protocol]
    module, sep, attribute = protocol.partition(":")
    if not sep:
        raise ValueError(f"unknown protocol {protocol!r}: one of {', '.join(BUILTIN)}, or 'module:factory'")
    try:
        found = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"protocol {protocol!r}: {err}") from None
    return protocol, found


def _plain(value: Any) -> Any:
    """An option as a run directory's manifest records it (JSON; anything else by its text)."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return str(value)
