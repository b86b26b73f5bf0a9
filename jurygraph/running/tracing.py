"""How a run's items appear in LangSmith when tracing is on (``LANGSMITH_TRACING``); inert otherwise.

LangSmith is imported only when asked whether tracing is on (:func:`tracing`), never at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

__all__ = ["flush_traces", "trace_config", "tracing"]


def trace_config(item_id: str, protocol: str, run: str) -> RunnableConfig:
    """How one item's graph run is found in LangSmith (when ``LANGSMITH_TRACING`` is on; otherwise these are
    inert): named after the protocol and the item, with the item id, protocol and run directory as metadata and
    tags. LangChain hands metadata and tags down to every node and model call of the item, and each model call
    adds its agent's name (``jurygraph.llm.calls``)."""
    tags = [f"item:{item_id}", *([f"protocol:{protocol}"] if protocol else [])]
    metadata = {"item_id": item_id, "run": run, **({"protocol": protocol} if protocol else {})}
    return {"run_name": f"{protocol or 'jurygraph'} item {item_id}", "tags": tags, "metadata": metadata}


def tracing() -> bool:
    """Whether LangSmith tracing is on (``LANGSMITH_TRACING``, or a harness's own tracing context)."""
    from langsmith.utils import tracing_is_enabled

    return bool(tracing_is_enabled())


def flush_traces() -> None:
    """Send the traces still queued before the command (or a worker process) exits; a no-op when tracing is off."""
    if tracing():
        from langchain_core.tracers.langchain import wait_for_all_tracers

        wait_for_all_tracers()
