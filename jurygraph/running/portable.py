"""A graph sent to another process (a worker of the Ray engine, :mod:`jurygraph.running.distributed`).

A compiled LangGraph graph does not survive pickling: its channel writes compare values with module-level
sentinels (``object()`` instances, e.g. the write that passes a node's input through), and cloudpickle copies such
an instance instead of referring to it, so the unpickled graph no longer recognises it and every item fails with
``InvalidUpdateError: Expected dict, got <object object ...>``. jurygraph's wrappers put compiled subgraphs inside
a builder (calibration's two answer orders, the escalation subgraph), so a builder is not safe either. Here a
compiled graph travels as its builder and its compile options, and is compiled again where it lands.
"""

from __future__ import annotations

import io
import pickle
import sys
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph

from jurygraph.graphs.registry import BY_VALUE


def dumps(value: Any) -> bytes:
    """``value`` pickled with cloudpickle (functions and classes by value where they must be: a protocol loaded from
    a file, :data:`jurygraph.graphs.registry.BY_VALUE`), compiled graphs as their builders."""
    from ray import cloudpickle

    for name in sorted(BY_VALUE):
        if name in sys.modules:
            cloudpickle.register_pickle_by_value(sys.modules[name])

    class Pickler(cloudpickle.CloudPickler):  # type: ignore[misc, name-defined]
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, CompiledStateGraph):
                return _compiled, (obj.builder, _compile_options(obj))
            return super().reducer_override(obj)

    buffer = io.BytesIO()
    Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    return pickle.loads(data)


def _compile_options(graph: CompiledStateGraph) -> dict[str, Any]:
    # a saver holds a connection of this process: the worker gives the graph the run's shared one
    checkpointer = None if isinstance(graph.checkpointer, BaseCheckpointSaver) else graph.checkpointer
    return {"checkpointer": checkpointer, "name": graph.name, "debug": graph.debug, "store": graph.store,
            "cache": graph.cache, "interrupt_before": graph.interrupt_before_nodes or None,
            "interrupt_after": graph.interrupt_after_nodes or None}


def _compiled(builder: StateGraph, options: dict[str, Any]) -> CompiledStateGraph:
    return builder.compile(**options)
