"""The protocol an evaluator runs, found as ``jurygraph eval --protocol`` finds it, with its options.

This is the evaluators' one door to the protocols, through the registry (:mod:`jurygraph.graphs.registry`):
``protocol`` is a built-in name (``"chateval"``), an installed package's (an entry point of ``jurygraph.protocols``),
``"package.module:factory"`` (or ``"path/to/file.py:factory"``), a :class:`~jurygraph.graphs.spec.ProtocolSpec`, or
a factory (its spec derived from its typed signature). The options are the spec's, by the names ``--param`` takes
(``agents=3``, ``turns=3``, ``peers="openai:a,openai:b"``), typed and checked by the spec (a text is read as
``--param`` reads it); on a pairwise task the calibration options too (``calibrate``, ``mec_k``, ``no_calibrate``...).
The default calibration of pairwise items (ChatEval's position calibration) is decided where ``jurygraph eval``
decides it (:func:`jurygraph.graphs.calibration.position_defaults`), on the evaluator's task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from langgraph.graph import StateGraph

from jurygraph.graphs.calibration import accepted_options, calibrated, position_defaults
from jurygraph.graphs.registry import UnknownProtocol, find, resolve_name, spec_of
from jurygraph.graphs.spec import Option, ProtocolSpec
from jurygraph.judging.items import TaskKind

ProtocolLike: TypeAlias = str | ProtocolSpec | Callable[..., StateGraph]


@dataclass(frozen=True)
class PanelProtocol:
    """A protocol ready to judge: its name (what a run directory records, and ``show``/``metaeval`` find it by),
    its spec, its uncompiled graph (calibrated as asked), the parameters a run records, and the model specs its
    options name per agent (ReFeR's ``peers``, ``area_chair``)."""

    name: str
    spec: ProtocolSpec
    graph: StateGraph
    params: dict[str, Any] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)


def resolve_protocol(protocol: ProtocolLike, task: TaskKind, options: Mapping[str, Any]) -> PanelProtocol:
    """``protocol`` with ``options`` as a graph for ``task`` items; ValueError naming what cannot be resolved."""
    spec = _spec(protocol)
    name = spec.name
    if task.value not in spec.tasks:
        raise ValueError(f"protocol {name} judges {', '.join(spec.tasks)} items, not {task.value} items")
    accepted = accepted_options(spec)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"protocol {name}: {unknown[0]} is not one of its options "
                         f"({', '.join(accepted) or 'it has none'})")
    values = {key: _value(name, option, options[key]) if key in options else option.default
              for key, option in accepted.items()}
    values.update(position_defaults(spec, values, task.value))
    try:
        built = spec.create(values)
    except (TypeError, ValueError) as err:
        raise ValueError(f"protocol {name}: {err}") from None
    if not isinstance(built.graph, StateGraph):
        raise ValueError(f"protocol {name}: its factory returned {type(built.graph).__name__}, not a StateGraph")
    built.params = {"protocol": name, **built.params}
    mode = values.get("calibrate")
    if mode:
        if task is not TaskKind.PAIRWISE:
            raise ValueError(f"calibrate={mode!r} wraps pairwise protocols; this evaluator scores ({task.value})")
        built = calibrated(built, spec, str(mode), values)
    return PanelProtocol(name, spec, built.graph, built.params, dict(built.models))


def _spec(protocol: Any) -> ProtocolSpec:
    if isinstance(protocol, ProtocolSpec):
        return protocol
    if isinstance(protocol, str):
        try:
            return find(resolve_name(protocol))
        except UnknownProtocol as err:
            raise ValueError(str(err).removeprefix("--protocol ")) from None
    if callable(protocol) and not isinstance(protocol, StateGraph):
        return spec_of(protocol, f"{protocol.__module__}:{protocol.__qualname__}")
    raise ValueError("protocol: give a protocol's name (a built-in's, an installed one's, or 'module:factory'), a "
                     f"ProtocolSpec or a factory; got {type(protocol).__name__}"
                     + (" (give the function that builds it: a factory)" if isinstance(protocol, StateGraph) else ""))


def _value(protocol: str, option: Option, value: Any) -> Any:
    """An option's value as given from Python: typed as its spec says (a text read as ``--param`` reads it) and in
    its range."""
    try:
        if isinstance(value, str) and option.type is not str:
            value = option.parse(value)
        elif value is None and option.default is not None:
            raise ValueError(f"{option.name}=None: give {_a(option.type)} (default {option.default!r})")
        elif value is not None and not _typed(value, option.type):
            raise ValueError(f"{option.name}={value!r}: not {_a(option.type)}")
        option.check(value, option.name)
    except ValueError as err:
        raise ValueError(f"protocol {protocol}: {err}") from None
    return value


def _typed(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def _a(kind: type) -> str:
    return {int: "a whole number", float: "a number", bool: "True or False", str: "a text"}.get(kind, kind.__name__)
