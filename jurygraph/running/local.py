"""The local engine: a run's items judged on this event loop, ``concurrency`` at a time.

Each of ``concurrency`` workers pulls the next item (:meth:`~jurygraph.running.run.Run.next_or_stop`), asks the
budget (:meth:`~jurygraph.running.run.Run.admitted`) and judges it (:meth:`~jurygraph.running.run.Run.judge_item`);
the first stop of the run (:class:`~jurygraph.running.run.RunAborted`) cancels the items in flight, whose checkpoints
stay for a resume. A Ray worker judges its shard with this engine too (:mod:`jurygraph.running.shards`).
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph

from jurygraph.running.checkpoints import has_threads
from jurygraph.running.run import Run, RunAborted

__all__ = ["LocalEngine"]


class LocalEngine:
    """Judge a run's items in this process (:class:`~jurygraph.running.run.Engine`)."""

    async def judge(self, run: Run, graph: StateGraph | CompiledStateGraph) -> None:
        """Start the run, judge its items with its checkpointer, and leave the totals for ``run.finish()``."""
        run.start()
        async with run.compiled(graph) as app:
            await self.judge_all(run, app)

    async def judge_all(self, run: Run, app: Any) -> None:
        """Judge the run's items still to do, ``concurrency`` at a time; the first stop cancels the others."""
        # a store that held no thread when the run began has none of this run's items but those it starts
        # itself: reading each item's state first (~4 database round trips through aiosqlite's thread)
        # would find nothing
        fresh = app.checkpointer is not None and not await has_threads(app.checkpointer)
        todo = run.total - len(run.finished) if run.total is not None else run.concurrency
        workers = [asyncio.create_task(_worker(run, app, fresh)) for _ in range(max(1, min(run.concurrency, todo)))]
        # the objects alive as judging starts (the imported libraries, the compiled graph, the clients: hundreds of
        # thousands) are left out of the garbage collector's passes until the items are judged: each full pass walked
        # them all, ~0.2 ms of CPU per call at zero latency (benchmarks/README.md, "Where the time goes"). Nothing is
        # lost: what becomes garbage among them is collected once they are unfrozen.
        gc.freeze()
        try:
            # the first abort cancels the other workers' items at once: their checkpoints stay for a resume. Only the
            # workers still running are waited on: a finished one in the set would end every wait at once, and the
            # loop would spin through the run's tail (as the first workers run out of items)
            running = set(workers)
            while running and not run.aborted:
                _, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            if run.aborted:
                for task in workers:
                    task.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
            else:
                await asyncio.gather(*workers)  # re-raises a worker's unexpected error
        except asyncio.CancelledError:
            run.summary.interrupted = True
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        finally:
            gc.unfreeze()
            run.close_outputs()


async def _worker(run: Run, app: Any, fresh: bool) -> None:
    while not run.aborted and not run.stopped:
        item = run.next_or_stop()
        if item is None:
            return
        answer = await run.admitted(item)
        if answer == "skip":  # held back: it alone would pass the budget; the next may fit
            continue
        if answer != "start":
            return
        try:
            await run.judge_item(app, item, fresh=fresh)
        except RunAborted as stop:
            run.aborted.append(stop)
            return
