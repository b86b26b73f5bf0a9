"""One run of a protocol graph over items: a typed object whose named steps every engine drives.

A :class:`Run` is a run directory's state while one invocation writes it: what earlier invocations finished (their
lines kept), the call cache, the typed manifest (:class:`~jurygraph.running.rundir.RunManifest`), the spend ledger,
its meter and the budget, the results file, the summary. Its steps:

* :meth:`Run.start`: what a resume keeps, the call cache, the manifest's start, the ledger and the results file
  (:meth:`Run.start_shard` in a worker of the Ray engine, which writes no file of the run directory);
* :meth:`Run.next_item`: the items, pulled one at a time (a streamed dataset is never held whole);
* :meth:`Run.admit`: the budget's answer for an item (start, wait, skip, stop);
* :meth:`Run.judge_item`: one item, the one place an item is judged: its thread invoked or resumed with the run's
  context, its record built and delivered;
* :meth:`Run.deliver`: a record written and counted (the Ray driver delivers its workers' records here);
* :meth:`Run.finish`: totals over every invocation, the manifest's end, the stop raised if there was one.

An :class:`Engine` decides where and how the items are judged, through those steps and nothing else: the local
engine (:mod:`jurygraph.running.local`: ``concurrency`` items at a time on this event loop), the batch engine
(:mod:`jurygraph.running.batch`: rounds of provider batches), the Ray engine (:mod:`jurygraph.running.distributed`:
shards judged by the local engine in workers, :mod:`jurygraph.running.shards`). :func:`~jurygraph.running.openrun.
open_run` hands a caller the same run for items that come one at a time.

An item that fails (after the model clients' own retries) is recorded as ``status: "failed"`` with the reason and the
run goes on. An error that every further item would hit too (a rejected key, an unknown model, no server, a full
disk) stops the run at its first occurrence with :class:`RunAborted`: finished items are kept, unstarted ones stay
pending for a resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import functools
import os
import platform
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sized
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol, overload

from langchain_core.messages import AIMessageChunk
from langchain_core.runnables import RunnableConfig
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Durability, StateSnapshot

from jurygraph.judging.items import EvalItem
from jurygraph.llm.cache_postgres import is_postgres_url, open_cache
from jurygraph.llm.calls import ProviderUnavailable, ReplySource
from jurygraph.llm.models import JuryContext, MissingAPIKey, http_attempts
from jurygraph.llm.redact import redact_text, redact_url
from jurygraph.running.budget import Budget, SpendMeter
from jurygraph.running.checkpoints import KeepCheckpoints, durability, keep_final_only, open_checkpointer
from jurygraph.running.interrupts import paused_for_review, waits_for_batch
from jurygraph.running.ledger import Ledger, PostgresLedger, reconcile
from jurygraph.running.records import item_record, verdict_kind
from jurygraph.running.rundir import (
    AWAITING_REVIEW,
    CACHE,
    CHECKPOINTS,
    LEDGER,
    MANIFEST,
    RESULTS,
    BudgetInfo,
    Counts,
    Invocation,
    ResultsFile,
    RunManifest,
    SpendFigures,
    iter_results,
    load_manifest,
    write_manifest,
)
from jurygraph.running.tracing import flush_traces, trace_config, tracing

__all__ = ["DUPLICATE_IDS", "EXIT_BUDGET", "Engine", "ResultsSink", "Rounds", "Run", "RunAborted", "RunSummary"]

DUPLICATE_IDS = "item ids must be unique within a run"
EXIT_BUDGET = 3  # the run stopped at its budget: --resume with a higher one continues


class RunAborted(RuntimeError):
    """The run stopped early on an error no other item could escape; ``exit_code`` for the command line."""

    def __init__(self, reason: str, exit_code: int = 1) -> None:
        super().__init__(reason)
        self.exit_code = exit_code
        self.summary: RunSummary | None = None  # what the run did before it stopped


@dataclass
class RunSummary:
    out_dir: str
    items: int = 0
    done: int = 0
    failed: int = 0
    skipped: int = 0
    missing_verdicts: int = 0
    missing_judgments: int = 0
    requests: int = 0
    attempts: int = 0  # HTTP requests sent, the clients' retries and failed ones included
    input_tokens: int = 0
    output_tokens: int = 0
    cache_hits: int = 0
    cost_usd: float | None = None
    seconds: float = 0.0
    interrupted: bool = False
    awaiting_review: int = 0  # items paused by a review node (interrupt()): neither done nor failed
    failures: dict[str, str] = field(default_factory=dict)
    awaiting: list[str] = field(default_factory=list)  # their ids
    # the results file's lines by verdict (:func:`~jurygraph.running.records.verdict_kind`), the lines an earlier
    # invocation finished included: counted as they are written, so the summary needs no second read of the file
    verdicts: Counter[str] = field(default_factory=Counter)

    def line(self) -> str:
        cost = f", ~${self.cost_usd:.4f}" if self.cost_usd is not None else ""
        attempts = f" ({self.attempts} attempts)" if self.attempts > self.requests else ""
        waiting = f", {self.awaiting_review} await review" if self.awaiting_review else ""
        return (f"{self.done} done, {self.failed} failed{waiting}, {self.skipped} already done, "
                f"{self.missing_verdicts} missing verdicts, {self.missing_judgments} missing judgments; "
                f"{self.requests} requests{attempts}, {self.input_tokens}+{self.output_tokens} tokens{cost}; "
                f"{self.seconds:.1f}s -> {self.out_dir}")


class Engine(Protocol):
    """Where and how a run's items are judged: it starts the run (:meth:`Run.start`), judges its items through the
    run's steps (each with :meth:`Run.judge_item`, or in other processes that deliver their records to
    :meth:`Run.deliver`), and leaves the totals to :meth:`Run.finish`."""

    async def judge(self, run: Run, graph: StateGraph | CompiledStateGraph) -> None: ...


class Rounds(Protocol):
    """How an engine that judges items in rounds (the batch engine, :mod:`jurygraph.running.batch`) has their calls
    answered and paid: each round replays an item's graph afresh, the call cache answering what earlier rounds paid
    and ``replies`` what the round's batches answered (or stopping the item at a call still to be sent)."""

    @property
    def replies(self) -> ReplySource:
        """Answers the calls the cache does not hold (``JuryContext.replies``)."""
        ...

    def paid(self, item_id: str, usage: dict[str, dict[str, Any]]) -> None:
        """A paid call of ``item_id`` (``JuryContext.on_usage``): recorded in the run's ledger, counted for the item."""
        ...

    def usage(self, item_id: str, usage: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The item's usage for its record: what its calls paid over the rounds, not only in its last replay."""
        ...


class ResultsSink(Protocol):
    """Where a run's records go: the results file, or (in a Ray worker) the driver."""

    def write(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


_NO_STATE = StateSnapshot(values={}, next=(), config={}, metadata=None, created_at=None, parent_config=None,
                          tasks=(), interrupts=())


class Run:
    """One invocation of a run, as named steps (see the module's doc). Built with the run's settings, as
    :func:`jurygraph.running.runner.arun` takes them; the run directory's lock is its caller's to hold."""

    def __init__(self, out: Path, items: Iterable[EvalItem], *, context: JuryContext | None = None,
                 concurrency: int = 8, checkpoint: str | None = None, cache: bool | str | Path = True,
                 resume: bool = False, keep_checkpoints: KeepCheckpoints = "final", progress: bool = False,
                 manifest: Mapping[str, Any] | None = None, prices: Mapping[str, Any] | None = None,
                 on_result: Callable[[dict[str, Any]], None] | None = None,
                 on_token: Callable[[str, str, str], None] | None = None, budget: Budget | None = None) -> None:
        self.out, self.concurrency, self.checkpoint = out, concurrency, checkpoint
        # the items are pulled one at a time as workers free up (a streamed dataset is never held whole); the
        # total is known when the source has a length (a list, a Dataset)
        self.items: Iterator[EvalItem] = iter(items)
        self.total: int | None = len(items) if isinstance(items, Sized) else None
        self.seen: set[str] = set()
        self.cache, self.resume, self.keep_checkpoints, self.progress = cache, resume, keep_checkpoints, progress
        self.manifest_given, self.prices, self.on_result, self.on_token = manifest or {}, prices, on_result, on_token
        self.context = context or JuryContext()
        self.started = time.monotonic()
        self.attempts_before = Counter(http_attempts)
        self.generation: dict[str, dict[str, Any]] = {}  # agent -> the generation parameters it was called with
        self.kept = Counts()  # what the earlier invocations' finished items were (their lines kept)
        self.kept_ids: list[str] = []
        self.done_ids: list[str] = []  # the items this invocation finished
        self.aborted: list[RunAborted] = []
        self.still_waiting: set[str] = set()  # items a previous invocation paused for review, left as they were
        self.protocol = str(self.manifest_given.get("protocol") or "")
        self.traced = tracing()
        self.budget, self.stopped = budget, ""  # stopped: "budget" once the budget stopped starting items
        self.item_finished = asyncio.Event()  # set (and replaced) as each item finishes: the budget's waiters
        self.workers_cache_hits = 0  # what the workers of a Ray run counted (their cache hits are not this process's)
        self.remote_ledger: PostgresLedger | None = None  # a cluster's workers on other machines record here
        self.ledger_target = ""  # where this run's workers record what they pay (a file, or a postgresql:// URL)

    # --- start ---

    def start(self) -> None:
        """What a resumed run keeps, the call cache, the manifest's start (this invocation added), the ledger
        (reconciled with what an earlier invocation left), the spend and the results file."""
        out = self.out
        if not self.resume and (out / RESULTS).exists() and (out / RESULTS).stat().st_size:
            raise FileExistsError(f"{out / RESULTS} exists: pass resume=True (--resume) or choose another --out")
        self._prepare()
        given = dict(self.manifest_given)
        invocation = Invocation.model_validate({"at": datetime.now(UTC).isoformat(), "pid": os.getpid(),
                                                "resume": self.resume, **(given.pop("invocation", None) or {})})
        previous = load_manifest(out)
        self.manifest = RunManifest.begin(previous, given, invocation)
        self.manifest.started = invocation.at
        self.manifest.versions = _versions()
        self.manifest.concurrency, self.manifest.items = self.concurrency, self.total
        self.manifest.checkpoint = redact_url(self.checkpoint) if self.checkpoint else CHECKPOINTS
        self.manifest.keep_checkpoints = self.keep_checkpoints
        # written now (ended: null) and again at the end, so a run killed half-way can be resumed by its manifest
        self.manifest.ended = None
        self.generation = dict(self.manifest.generation)
        self.ledger = Ledger(out / LEDGER, run=self.manifest.run_id, invocation=len(self.manifest.invocations) - 1)
        self.ledger_target = str((out / LEDGER).resolve())
        reconcile(self.ledger, out, own_cache=self.llm_cache if self.cache is True else None,
                  models=self.manifest.models, prices=self.prices)
        self._backfill()
        self.meter = SpendMeter(self.ledger, self.prices, out)
        write_manifest(out, self.manifest)
        self.results: ResultsSink = ResultsFile(out / RESULTS, self._kept() if self.resume else ())
        self.bar = _progress_bar(self.total, self.progress)

    def start_shard(self, results: ResultsSink, ledger: str, run_id: str, invocation: int) -> None:
        """:meth:`start` for a shard judged in a worker (:class:`jurygraph.running.shards.ShardJob`): no run-directory
        file is touched (the driver alone writes them) but the ledger, ``ledger`` (the run directory's file on this
        machine, or the cluster's PostgreSQL table), where each call is recorded as it is paid; each record goes to
        ``results`` (the driver)."""
        self._prepare()
        store = PostgresLedger(ledger, run=run_id, invocation=invocation) if is_postgres_url(ledger) else \
            Ledger(ledger, run=run_id, invocation=invocation)
        self.meter = SpendMeter(store, self.prices, reads=False)  # the driver counts, and writes spend.json
        self.manifest = RunManifest(run_id=run_id)
        self.results = results
        self.bar = None

    def _prepare(self) -> None:
        """What every judging process needs: the finished ids (a resume fills them as it copies the finished
        lines), the call cache, the summary, the checkpoint mode."""
        self.finished: set[str] = set()
        self.llm_cache = None
        if self.cache:
            self.llm_cache = open_cache(self.out / CACHE if self.cache is True else self.cache)
            self.context = dataclasses.replace(self.context, cache=self.llm_cache)  # keeps every other field
        self.summary = RunSummary(out_dir=str(self.out))
        self.mode: Durability = durability(self.keep_checkpoints, cache=self.llm_cache is not None)

    def _backfill(self) -> None:
        """An earlier invocation killed before its end wrote no figures: what it paid is in the ledger."""
        for number, earlier in enumerate(self.manifest.invocations[:-1]):
            if earlier.spend is None and earlier.counts is None:
                paid = self.ledger.totals("invocation = ?", (number,))
                earlier.spend = SpendFigures(requests=paid.requests, input_tokens=paid.input_tokens,
                                             output_tokens=paid.output_tokens, cost_usd=paid.cost_usd,
                                             batch_requests=paid.batch_requests)
                earlier.usage_by_agent = self.ledger.usage_by_agent(number)
                earlier.usage_by_model = self.ledger.usage_by_model(number)
                earlier.attempts_by_model = self.ledger.attempts_by_model(number)

    def _kept(self) -> Iterator[dict[str, Any]]:
        """The previous invocations' finished records, once each (a failed item is judged again)."""
        for record in iter_results(self.out):
            if record.get("status") == "ok" and record["id"] not in self.finished:
                self.finished.add(record["id"])
                self.kept_ids.append(record["id"])
                self.kept.done += 1
                self.kept.missing_verdicts += _missing_verdict(record)
                self.kept.missing_judgments += int(record.get("n_missing", 0))
                _note_generation(self.generation, record)
                _count_verdict(self.summary.verdicts, record)
                yield record

    @contextlib.asynccontextmanager
    async def compiled(self, graph: StateGraph | CompiledStateGraph) -> AsyncIterator[Any]:
        """The graph with the run's checkpointer (``checkpoint``, else the run directory's file), open while the
        block runs; a graph compiled already is used as it is."""
        async with open_checkpointer(self.checkpoint or self.out / CHECKPOINTS) as saver:
            yield graph.compile(checkpointer=saver) if isinstance(graph, StateGraph) else graph

    # --- the items ---

    def next_item(self) -> EvalItem | None:
        """The next item to judge, None when there is none left. Items finished by an earlier invocation are
        counted as skipped on the way; a repeated id stops the run (two items would share one thread)."""
        for item in self.items:
            if item.id in self.seen:
                raise RunAborted(f"{DUPLICATE_IDS}; {item.id!r} is repeated (items before it are kept)", exit_code=2)
            self.seen.add(item.id)
            self.summary.items += 1
            if item.id not in self.finished:
                return item
            self.summary.skipped += 1
            if self.bar is not None:
                self.bar.update(1)
        return None

    def next_or_stop(self) -> EvalItem | None:
        """:meth:`next_item`, or None when the items cannot be read (a repeated id; the dataset moved, changed or
        became unreadable): the run stops."""
        try:
            return self.next_item()
        except RunAborted as stop:
            self.aborted.append(stop)
        except (OSError, ValueError) as err:
            self.aborted.append(RunAborted(f"reading the items: {err}", exit_code=2))
        return None

    async def admitted(self, item: EvalItem, wait: bool = True) -> str:
        """The budget's final answer for this item (:meth:`admit`): while items in flight hold reserves that keep
        it out, it waits for one to finish (its actual spend replaces its reserve) and asks again."""
        while (answer := self.admit(item, wait)) == "wait":
            await self.item_finished.wait()
        return answer

    def admit(self, item: EvalItem, wait: bool = True) -> str:
        """The budget's answer for this item now: ``"start"`` (it counts as in flight from here), ``"wait"`` (items
        in flight hold reserves that keep it out), ``"skip"`` (held back: its reserve alone passes the budget; the
        next item may fit) or ``"stop"`` (held back: it does not fit what is left and none is in flight, or ``wait``
        is off: the run stops starting items). A held-back item stays pending for a resume."""
        if self.budget is None:
            self.meter.started(item.id)
            return "start"
        reserve = self.budget.reserve_for(item, self.meter)
        if reserve is None or not self.budget.fits_alone(reserve):
            self.budget.hold(item.id, reserve, self.meter, alone=True)
            return "skip"
        if self.budget.admits(self.meter, reserve):
            self.meter.started(item.id)
            self.budget.started(item.id)
            return "start"
        if self.stopped or not self.meter.in_flight or not wait:
            self.stopped = "budget"
            self.budget.hold(item.id, reserve, self.meter, alone=False)
            return "stop"
        return "wait"

    def stop(self, reason: str, exit_code: int = 1) -> None:
        """Stop the run (:class:`RunAborted`): judging ends, finished items are kept."""
        self.aborted.append(RunAborted(reason, exit_code=exit_code))

    def stopped_by(self, err: BaseException) -> bool:
        """Whether ``err`` (raised where items were judged) is a stop of the run; if so, the run stops."""
        if isinstance(err, RunAborted):
            self.aborted.append(err)
            return True
        return False

    # --- one item ---

    @overload
    async def judge_item(self, app: Any, item: EvalItem, *, fresh: bool = ..., traced: bool | None = ...,
                         rounds: None = ...) -> dict[str, Any]: ...

    @overload
    async def judge_item(self, app: Any, item: EvalItem, *, fresh: bool = ..., traced: bool | None = ...,
                         rounds: Rounds) -> dict[str, Any] | None: ...

    async def judge_item(self, app: Any, item: EvalItem, *, fresh: bool = False, traced: bool | None = None,
                         rounds: Rounds | None = None) -> dict[str, Any] | None:
        """Judge one admitted item and deliver its record (:meth:`deliver`); returns the record.

        The item's thread (``thread_id``: its id) gives its record when it finished, continues its pending steps
        from its last checkpoint, or starts from the item, with the run's context; each paid call is recorded in the
        ledger as it is paid, before its answer is used. An item waiting for a person is delivered as awaiting
        review (nothing paid); one a batch run left waiting for its batch starts afresh (the call cache replays what
        was answered). ``fresh``: the store holds no thread of this run (nothing to read first). ``traced``: whether
        LangSmith traces the item (default: whether tracing was on when the run began). ``rounds``: the batch
        engine's (every replay afresh, its replies and usage); None then when the item stopped at a call its
        batch is still to answer (it is judged again the next round).

        An error of this item alone is its record (``status: "failed"``); one that every item would hit, and a
        results file that cannot take the record, raise :class:`RunAborted`."""
        config: RunnableConfig = {"configurable": {"thread_id": item.id}}
        if self.traced if traced is None else traced:  # LangGraph copies a run's metadata into every checkpoint
            config.update(trace_config(item.id, self.protocol, self.out.name))
        # every paid call is recorded in the ledger as it is paid, before its answer is used, and counts against
        # the run's spend and this item's reserve
        if rounds is None:
            context = dataclasses.replace(self.context, on_usage=functools.partial(self.meter.paid, item.id))
        else:
            context = dataclasses.replace(self.context, replies=rounds.replies,
                                          on_usage=functools.partial(rounds.paid, item.id))
        try:
            record = await self._judged(app, item, config, context, fresh, rounds)
            if record is not None:
                self.deliver(record)
        except BaseException:
            self.meter.finished(item.id)
            raise
        return record

    async def _judged(self, app: Any, item: EvalItem, config: RunnableConfig, context: JuryContext, fresh: bool,
                      rounds: Rounds | None) -> dict[str, Any] | None:
        try:
            snapshot = _NO_STATE if fresh else await app.aget_state(config)
            if paused_for_review(snapshot.interrupts):  # waiting for a person (`jurygraph review`): nothing to pay
                self.still_waiting.add(item.id)  # its usage was paid (and counted) by the invocation that paused it
                return item_record(item, snapshot.values, AWAITING_REVIEW)
            if rounds is not None or waits_for_batch(snapshot.interrupts):
                # afresh (a round's replay; a --batch run resumed online): the cache answers what was paid
                await app.checkpointer.adelete_thread(item.id)
                snapshot = _NO_STATE
            # pending tasks, not `next`: a kill between a node's saved writes and the step's checkpoint
            # leaves next == () with the finished task still pending; it must be resumed, not restarted
            if snapshot.values and not snapshot.tasks and snapshot.values.get("verdict") is not None:
                return item_record(item, snapshot.values, "ok")
            # a thread with pending steps continues from its last checkpoint; otherwise a fresh start
            # the item goes in as plain data, so checkpoints never hold our classes
            graph_input = None if snapshot.values and snapshot.tasks else {
                "item": item.model_dump(mode="json", exclude_none=True)}
            if self.on_token is None or rounds is not None:
                values = await app.ainvoke(graph_input, config, context=context, durability=self.mode)
            else:
                values = await _streamed(app, graph_input, config, context, item.id, self.on_token, self.mode)
            interrupts = values.get("__interrupt__") or ()
            if rounds is not None and waits_for_batch(interrupts):
                return None
            if rounds is None and self.keep_checkpoints == "final" and self.mode != "exit":
                await keep_final_only(app.checkpointer, item.id)
            record = item_record(item, values, AWAITING_REVIEW if interrupts else "ok")
        except Exception as err:
            stop = _fatal(err)
            if stop is not None:
                raise stop from err
            state = await app.aget_state(config)
            record = item_record(item, state.values or {}, "failed", redact_text(f"{type(err).__name__}: {err}"))
        if rounds is not None:
            record["usage"] = rounds.usage(item.id, record.get("usage") or {})
        return record

    def deliver(self, record: dict[str, Any], paid_before: bool = False) -> None:
        """Write a finished item's record and count it; :class:`RunAborted` (exit 2) when the results file cannot
        take it (disk full, I/O error: the run stops). The Ray engine's driver delivers its workers' records here,
        ``paid_before`` for an item still paused for review whose usage an earlier invocation paid."""
        if paid_before:
            self.still_waiting.add(record["id"])
        try:
            self.results.write(record)
        except OSError as err:
            raise RunAborted(_os_reason(err, self.out / RESULTS), exit_code=2) from None
        self.tally(record)

    def tally(self, record: dict[str, Any]) -> None:
        """Count a finished item: outcome, usage (summed by ``add_usage``, the one place usage is summed)."""
        summary = self.summary
        if record["status"] == "ok":
            summary.done += 1
            summary.missing_verdicts += _missing_verdict(record)
        elif record["status"] == AWAITING_REVIEW:
            summary.awaiting_review += 1
            summary.awaiting.append(record["id"])
        else:
            summary.failed += 1
            summary.failures[record["id"]] = record.get("error", "")
        summary.missing_judgments += int(record.get("n_missing", 0))
        _count_verdict(summary.verdicts, record)
        if record["status"] == "ok":
            self.done_ids.append(record["id"])
        self.meter.finished(record["id"])
        if self.budget is not None:
            self.item_finished.set()
            self.item_finished = asyncio.Event()
        _note_generation(self.generation, record)
        if self.on_result:
            self.on_result(record)
        if self.bar is not None:
            here = self.meter.here
            self.bar.update(1)
            self.bar.set_postfix(failed=summary.failed, requests=here.requests,
                                 tokens=here.input_tokens + here.output_tokens, refresh=False)

    def close_outputs(self) -> None:
        """Close the results file and the progress bar (judging is over)."""
        self.results.close()
        if self.bar is not None:
            self.bar.close()

    # --- what is paid ---

    def counters(self) -> dict[str, Any]:
        """This process's HTTP attempts by model and call-cache hits since the invocation began."""
        attempts = Counter(http_attempts)
        attempts.subtract(self.attempts_before)
        return {"attempts": {label: n for label, n in attempts.items() if n > 0},
                "cache_hits": self.llm_cache.hits if self.llm_cache is not None else 0}

    def use_remote_ledger(self, url: str) -> None:
        """Workers on other machines record what they pay in a PostgreSQL table at ``url``: the driver copies their
        rows into the run directory's ledger (now, as a resume does, and as the run goes)."""
        self.remote_ledger = PostgresLedger(url, run=self.manifest.run_id, invocation=self.ledger.invocation)
        self.ledger_target = url
        self.refresh_spend()

    def refresh_spend(self) -> None:
        """What other processes have recorded (a Ray run's workers), counted now; spend.json follows."""
        if self.remote_ledger is not None:
            self.ledger.copy_from(self.remote_ledger)
        self.meter.refresh()

    # --- finish ---

    def finish(self) -> RunSummary:
        """Totals and the manifest's end; raises the stop (:class:`RunAborted`) or the interruption, if any."""
        summary, out, manifest = self.summary, self.out, self.manifest
        summary.seconds = time.monotonic() - self.started
        flush_traces()
        try:
            self.refresh_spend()  # the last rows of other processes (a Ray run's workers)
            self.meter.close()  # spend.json as the ledger has it
        except (OSError, sqlite3.Error) as err:  # a full disk: the ledger holds every paid call it could take;
            # spend.json is rebuilt from it at the resume
            reason = _os_reason(err, out) if isinstance(err, OSError) else f"spend ledger: {err}"
            self.aborted.append(RunAborted(reason, exit_code=2))
        here = self.meter.here
        summary.requests, summary.input_tokens, summary.output_tokens = \
            here.requests, here.input_tokens, here.output_tokens
        summary.attempts, summary.cost_usd = here.attempts, here.cost_usd
        summary.cache_hits = self.counters()["cache_hits"] + self.workers_cache_hits
        if self.llm_cache is not None:
            self.llm_cache.close()
        manifest.ended = datetime.now(UTC).isoformat()
        manifest.interrupted = summary.interrupted
        manifest.stopped = self.stopped or None
        if self.budget is not None:
            over = self.budget.overrun(self.meter)
            if not self.aborted and (self.stopped == "budget" or self.budget.held_back or over):
                self.aborted.append(RunAborted(self.budget.describe(self.meter, stopped=self.stopped == "budget"),
                                               exit_code=EXIT_BUDGET))
        manifest.aborted = str(self.aborted[0]) if self.aborted else None
        self._totals(summary)
        # closed now, not when the connection is collected: closing checkpoints its write-ahead log into the file,
        # which a reader of the run directory (review --list, show) would otherwise see change under it
        with contextlib.suppress(sqlite3.Error):
            self.ledger.close()
        try:
            write_manifest(out, manifest)
        except OSError as err:
            # a full disk: the results and checkpoints already hold every finished item; say so, do not crash
            self.aborted.append(RunAborted(_os_reason(err, out / MANIFEST), exit_code=2))
        if self.aborted:
            self.aborted[0].summary = summary
            raise self.aborted[0]
        if summary.interrupted:
            raise KeyboardInterrupt(f"run interrupted; resume with --resume {out}")
        return summary

    def _totals(self, summary: RunSummary) -> None:
        """The manifest's figures: this invocation's (its entry in ``invocations``) and the run's over every
        invocation (the top level); paid calls, tokens, USD and attempts from the ledger, items from the results."""
        manifest, ledger, k = self.manifest, self.ledger, self.ledger.invocation
        invocation = manifest.invocation
        invocation.ended, invocation.stopped, invocation.aborted = manifest.ended, manifest.stopped, manifest.aborted
        invocation.counts = Counts(
            items=summary.items, done=summary.done, failed=summary.failed, skipped=summary.skipped,
            missing_verdicts=summary.missing_verdicts, missing_judgments=summary.missing_judgments,
            requests=summary.requests, attempts=summary.attempts, input_tokens=summary.input_tokens,
            output_tokens=summary.output_tokens, cache_hits=summary.cache_hits, cost_usd=summary.cost_usd,
            seconds=summary.seconds, interrupted=summary.interrupted, awaiting_review=summary.awaiting_review)
        # the meter's sums, counted as rows were recorded: the ledger is read again only when they moved since (a
        # batch answer attributed to its call); its rows grow with the run, the end of the run does not
        sums = self.meter.breakdown or ledger.breakdown()
        invocation.usage_by_agent = sums.usage_by_agent(k)
        invocation.usage_by_model = sums.usage_by_model(k)
        invocation.attempts_by_model = sums.attempts_by_model(k)
        invocation.spend = self.meter.spent_here().figures()
        everything = sums.totals()
        ended = [i.counts for i in manifest.invocations if i.counts is not None]
        items = self.total if self.total is not None else max([summary.items, manifest.counts.items or 0])
        manifest.counts = Counts(
            items=items, done=self.kept.done + summary.done, failed=summary.failed,
            missing_verdicts=self.kept.missing_verdicts + summary.missing_verdicts,
            missing_judgments=self.kept.missing_judgments + summary.missing_judgments,
            requests=everything.requests, attempts=everything.attempts, input_tokens=everything.input_tokens,
            output_tokens=everything.output_tokens, cost_usd=everything.cost_usd,
            cache_hits=sum(c.cache_hits for c in ended), seconds=sum(c.seconds for c in ended),
            interrupted=summary.interrupted, awaiting_review=summary.awaiting_review,
            reviewed=manifest.counts.reviewed)
        manifest.usage_by_agent = sums.usage_by_agent()
        manifest.usage_by_model = sums.usage_by_model()
        manifest.attempts_by_model = sums.attempts_by_model()
        manifest.generation = self.generation
        # the items a person has to decide (`jurygraph review RUN_DIR`); they keep their checkpoints
        manifest.awaiting_review = sorted(summary.awaiting)
        manifest.spend = self.meter.total.figures()  # the whole run's, every invocation's: as spend.json
        if self.budget is not None:
            manifest.budget = BudgetInfo.model_validate(self.budget.as_json(self.meter))
        if manifest.dataset is not None and manifest.dataset.changes:
            manifest.dataset.note_judged(self.kept_ids, self.done_ids)


_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO, errno.EACCES}


def _fatal(err: BaseException) -> RunAborted | None:
    """An error every further item would hit too, as a RunAborted; None for an error of this item only."""
    if isinstance(err, ProviderUnavailable | MissingAPIKey):
        return RunAborted(str(err), exit_code=1)
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:  # the checkpointer's own error may be wrapped
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in _DISK_ERRNOS:
            return RunAborted(_os_reason(cause, cause.filename or "the run directory"), exit_code=2)
        if isinstance(cause, sqlite3.OperationalError) and any(
                text in str(cause) for text in ("disk is full", "disk I/O error", "readonly database")):
            return RunAborted(f"checkpoint or cache database: {cause}", exit_code=2)
        cause = cause.__cause__ or cause.__context__
    return None


def _os_reason(err: OSError, where: str | Path) -> str:
    return f"{where}: {err.strerror or err}"


async def _streamed(app: Any, graph_input: Any, config: RunnableConfig, context: JuryContext, item_id: str,
                    on_token: Callable[[str, str, str], None], durability: Durability) -> dict[str, Any]:
    values: dict[str, Any] = {}
    async for mode, chunk in app.astream(graph_input, config, context=context, stream_mode=["messages", "values"],
                                         durability=durability):
        if mode == "values":
            values = chunk
        else:
            message, meta = chunk
            # tokens as the model produces them (chunks), not the finished messages nodes write to state
            if isinstance(message, AIMessageChunk) and message.text:
                on_token(item_id, str(meta.get("langgraph_node", "")), message.text)
    return values


def _missing_verdict(record: Mapping[str, Any]) -> int:
    verdict = record.get("verdict") or {}
    return 1 if not verdict or verdict.get("missing") else 0


def _count_verdict(verdicts: Counter[str], record: Mapping[str, Any]) -> None:
    kind = verdict_kind(record)
    if kind is not None:
        verdicts[kind] += 1


def _note_generation(generation: dict[str, dict[str, Any]], record: dict[str, Any]) -> None:
    generation.update({agent: entry["params"] for agent, entry in (record.get("usage") or {}).items()
                       if "params" in entry})


def _progress_bar(total: int | None, enabled: bool) -> Any:
    if not enabled or total == 0:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="item", dynamic_ncols=True, file=sys.stderr)


def _versions() -> dict[str, str]:
    names = ["jurygraph", "langgraph", "langchain-core", "langchain-openai", "langchain-google-genai", "pydantic"]
    found = {}
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    found["python"] = platform.python_version()
    return found
