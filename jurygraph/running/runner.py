"""Run a protocol graph over many items: concurrent, durable, resumable, nothing lost, nothing paid twice.

One run directory holds everything about a run (its files: :mod:`jurygraph.running.rundir`); one process at a
time writes it (a lock held for the whole run). :func:`arun` (and :func:`run`, its synchronous form) takes the lock,
makes the run (:class:`jurygraph.running.run.Run`, its steps) and hands it to an engine
(:class:`jurygraph.running.run.Engine`): the local engine (:mod:`jurygraph.running.local`), the batch engine
(``batch=``, :mod:`jurygraph.running.batch`) or the Ray engine (``ray=``, :mod:`jurygraph.running.distributed`);
then the run finishes. :func:`open_run` (:mod:`jurygraph.running.openrun`) opens a run for items that come one at
a time.

Items run on asyncio, ``concurrency`` at a time. An item that fails (after the model clients' own
retries) is written as ``status: "failed"`` with the reason and the run goes on; ``resume=True``
leaves finished items alone, continues unfinished ones from their last checkpoint and retries failed
ones, keeping one line per item. An error that every further item would hit too (a rejected key, an
unknown model, no server, a full disk) stops the run at its first occurrence with :class:`RunAborted`:
finished items are kept, unstarted ones stay pending for a resume.

The names of the run's parts are importable from here too, as before they had modules of their own:
:class:`RunAborted`, :class:`RunSummary`, :func:`open_run`, :class:`OpenRun`, :func:`item_record`,
:func:`trace_config`, :func:`open_checkpointer`, :class:`ShardJob`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph

from jurygraph.judging.items import EvalItem
from jurygraph.llm.models import JuryContext
from jurygraph.running.batch import BatchEngine, BatchOptions
from jurygraph.running.budget import Budget
from jurygraph.running.checkpoints import KeepCheckpoints, open_checkpointer
from jurygraph.running.datasets import repeated
from jurygraph.running.distributed import RayEngine, RayOptions
from jurygraph.running.local import LocalEngine
from jurygraph.running.openrun import OpenRun, open_run
from jurygraph.running.records import item_record
from jurygraph.running.run import DUPLICATE_IDS, EXIT_BUDGET, Engine, Run, RunAborted, RunSummary
from jurygraph.running.rundir import run_lock
from jurygraph.running.shards import ShardJob
from jurygraph.running.tracing import trace_config

__all__ = ["EXIT_BUDGET", "OpenRun", "RunAborted", "RunSummary", "ShardJob", "arun", "item_record",
           "open_checkpointer", "open_run", "run", "trace_config"]


async def arun(
    graph: StateGraph | CompiledStateGraph,
    items: Iterable[EvalItem],
    *,
    out_dir: str | Path,
    context: JuryContext | None = None,
    concurrency: int = 8,
    checkpoint: str | None = None,
    cache: bool | str | Path = True,
    resume: bool = False,
    keep_checkpoints: KeepCheckpoints = "final",
    progress: bool = True,
    manifest: Mapping[str, Any] | None = None,
    prices: Mapping[str, Any] | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    on_token: Callable[[str, str, str], None] | None = None,
    budget: Budget | None = None,
    batch: BatchOptions | None = None,
    ray: str | RayOptions | None = None,
    workers: int | None = None,
) -> RunSummary:
    """Judge every item with ``graph`` and write the run directory; returns the summary.

    ``graph`` may be the uncompiled builder (compiled here with the run's checkpointer) or a compiled
    graph that already has one. ``checkpoint``: a SQLite path or postgres:// URL (default: in the run
    directory). ``cache``: True for the run directory, a path for a shared cache, False for none.
    ``keep_checkpoints``: ``"final"`` keeps each finished item's final checkpoint only (one checkpoint
    write per item when the LLM cache is on), ``"all"`` every step's (time travel); see
    :mod:`jurygraph.running.checkpoints`.
    ``on_token(item_id, node, text)`` receives model output as it is generated (live view).
    ``budget``: stop starting items before the run's spend (its ledger, every invocation's) would pass it
    (:mod:`jurygraph.running.budget`); the run then ends with :class:`RunAborted` (exit code 3), as it does when an
    item was held back or the spend passed the budget.
    ``manifest``: the run's own fields for ``manifest.json`` (protocol, parameters, dataset...; ``invocation``: this
    invocation's, e.g. its execution options), merged over the run's manifest on a resume
    (:meth:`jurygraph.running.rundir.RunManifest.begin`).
    ``batch``: send the calls through the provider's Batch API, in rounds (:mod:`jurygraph.running.batch`).
    ``ray``: judge the items on a Ray cluster (``"local"``, ``"auto"``, an address, or :class:`RayOptions`) with
    ``workers`` workers, each judging shards of the items as this process would (``concurrency`` items at a time per
    worker); this process writes the run directory. See :mod:`jurygraph.running.distributed`.
    Raises :class:`RunLocked` when another process writes ``out_dir``, :class:`RunAborted` when an error
    that every item would hit stopped the run (finished items are kept).
    """
    if isinstance(items, Sequence):  # a list is checked at once; a stream as it is read (a repeat stops the run)
        duplicates = repeated(item.id for item in items)
        if duplicates:
            raise ValueError(f"{DUPLICATE_IDS}; repeated: {', '.join(duplicates[:10])}")
    if ray is not None and on_token is not None:
        raise ValueError("on_token (the live view) is not available with ray=: the models answer in other processes")
    if ray is not None and batch is not None:
        raise ValueError("batch= (--batch) sends each round from this process as one provider batch: it does not "
                         "combine with ray= (--ray); a batch run needs no workers")
    cluster = RayOptions.of(ray, workers)
    engine: Engine = RayEngine(cluster) if cluster is not None else \
        BatchEngine(batch) if batch is not None else LocalEngine()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with run_lock(out):
        judged = Run(out, items, context=context, concurrency=concurrency, checkpoint=checkpoint, cache=cache,
                     resume=resume, keep_checkpoints=keep_checkpoints, progress=progress, manifest=manifest,
                     prices=prices, on_result=on_result, on_token=on_token, budget=budget)
        await engine.judge(judged, graph)
        return judged.finish()


def run(graph: StateGraph | CompiledStateGraph, items: Iterable[EvalItem], **kwargs: Any) -> RunSummary:
    """Synchronous :func:`arun`. Inside a running event loop (a notebook) it runs in a worker thread with
    its own loop; ``await arun(...)`` is the native way there."""
    work = _run_with_sigint(graph, items, **kwargs)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, work).result()


async def _run_with_sigint(graph: StateGraph | CompiledStateGraph, items: Iterable[EvalItem],
                           **kwargs: Any) -> RunSummary:
    """Turn Ctrl-C into a clean cancel: in-flight items stop, their checkpoints stay, files are closed."""
    task = asyncio.ensure_future(arun(graph, items, **kwargs))
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, task.cancel)
    try:
        return await task
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
