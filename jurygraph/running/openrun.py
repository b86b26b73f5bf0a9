"""A run whose items come one at a time from its caller, in any order and at any moment, instead of from a list:
an evaluator inside another harness (:mod:`jurygraph.evaluators`), or any caller that judges as it goes.

:func:`open_run` opens the run directory with the run's own steps (:class:`~jurygraph.running.run.Run`): the lock
held until the block ends, :meth:`~jurygraph.running.run.Run.start` (a directory with a manifest continued as by a
resume), the run's checkpoints and call cache; :meth:`OpenRun.judge` judges and delivers each item when it is asked
for (:meth:`~jurygraph.running.run.Run.judge_item`, as every engine does); :meth:`~jurygraph.running.run.Run.finish`
when the block ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from langgraph.graph import StateGraph

from jurygraph.judging.items import EvalItem
from jurygraph.llm.models import JuryContext
from jurygraph.running.checkpoints import KeepCheckpoints
from jurygraph.running.run import Run
from jurygraph.running.rundir import RunManifest, iter_results, load_manifest, replace_result, run_lock

__all__ = ["OpenRun", "open_run"]


class OpenRun:
    """A run whose items come one at a time from its caller (see the module's doc): :func:`open_run` opens it,
    :meth:`judge` judges one item with the run's own steps. Every invocation's items stay in the run: one asked again
    that an earlier invocation finished is answered from its record (counted as skipped), one that failed is judged
    again."""

    def __init__(self, run: Run, app: Any, kept: dict[str, dict[str, Any]]) -> None:
        self._run, self._app = run, app
        self.kept = kept  # the finished records of the earlier invocations, by item id
        self._seen: set[str] = set()  # the items asked for in this invocation
        self._judging: set[str] = set()
        self.again: dict[str, dict[str, Any]] = {}  # items that failed in this invocation, then were judged again

    @property
    def out(self) -> Path:
        return self._run.out

    async def judge(self, item: EvalItem, *, traced: bool | None = None) -> dict[str, Any]:
        """The item's record: an earlier invocation's, or judged now (from its checkpoint, the call cache, or the
        models), written to results.jsonl and counted; every paid call in the ledger as it is paid. An error every
        item would hit (no key, no server, a full disk) is raised as :class:`~jurygraph.running.run.RunAborted`,
        nothing recorded; the run goes on for the next call. One call per item at a time: the caller waits for an
        item in flight."""
        run = self._run
        if item.id in self._judging:
            raise ValueError(f"item {item.id} is being judged already: wait for its record")
        if item.id not in self._seen:
            self._seen.add(item.id)
            run.summary.items += 1
            run.summary.skipped += int(item.id in self.kept)
        if item.id in self.kept:
            return self.kept[item.id]
        failed_here = run.summary.failures.pop(item.id, None) is not None
        if failed_here:  # judged again: its failure here no longer counts
            run.summary.failed -= 1
        self._judging.add(item.id)
        try:
            await run.admitted(item)
            record = await run.judge_item(self._app, item, traced=traced)
            if failed_here:
                self.again[item.id] = record
        finally:
            self._judging.discard(item.id)
        return record

    def items(self) -> int:
        """The run's items: those finished before, and those asked for since."""
        return len(self.kept.keys() | self._seen)


@contextlib.asynccontextmanager
async def open_run(graph: StateGraph, out_dir: str | Path, *, context: JuryContext | None = None,
                   keep_checkpoints: KeepCheckpoints = "final", manifest: Mapping[str, Any] | None = None,
                   prices: Mapping[str, Any] | None = None,
                   same_run: Sequence[str] = ()) -> AsyncIterator[OpenRun]:
    """A run directory open for items that come one at a time (:class:`OpenRun`), with the run's own steps: the
    run's lock held until the block ends, :meth:`~jurygraph.running.run.Run.start` (a directory with a manifest
    continued as by a resume), the run's checkpoints and call cache, and :meth:`~jurygraph.running.run.Run.finish`
    at the end (the manifest's totals from the ledger, spend.json; :class:`~jurygraph.running.run.RunAborted` if
    spend could not be written). ``manifest``: the run's own fields, as :func:`~jurygraph.running.runner.arun` takes
    them; ``same_run``: the fields of it that define the run: a directory whose manifest has other values there is
    another run (ValueError naming them), as its records would answer these items."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with run_lock(out):
        previous = load_manifest(out)
        if previous is not None and same_run:
            _check_same_run(out, previous, manifest or {}, same_run)
        run = Run(out, (), context=context, concurrency=1, resume=previous is not None,
                  keep_checkpoints=keep_checkpoints, manifest=manifest, prices=prices)
        run.total = None  # the items come as they are asked for: counted at the end
        run.start()
        run.manifest.concurrency = None  # the caller's: as many items at once as it asks for
        kept = {record["id"]: record for record in iter_results(out) if record["id"] in run.finished}
        opened = None
        try:
            async with run.compiled(graph) as app:
                opened = OpenRun(run, app, kept)
                yield opened
        finally:
            run.close_outputs()
            # one line per item, as a run's: an item judged again after it failed keeps its last line only
            for record in (opened.again.values() if opened is not None else ()):
                replace_result(out, record)
            run.total = opened.items() if opened is not None else len(kept)
            run.finish()


def _check_same_run(out: Path, previous: RunManifest, given: Mapping[str, Any], fields: Sequence[str]) -> None:
    before, now = previous.as_json(), RunManifest.model_validate(dict(given)).as_json()
    differ = [f"{key} {before.get(key)} (given: {now.get(key)})" for key in fields if before.get(key) != now.get(key)]
    if differ:
        raise ValueError(f"{out} holds another run: {'; '.join(differ)}. Its records would answer these items: "
                         "give another run directory")
