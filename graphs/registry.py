"""Where protocols are found, by the name ``--protocol`` (and ``--escalate-protocol``, ``bench --method``, a run's
manifest) gives:

- a built-in protocol: the ``SPEC`` (or ``SPECS``) of a module of ``jurygraph.graphs`` (:mod:`.spec`); nothing
  lists them, a module that declares one is one;
- an installed package's: an entry point of the ``jurygraph.protocols`` group, whose object is a
  :class:`~jurygraph.graphs.spec.ProtocolSpec` or a bare factory::

      [project.entry-points."jurygraph.protocols"]
      mine = "mypkg.protocols:SPEC"        # or "mypkg.protocols:create_mine"

- your own module: ``package.module:name`` (imported as installed, or from the current directory), or
  ``path/to/file.py:name``; ``name`` is a spec or a bare factory (its spec then derived from its signature).

The name is what a run records as its protocol, so ``--resume``, ``show``, ``report`` and ``metaeval`` find the
protocol again the same way (a file path is recorded absolute).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import os
import pkgutil
import re
import sys
from collections.abc import Iterator
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

from langgraph.graph import StateGraph

from jurygraph.graphs.spec import Option, Params, ProtocolSpec, derive_spec

GROUP = "jurygraph.protocols"
DEFAULT = "chateval"  # what --protocol is when not given
# whose single agent a protocol without its own judges an escalated item with (ChatEval's single-agent prompt)
SINGLE_AGENT = "single"


# modules a name loaded from a file, or from the current directory: a worker of another process may not find them
# by name, so what they define travels by value (jurygraph.running.portable)
BY_VALUE: set[str] = set()


class UnknownProtocol(LookupError):
    """No protocol by that name (the message says which names there are and how to give your own)."""


@functools.cache
def builtin() -> dict[str, ProtocolSpec]:
    """The built-in protocols, in their listed order: every spec a module of ``jurygraph.graphs`` declares."""
    package = importlib.import_module("jurygraph.graphs")
    found: list[ProtocolSpec] = []
    for info in pkgutil.iter_modules(package.__path__):
        found += specs_in(importlib.import_module(f"{package.__name__}.{info.name}"))
    by_name: dict[str, ProtocolSpec] = {}
    for spec in sorted(found, key=lambda s: (s.order, s.name)):
        if spec.name in by_name:
            raise ValueError(f"two built-in protocols are named {spec.name!r}")
        by_name[spec.name] = spec
    return by_name


def specs_in(module: ModuleType) -> list[ProtocolSpec]:
    """The specs a module declares: its ``SPEC`` and the members of its ``SPECS``."""
    found = [getattr(module, "SPEC", None), *getattr(module, "SPECS", ())]
    return [spec for spec in found if isinstance(spec, ProtocolSpec)]


def installed() -> dict[str, EntryPoint]:
    """The ``jurygraph.protocols`` entry points of the installed packages (read afresh: a test installs one)."""
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def names() -> list[str]:
    """Every protocol name ``--protocol`` takes besides ``module:name``: built-in and installed, sorted."""
    return sorted({*builtin(), *installed()})


def find(name: str) -> ProtocolSpec:
    """The protocol a name gives (see the module's doc); :class:`UnknownProtocol` when none."""
    if name in builtin():
        return builtin()[name]
    points = installed()
    if name in points:
        return _loaded(points[name].name, points[name].value, f"entry point {GROUP}: {name} = {points[name].value}")
    if ":" in name:
        module, _, attr = name.rpartition(":")
        if module and attr:
            return _loaded(name, name, name)
    raise UnknownProtocol(f"--protocol {name}: no such protocol; choose from {', '.join(names())}, or give your "
                          "own as MODULE:FACTORY (a package module, or path/to/file.py)")


def resolve_name(name: str) -> str:
    """The name to record for ``name``: a file path made absolute (a resume may run from elsewhere), else itself."""
    module, sep, attr = name.rpartition(":")
    if sep and module.endswith(".py"):
        return f"{Path(module).resolve()}:{attr}"
    return name


def short_name(name: str) -> str:
    """A protocol's name as a file name: a built-in's or an entry point's itself, ``MODULE:FACTORY``'s factory
    (``runs/create_mixed-faireval``, ``create_mixed.png``)."""
    return re.sub(r"[^\w.-]+", "_", name.rpartition(":")[2] or name).strip("_") or "protocol"


def _loaded(name: str, target: str, source: str) -> ProtocolSpec:
    module_name, _, attr = target.rpartition(":")
    try:
        module = _import(module_name)
        obj: Any = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, OSError) as err:
        raise UnknownProtocol(f"--protocol {name}: cannot load {target} ({type(err).__name__}: {err})") from None
    return spec_of(obj, name, source)


