"""A person's verdicts on a run's items that wait for review (paused by the review node's ``interrupt()``).

:func:`reviewing` takes the run directory's lock (not when it only lists what waits: ``read_only``), opens its
checkpoints and compiles the run's graph; each :meth:`Review.answer` resumes one item's thread with
``Command(resume=...)`` -- the same call a notebook or LangGraph Studio makes -- and replaces the item's
``awaiting_review`` line of results.jsonl by its finished line (reviewer's verdict, reviewer, time, note, the panel's
original verdict in ``verdict.detail.review``). The thread is resumed
with ``durability="exit"``: the one step left (the review node) is written as one checkpoint when it ends. Nothing
calls a model: the panel's work is in the checkpoint.

Should the process die between the checkpoint and the results line, the item's checkpoint holds its reviewed
verdict; :meth:`Review.pending` (and an ``eval --resume``) write its line from there.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, StateSnapshot

from jurygraph.judging.doubt import decided_by
from jurygraph.judging.items import as_item
from jurygraph.nodes.review import read_review
from jurygraph.running.checkpoints import keep_final_only_sync, open_saver
from jurygraph.running.interrupts import review_interrupt
from jurygraph.running.records import item_record
from jurygraph.running.rundir import (
    AWAITING_REVIEW,
    CHECKPOINTS,
    iter_results,
    load_manifest,
    read_manifest,
    replace_result,
    run_lock,
    write_manifest,
)

__all__ = ["NotAwaitingReview", "Review", "awaiting_ids", "reviewing"]


class NotAwaitingReview(ValueError):
    """The item is not waiting for a review (unknown, finished, or never paused)."""


def awaiting_ids(out_dir: str | Path) -> list[str]:
    """The ids of the items whose results line says they wait for a review, in their ids' natural order (q2 before
    q10): the results file is in the order items finished, which concurrency makes differ from run to run."""
    waiting = [str(r["id"]) for r in iter_results(out_dir) if r.get("status") == AWAITING_REVIEW]
    return sorted(waiting, key=_natural)


def _natural(text: str) -> list[tuple[int, int | str]]:
    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part]


@dataclass
class Review:
    """The run's graph on its checkpoints, with the run directory locked: what waits, and answering it."""

    out: Path
    app: CompiledStateGraph[Any, Any, Any, Any]
    keep_final: bool = True  # the run keeps each finished item's final checkpoint only (--keep-checkpoints final)
    read_only: bool = False  # looking only (`review --list`): no lock taken, nothing written

    def _config(self, item_id: str) -> Any:
        return {"configurable": {"thread_id": item_id}}

    def pending(self) -> dict[str, dict[str, Any]]:
        """The items waiting for a review, each with its :meth:`request`, in their ids' natural order. An item whose
        checkpoint is already reviewed (a review that died before its results line was written) gets its line now
        and is not listed."""
        waiting = {}
        for item_id in awaiting_ids(self.out):
            snapshot = self.app.get_state(self._config(item_id))
            pause = review_interrupt(snapshot.interrupts)
            if pause is not None:
                waiting[item_id] = dict(pause.value)
            elif snapshot.values.get("verdict") and not snapshot.next and not self.read_only:
                self._record(item_id, snapshot.values)
        return waiting

    def request(self, item_id: str) -> dict[str, Any]:
        """What the review node asked about the item (its ``interrupt()`` value: verdicts, doubt, transcript...)."""
        return self.waiting(item_id)[1]

    def waiting(self, item_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The item's state and its :meth:`request`, read once; NotAwaitingReview unless a person is waited for
        (an item of a --batch run waiting for its batch is not)."""
        snapshot, pause = self._paused(item_id)
        return snapshot.values, dict(pause.value)

    def _paused(self, item_id: str) -> tuple[StateSnapshot, Any]:
        snapshot = self.app.get_state(self._config(item_id))
        pause = review_interrupt(snapshot.interrupts)
        if pause is None:
            raise NotAwaitingReview(self._why_not(item_id, snapshot.values))
        return snapshot, pause

    def answer(self, item_id: str, answer: Any) -> dict[str, Any]:
        """Resume the item with the reviewer's ``answer`` (a verdict, or ``{"verdict", "reviewer", "note"}``) and
        write its results line; returns the line. A ValueError, before anything changes, when the verdict does not
        fit the item or the item does not wait for a review."""
        if self.read_only:
            raise RuntimeError(f"{self.out}: opened to look only; answering needs reviewing(..., read_only=False)")
        config = self._config(item_id)
        snapshot, _ = self._paused(item_id)
        read_review(answer, as_item(snapshot.values["item"]))  # a wrong verdict is refused here, not re-asked
        values = self.app.invoke(Command(resume=answer), config, durability="exit")
        if values.get("__interrupt__"):
            raise NotAwaitingReview(f"item {item_id!r} asked again: {values['__interrupt__'][0].value.get('error')}")
        if self.keep_final and self.app.checkpointer is not None:
            keep_final_only_sync(self.app.checkpointer, item_id)  # type: ignore[arg-type]
        return self._record(item_id, values)

    def _record(self, item_id: str, values: dict[str, Any]) -> dict[str, Any]:
        record = item_record(as_item(values["item"]), values, "ok")
        replace_result(self.out, record)
        manifest = load_manifest(self.out)
        if manifest is not None:
            left = [i for i in manifest.awaiting_review if i != item_id]
            manifest.awaiting_review = left
            counts = manifest.counts
            counts.awaiting_review = len(left)
            counts.reviewed += 1
            counts.done += 1  # the item is decided now
            write_manifest(self.out, manifest)
        return record

    def _why_not(self, item_id: str, values: dict[str, Any]) -> str:
        if not values:
            known = awaiting_ids(self.out)
            hint = f"; waiting: {', '.join(known[:10])}" if known else "; no item of this run waits for a review"
            return f"{self.out}: no item {item_id!r} in the checkpoints{hint}"
        if decided_by(values.get("verdict")) == "review":
            return f"item {item_id!r} was already reviewed"
        return f"item {item_id!r} does not wait for a review"


@contextlib.contextmanager
def reviewing(graph: StateGraph, out_dir: str | Path, *, checkpoint: str | None = None,
              read_only: bool = False) -> Iterator[Review]:
    """Hold the run's lock (RunLocked if a run or another review writes it) and give a :class:`Review` of it.
    ``read_only``: to list what waits, as ``show`` and ``metaeval`` read a run: no lock (a run or a review may be
    writing it meanwhile), the checkpoints opened read-only, nothing answered or written."""
    out = Path(out_dir)
    manifest = read_manifest(out)
    if manifest is None:
        raise FileNotFoundError(f"{out}: no manifest.json (is it a jurygraph run directory?)")
    keep_final = manifest.get("keep_checkpoints") != "all"
    with contextlib.nullcontext() if read_only else run_lock(out), \
            open_saver(checkpoint or str(out / CHECKPOINTS), read_only=read_only) as saver:
        yield Review(out, graph.compile(checkpointer=saver), keep_final=keep_final, read_only=read_only)
