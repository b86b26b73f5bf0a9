"""Edge-editing helpers: a communication strategy is a wiring of nodes, and these edit a builder.

Every protocol factory returns an *uncompiled* ``StateGraph``; these helpers change its edges before
``compile()``. Node names are ``<agent>_t<turn>`` for ChatEval speakers (``critic_t2``), ``round_<t>``
and ``summarizer_t<t>`` for deliveries, ``aggregate`` for the verdict (and, in the hybrids, ``devil_t<t>``,
``consensus_t<t>``, ``peer_<k>_r<round>``).

:func:`turn_boundaries` finds where one turn hands over to the next, :func:`insert_after` puts a node there,
and :func:`exit_when` makes a hand-over conditional (:func:`branch_when`, with several exits): with them ChatEval's
early stop, the devil's advocate and the escalation after the verdict (``graphs/escalation.py``) are a few lines
each (``notebooks/02_compose_a_strategy.ipynb`` writes such a protocol by hand).
"""

from __future__ import annotations

import copy
import re
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

__all__ = ["END", "START", "branch_when", "chain", "copied", "edges_of", "exit_when", "insert_after", "remove_edge",
           "replace_edges", "turn_boundaries"]

_TURN = re.compile(r"(?:_t|^round_)(\d+)(?:_g\d+)?$")


# a protocol as a wrapper takes it: its graph (uncompiled or compiled), or a factory returning one
GraphLike = StateGraph | CompiledStateGraph | Callable[[], StateGraph]


def compile_inner(graph: GraphLike) -> CompiledStateGraph[Any, Any, Any, Any]:
    """A wrapped protocol's graph, compiled without a checkpointer of its own: inside the wrapper's node it
    inherits the wrapper's, namespaced under the item's thread."""
    built = graph() if callable(graph) and not isinstance(graph, StateGraph | CompiledStateGraph) else graph
    return built.compile() if isinstance(built, StateGraph) else built  # type: ignore[union-attr]


def copied(builder: StateGraph) -> StateGraph:
    """A copy of an uncompiled graph that these helpers can edit without editing ``builder`` (they edit in place):
    its own nodes, edges and branches; the nodes' runnables and the state's schemas are shared, never edited."""
    new = copy.copy(builder)
    new.nodes = dict(builder.nodes)
    new.edges = set(builder.edges)
    new.branches = defaultdict(dict, {source: dict(found) for source, found in builder.branches.items()})
    new.waiting_edges = set(builder.waiting_edges)
    new.schemas, new.channels, new.managed = dict(builder.schemas), dict(builder.channels), dict(builder.managed)
    return new


def edges_of(builder: StateGraph) -> set[tuple[str, str]]:
    """The plain edges of a builder (fan-in edges expanded to one pair per source)."""
    pairs = set(builder.edges)
    for sources, target in builder.waiting_edges:
        pairs.update((s, target) for s in sources)
    return pairs


def remove_edge(builder: StateGraph, source: str, target: str) -> None:
    """Remove the edge source -> target (also from a fan-in); a missing edge is an error, not a no-op."""
    if (source, target) in builder.edges:
        builder.edges.discard((source, target))
        return
    for sources, waiting_target in list(builder.waiting_edges):
        if waiting_target == target and source in sources:
            builder.waiting_edges.discard((sources, waiting_target))
            rest = tuple(s for s in sources if s != source)
            if len(rest) > 1:
                builder.waiting_edges.add((rest, target))
            elif rest:
                builder.edges.add((rest[0], target))
            return
    raise KeyError(f"no edge {source} -> {target} in this graph")


def replace_edges(builder: StateGraph, remove: Iterable[tuple[str, str]] = (),
                  add: Iterable[tuple[str | Sequence[str], str]] = ()) -> StateGraph:
    """Remove some edges and add others; a tuple of sources in ``add`` waits for all of them (a barrier)."""
    for source, target in remove:
        remove_edge(builder, source, target)
    for sources, target in add:
        builder.add_edge(sources if isinstance(sources, str) else list(sources), target)
    return builder


def chain(builder: StateGraph, nodes: Sequence[str], start: str = START, end: str | None = None) -> None:
    """Edges start -> nodes[0] -> nodes[1] -> ... (-> end): a one-by-one sequence."""
    previous: str = start
    for node in nodes:
        builder.add_edge(previous, node)
        previous = node
    if end is not None:
        builder.add_edge(previous, end)


def turn_of(node: str) -> int | None:
    """The discussion turn a node belongs to, from its name (``critic_t2``, ``round_2``, ``summarizer_t2``)."""
    match = _TURN.search(node)
    return int(match.group(1)) if match else None


def turn_boundaries(builder: StateGraph) -> list[tuple[str, tuple[str, ...]]]:
    """Where one discussion turn hands over to the next: per turn t (in order), the node that ends turn t and
    the nodes of turn t + 1 it leads to (one in one-by-one, the whole panel in simultaneous talk)."""
    handover: dict[str, set[str]] = {}
    for source, target in edges_of(builder):
        t_source, t_target = turn_of(source), turn_of(target)
        if t_source is not None and t_target == t_source + 1:
            handover.setdefault(source, set()).add(target)
    return [(s, tuple(sorted(handover[s]))) for s in sorted(handover, key=lambda n: turn_of(n) or 0)]


def insert_after(builder: StateGraph, source: str, name: str, node: Any) -> StateGraph:
    """Add ``node`` right after ``source``: it takes over source's plain out-edges (source -> name -> ...)."""
    targets = [t for s, t in edges_of(builder) if s == source]
    builder.add_node(name, node)
    replace_edges(builder, remove=[(source, t) for t in targets], add=[(source, name), *((name, t) for t in targets)])
    return builder


def exit_when(builder: StateGraph, source: str, condition: Callable[[dict[str, Any]], bool], exit_to: str,
              label: str = "exit") -> StateGraph:
    """Turn ``source``'s plain out-edges into a conditional edge: when ``condition(state)`` holds, go to
    ``exit_to`` (edge labelled ``label`` in the diagram), otherwise on as before (to every old target)."""
    return branch_when(builder, source, [(label, condition, exit_to)])


def branch_when(builder: StateGraph, source: str,
                branches: Sequence[tuple[str, Callable[[dict[str, Any]], bool], str]]) -> StateGraph:
    """:func:`exit_when` with several exits: ``branches`` are ``(label, condition, target)``, checked in order; the
    first whose condition holds is taken, and when none does the edge goes on as before (to every old target)."""
    targets = sorted(t for s, t in edges_of(builder) if s == source)
    if not targets:
        raise KeyError(f"{source} has no plain out-edge to make conditional")
    labels = [label for label, _, _ in branches]
    if len(set(labels)) != len(labels) or set(labels) & set(targets):
        raise ValueError(f"branch labels must be distinct and differ from {source}'s targets: {labels}")
    for target in targets:
        remove_edge(builder, source, target)
    ends: dict[Hashable, str] = {**{label: to for label, _, to in branches}, **{t: t for t in targets}}

    def route(state: dict[str, Any]) -> str | list[str]:
        for label, condition, _ in branches:
            if condition(state):
                return label
        return targets[0] if len(targets) == 1 else list(targets)

    builder.add_conditional_edges(source, route, ends)
    return builder