def _import(module_name: str) -> ModuleType:
    if module_name.endswith(".py"):
        path = Path(module_name)
        loader_spec = importlib.util.spec_from_file_location(f"jurygraph_protocol_{path.stem}", path)
        if loader_spec is None or loader_spec.loader is None or not path.is_file():
            raise ImportError(f"no Python file {module_name}")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[loader_spec.name] = module
        loader_spec.loader.exec_module(module)
        BY_VALUE.add(loader_spec.name)
        return module
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        # a console script does not put the current directory on the path, as `python -m` does
        if err.name != module_name.partition(".")[0] or os.getcwd() in sys.path:
            raise
        sys.path.append(os.getcwd())
        module = importlib.import_module(module_name)
        BY_VALUE.add(module_name)
        return module


def spec_of(obj: Any, name: str, source: str = "") -> ProtocolSpec:
    """A protocol from what a name points at: a spec (renamed to the name it was found by), or a bare factory."""
    if isinstance(obj, ProtocolSpec):
        return dataclasses.replace(obj, name=name, source=source)
    if callable(obj):
        return derive_spec(obj, name, source=source)
    raise UnknownProtocol(f"--protocol {name}: {source} is neither a ProtocolSpec nor a factory")


def single_agent(spec: ProtocolSpec, values: Params) -> tuple[StateGraph, int | None]:
    """What a stronger model runs alone on an item ``spec``'s panel escalates, and its most requests (None: count
    them from the graph): the protocol's own single agent, else :data:`SINGLE_AGENT`'s."""
    owner = spec if spec.single_agent is not None else builtin()[SINGLE_AGENT]
    assert owner.single_agent is not None
    plan = owner.single_agent_plan(values) if owner.single_agent_plan is not None else None
    return owner.single_agent(values), plan


def listed_options(specs: list[ProtocolSpec]) -> list[Option]:
    """The options of ``specs``, each once, in an order that keeps every spec's own order (a protocol's options
    stay together; an option several read is listed where the first of them puts it)."""
    first: dict[str, int] = {}
    by_name: dict[str, Option] = {}
    after: dict[str, set[str]] = {}
    for spec in specs:
        previous = None
        for option in spec.options:
            known = by_name.setdefault(option.name, option)
            if known != option:
                raise ValueError(f"option {option.name!r} of {spec.name} differs from the one another protocol "
                                 "declares under that name: share the Option, or name it differently")
            first.setdefault(option.name, len(first))
            after.setdefault(option.name, set())
            if previous is not None:
                after[option.name].add(previous)
            previous = option.name
    return [by_name[name] for name in _ordered(first, after)]


def _ordered(first: dict[str, int], after: dict[str, set[str]]) -> Iterator[str]:
    """A topological order of the options (each after those it follows in some spec), ties by first appearance."""
    done: set[str] = set()
    while len(done) < len(first):
        ready = [n for n in first if n not in done and after[n] <= done]
        if not ready:  # two specs order the same options both ways: their first appearance decides
            ready = [n for n in first if n not in done]
        chosen = min(ready, key=first.__getitem__)
        done.add(chosen)
        yield chosen
