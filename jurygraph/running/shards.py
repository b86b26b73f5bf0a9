"""A shard of a run judged in another process: what a worker of the Ray engine (:mod:`jurygraph.running.distributed`)
runs. The shard is a :class:`~jurygraph.running.run.Run` started for a worker (:meth:`~jurygraph.running.run.Run.
start_shard`: no file of the run directory touched but the ledger) and judged by the local engine
(:mod:`jurygraph.running.local`) from the run's shared checkpoints and call cache, each record sent to the driver
instead of written.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph

from jurygraph.judging.items import EvalItem
from jurygraph.llm.models import JuryContext
from jurygraph.running.checkpoints import KeepCheckpoints, open_checkpointer
from jurygraph.running.local import LocalEngine
from jurygraph.running.run import Run
from jurygraph.running.tracing import flush_traces

__all__ = ["ShardJob"]


@dataclass
class ShardJob:
    """A shard of a run judged in another process by the local engine: the same judging as one process's, from the
    same shared checkpoints and call cache, with each record handed to ``deliver`` instead of written (the driver
    alone writes the run directory). Picklable: the Ray engine ships it to its workers."""

    graph: StateGraph | CompiledStateGraph
    out: Path
    context: JuryContext
    concurrency: int
    checkpoint: str
    cache: bool | str
    keep_checkpoints: KeepCheckpoints
    protocol: str
    prices: Mapping[str, Any] | None = None  # what the shard's paid calls cost (the run's spend, its budget)
    ledger: str = ""  # where the shard records what it pays: the run directory's file, or a postgresql:// URL
    run_id: str = ""
    invocation: int = 0

    @classmethod
    def of(cls, run: Run, graph: StateGraph | CompiledStateGraph, *, context: JuryContext, checkpoint: str,
           cache: bool | str) -> ShardJob:
        """``run``'s judging, for workers in other processes: ``context`` without this process's cache, the
        shared ``checkpoint`` store and ``cache`` as the workers reach them, and the ledger they record in."""
        manifest = getattr(run, "manifest", None)  # none before the run starts (a check that the job pickles)
        return cls(graph, run.out, context, run.concurrency, checkpoint, cache, run.keep_checkpoints, run.protocol,
                   run.prices, ledger=run.ledger_target, run_id=manifest.run_id if manifest is not None else "",
                   invocation=len(manifest.invocations) - 1 if manifest is not None else 0)

    async def judge(self, items: Sequence[EvalItem],
                    deliver: Callable[[dict[str, Any], dict[str, Any]], None]) -> dict[str, Any]:
        """Judge ``items``, ``concurrency`` at a time; each record goes to ``deliver(record, counters)`` as it
        finishes. Returns the shard's :meth:`~jurygraph.running.run.Run.counters`; raises
        :class:`~jurygraph.running.run.RunAborted` as a run would stop."""
        run = Run(self.out, items, context=self.context, concurrency=self.concurrency, checkpoint=self.checkpoint,
                  cache=self.cache, keep_checkpoints=self.keep_checkpoints, manifest={"protocol": self.protocol},
                  prices=self.prices)
        run.start_shard(_Delivered(deliver, run), self.ledger, self.run_id, self.invocation)
        try:
            async with open_checkpointer(self.checkpoint) as saver:
                graph = self.graph  # a compiled graph came without a checkpointer: it gets the shared one
                await LocalEngine().judge_all(run, graph.compile(checkpointer=saver) if isinstance(graph, StateGraph)
                                              else graph.copy(update={"checkpointer": saver}))
            counters = run.counters()
        finally:
            flush_traces()  # this worker process may be gone before LangSmith's queue would have been sent
            if run.llm_cache is not None:
                run.llm_cache.close()
            run.meter.ledger.close()
        if run.aborted:
            raise run.aborted[0]
        if run.summary.interrupted:
            raise asyncio.CancelledError("shard cancelled")
        return counters

    def __reduce__(self) -> tuple[Any, ...]:
        # a compiled graph (a calibrated protocol's two answer orders, the escalation subgraph) does not survive
        # plain pickling: it travels as its builder (jurygraph.running.portable)
        from jurygraph.running import portable

        return _shard_job, (portable.dumps({f.name: getattr(self, f.name) for f in dataclasses.fields(self)}),)

    async def prepare_stores(self) -> None:
        """Make the checkpoint store's tables (and say now, in one line, if it cannot be reached) before the
        workers open it all at once: LangGraph's PostgreSQL migrations are not safe to run concurrently."""
        async with open_checkpointer(self.checkpoint):
            pass


def _shard_job(data: bytes) -> ShardJob:
    from jurygraph.running import portable

    return ShardJob(**portable.loads(data))


class _Delivered:
    """A shard's results sink: each record goes to the driver with the shard's counters so far."""

    def __init__(self, deliver: Callable[[dict[str, Any], dict[str, Any]], None], run: Run) -> None:
        self._deliver, self._run = deliver, run

    def write(self, record: dict[str, Any]) -> None:
        # an item an earlier invocation paused for review: its usage was counted then (see Run.tally)
        self._deliver(record, {**self._run.counters(), "paid_before": record["id"] in self._run.still_waiting})

    def close(self) -> None:
        return None
