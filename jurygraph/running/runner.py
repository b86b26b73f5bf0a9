"""Run a protocol graph over many items: concurrent, durable, resumable, nothing lost, nothing paid twice.

One run directory holds everything about a run (its files: :mod:`jurygraph.running.rundir`); one process at a
time writes it (a lock held for the whole run).

Items run on asyncio, ``concurrency`` at a time. An item that fails (after the model clients' own
retries) is written as ``status: "failed"`` with the reason and the run goes on; ``resume=True``
leaves finished items alone, continues unfinished ones from their last checkpoint and retries failed
ones, keeping one line per item. An error that every further item would hit too (a rejected key, an
unknown model, no server, a full disk) stops the run at its first occurrence with :class:`RunAborted`:
finished items are kept, unstarted ones stay pending for a resume.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import errno
import functools
import os
import platform
import signal
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessageChunk
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Durability, StateSnapshot

from jurygraph.judging.doubt import decided_by, doubt_signals
from jurygraph.judging.items import EvalItem
from jurygraph.llm.cache_postgres import is_postgres_url, open_cache
from jurygraph.llm.calls import ProviderUnavailable
from jurygraph.llm.models import JuryContext, MissingAPIKey, http_attempts
from jurygraph.llm.redact import redact_text, redact_url
from jurygraph.running.batch import BatchOptions, BatchRounds, paused_for_review, waits_for_batch
from jurygraph.running.budget import Budget, SpendMeter
from jurygraph.running.checkpoints import KeepCheckpoints, durability, keep_final_only, serializer
from jurygraph.running.datasets import repeated
from jurygraph.running.distributed import RayOptions
from jurygraph.running.ledger import Ledger, PostgresLedger, reconcile
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
    replace_result,
    run_lock,
    write_manifest,
)

__all__ = ["OpenRun", "RunAborted", "RunSummary", "arun", "open_run", "run"]

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

    def line(self) -> str:
        cost = f", ~${self.cost_usd:.4f}" if self.cost_usd is not None else ""
        attempts = f" ({self.attempts} attempts)" if self.attempts > self.requests else ""
        waiting = f", {self.awaiting_review} await review" if self.awaiting_review else ""
        return (f"{self.done} done, {self.failed} failed{waiting}, {self.skipped} already done, "
                f"{self.missing_verdicts} missing verdicts, {self.missing_judgments} missing judgments; "
                f"{self.requests} requests{attempts}, {self.input_tokens}+{self.output_tokens} tokens{cost}; "
                f"{self.seconds:.1f}s -> {self.out_dir}")


@contextlib.asynccontextmanager
async def open_checkpointer(target: str | Path) -> AsyncIterator[BaseCheckpointSaver]:
    """A durable checkpointer: a SQLite file (WAL, synchronous=NORMAL) or a postgres:// URL."""
    text = str(target)
    if is_postgres_url(text):
        try:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        except ImportError as err:
            raise ImportError("PostgreSQL checkpoints need: pip install 'jurygraph[postgres]'") from err
        try:
            opened = AsyncPostgresSaver.from_conn_string(text)
            saver = await opened.__aenter__()
            await saver.setup()
        except Exception as err:  # psycopg's OperationalError: no server, bad password, no database
            first_line = redact_text(str(err)).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConnectionError(f"checkpoint store {redact_url(text)}: {first_line}") from None
        try:
            yield saver
        finally:
            await opened.__aexit__(None, None, None)
        return
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    conn = await aiosqlite.connect(str(target), isolation_level=None)
    try:
        # a new database only (SQLite ignores it afterwards): a compressed final checkpoint is ~2.5 KB, so a
        # 4 KB page holds one and wastes ~40 %; a 16 KB page holds six (rows are appended in rowid order)
        await conn.execute("PRAGMA page_size=16384")
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=NORMAL")
        sqlite_saver = AsyncSqliteSaver(conn, serde=serializer())
        await sqlite_saver.setup()
        yield sqlite_saver
    finally:
        await conn.close()


def item_record(item: EvalItem, values: Mapping[str, Any], status: str, error: str | None = None) -> dict[str, Any]:
    """An item's results line from its graph state: the item's fields, verdict, judgments, usage, doubt signals."""
    judgments = values.get("judgments") or {}
    verdict = values.get("verdict")
    record: dict[str, Any] = {
        "id": item.id, "status": status, "task": item.task.value, "dataset": item.dataset,
        "aspect": item.aspect, "turn": item.turn, "group": item.group, "human": item.human,
        "verdict": verdict, "judgments": judgments,
        "n_missing": sum(1 for j in judgments.values() if j.get("missing")),
        "usage": values.get("usage") or {},
        # the two answers' systems (FairEval's gpt35/vicuna, any item's meta.model_1/2): what rank and the
        # same-family warning read, without opening checkpoints (a Postgres run's, or deleted ones)
        "systems": item.systems,
    }
    if verdict:  # how unsure the panel was, and who decided when a stronger judge or a person did
        record["doubt"] = doubt_signals(values)
        if {"escalation", "review", "trajectory_match"} & set(verdict.get("detail") or {}):
            record["decided_by"] = decided_by(verdict)
    if error:
        record["error"] = error
    return {k: v for k, v in record.items() if v is not None}


def _versions() -> dict[str, str]:
    names = ["jurygraph", "langgraph", "langchain-core", "langchain-openai", "langchain-google-genai", "pydantic"]
    found = {}
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    found["python"] = platform.python_version()
    return found


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
    ``workers`` workers, each running this runner over shards of the items (``concurrency`` items at a time per
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
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with run_lock(out):
        return await _arun_locked(graph, items, out, context=context, concurrency=concurrency,
                                  checkpoint=checkpoint, cache=cache, resume=resume,
                                  keep_checkpoints=keep_checkpoints, progress=progress,
                                  manifest=manifest, prices=prices, on_result=on_result, on_token=on_token,
                                  budget=budget, batch=batch, cluster=cluster)


async def _arun_locked(graph: StateGraph | CompiledStateGraph, items: Iterable[EvalItem], out: Path, *,
                       checkpoint: str | None, cluster: RayOptions | None, **options: Any) -> RunSummary:
    """The run's steps, with the run directory locked: start, judge every item, finish."""
    run = _Run(out, items, checkpoint=checkpoint, **options)
    if cluster is not None:  # workers of a Ray cluster judge the items; this process writes the run directory
        await cluster.judge(run, graph)
        return run.finish()
    run.start()
    async with open_checkpointer(checkpoint or out / CHECKPOINTS) as saver:
        await run.judge_all(graph.compile(checkpointer=saver) if isinstance(graph, StateGraph) else graph)
    return run.finish()


class _Run:
    """One run of :func:`arun`, as named steps: :meth:`start` (what a resume keeps, the call cache, the manifest's
    start, the results file), :meth:`judge_all` (workers judging items, stopping on the first fatal error),
    :meth:`judge` (one item, from its checkpoint), :meth:`tally` (after each item) and :meth:`finish` (totals,
    the manifest's end)."""

    def __init__(self, out: Path, items: Iterable[EvalItem], *, context: JuryContext | None, concurrency: int,
                 checkpoint: str | None, cache: bool | str | Path, resume: bool, keep_checkpoints: KeepCheckpoints,
                 progress: bool, manifest: Mapping[str, Any] | None, prices: Mapping[str, Any] | None,
                 on_result: Callable[[dict[str, Any]], None] | None,
                 on_token: Callable[[str, str, str], None] | None, budget: Budget | None = None,
                 batch: BatchOptions | None = None) -> None:
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
        self.traced = _tracing()
        self.budget, self.stopped = budget, ""  # stopped: "budget" once the budget stopped starting items
        self.batch = batch
        self.item_finished = asyncio.Event()  # set (and replaced) as each item finishes: the budget's waiters
        self.workers_cache_hits = 0  # what the workers of a Ray run counted (their cache hits are not this process's)
        self.remote_ledger: PostgresLedger | None = None  # a cluster's workers on other machines record here
        self.ledger_target = ""  # where this run's workers record what they pay (a file, or a postgresql:// URL)

    def counters(self) -> dict[str, Any]:
        """This process's HTTP attempts by model and call-cache hits since the invocation began."""
        attempts = Counter(http_attempts)
        attempts.subtract(self.attempts_before)
        return {"attempts": {label: n for label, n in attempts.items() if n > 0},
                "cache_hits": self.llm_cache.hits if self.llm_cache is not None else 0}

    def shard_job(self, graph: StateGraph | CompiledStateGraph, *, context: JuryContext, checkpoint: str,
                  cache: bool | str) -> ShardJob:
        """This run's judging, for workers in other processes: ``context`` without this process's cache, the
        shared ``checkpoint`` store and ``cache`` as the workers reach them, and the ledger they record in."""
        manifest = getattr(self, "manifest", None)
        return ShardJob(graph, self.out, context, self.concurrency, checkpoint, cache, self.keep_checkpoints,
                        self.protocol, self.prices, ledger=self.ledger_target,
                        run_id=manifest.run_id if manifest is not None else "",
                        invocation=len(manifest.invocations) - 1 if manifest is not None else 0)

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
        self.results: ResultsFile | _Delivered = ResultsFile(out / RESULTS, self._kept() if self.resume else ())
        self.bar = _progress_bar(self.total, self.progress)

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

    def _prepare(self) -> None:
        """What every judging process needs: the finished ids (a resume fills them as it copies the finished
        lines), the call cache, the summary, the checkpoint mode."""
        self.finished: set[str] = set()
        self.llm_cache = None
        if self.cache:
            self.llm_cache = open_cache(self.out / CACHE if self.cache is True else self.cache)
            self.context = dataclasses.replace(self.context, cache=self.llm_cache)  # keeps every other field
        self.summary = RunSummary(out_dir=str(self.out))
        self.mode = durability(self.keep_checkpoints, cache=self.llm_cache is not None)

    def start_shard(self, deliver: Callable[[dict[str, Any], dict[str, Any]], None], ledger: str, run_id: str,
                    invocation: int) -> None:
        """:meth:`start` for a shard judged in a worker (:class:`ShardJob`): no run-directory file is touched (the
        driver alone writes them) but the ledger, ``ledger`` (the run directory's file on this machine, or the
        cluster's PostgreSQL table), where each call is recorded as it is paid; each record goes to ``deliver`` with
        this shard's :meth:`counters` so far."""
        self._prepare()
        store = PostgresLedger(ledger, run=run_id, invocation=invocation) if is_postgres_url(ledger) else \
            Ledger(ledger, run=run_id, invocation=invocation)
        self.meter = SpendMeter(store, self.prices, reads=False)  # the driver counts, and writes spend.json
        self.manifest = RunManifest(run_id=run_id)
        self.results = _Delivered(deliver, self.counters, self.still_waiting)
        self.bar = None

    def _kept(self) -> Iterator[dict[str, Any]]:
        """The previous invocations' finished records, once each (a failed item is judged again)."""
        for record in iter_results(self.out):
            if record.get("status") == "ok" and record["id"] not in self.finished:
                self.finished.add(record["id"])
                self.kept_ids.append(record["id"])
                self.kept.done += 1
                verdict = record.get("verdict") or {}
                self.kept.missing_verdicts += 1 if not verdict or verdict.get("missing") else 0
                self.kept.missing_judgments += int(record.get("n_missing", 0))
                _note_generation(self.generation, record)
                yield record

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

    def stop(self, reason: str, exit_code: int = 1) -> None:
        """Stop the run (:class:`RunAborted`): judging ends, finished items are kept."""
        self.aborted.append(RunAborted(reason, exit_code=exit_code))

    def stopped_by(self, err: BaseException) -> bool:
        """Whether ``err`` (raised where items were judged) is a stop of the run; if so, the run stops."""
        if isinstance(err, RunAborted):
            self.aborted.append(err)
            return True
        return False

    async def judge_all(self, app: Any) -> None:
        """Judge the items still to do, ``concurrency`` at a time; the first fatal error cancels the others."""
        if self.batch is not None:  # --batch: the same items in rounds of provider batches
            rounds = BatchRounds(self, self.batch, record=item_record, fatal=_fatal, trace=trace_config,
                                 stop=RunAborted)
            await rounds.judge_all(app)
            return
        # a store that held no thread when the run began has none of this run's items but those it starts
        # itself: reading each item's state first (~4 database round trips through aiosqlite's thread)
        # would find nothing
        fresh = app.checkpointer is not None and not await _has_threads(app.checkpointer)
        todo = self.total - len(self.finished) if self.total is not None else self.concurrency
        workers = [asyncio.create_task(self._worker(app, fresh)) for _ in range(max(1, min(self.concurrency, todo)))]
        try:
            # the first abort cancels the other workers' items at once: their checkpoints stay for a resume. Only the
            # workers still running are waited on: a finished one in the set would end every wait at once, and the
            # loop would spin through the run's tail (as the first workers run out of items)
            running = set(workers)
            while running and not self.aborted:
                _, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            if self.aborted:
                for task in workers:
                    task.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
            else:
                await asyncio.gather(*workers)  # re-raises a worker's unexpected error
        except asyncio.CancelledError:
            self.summary.interrupted = True
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        finally:
            self.close_outputs()

    def close_outputs(self) -> None:
        """Close the results file and the progress bar (judging is over)."""
        self.results.close()
        if self.bar is not None:
            self.bar.close()

    async def _worker(self, app: Any, fresh: bool) -> None:
        while not self.aborted and not self.stopped:
            item = self.next_or_stop()
            if item is None:
                return
            answer = await self.admitted(item)
            if answer == "skip":  # held back: it alone would pass the budget; the next may fit
                continue
            if answer != "start":
                return
            try:
                record = await self.judge(app, item, fresh)
            except RunAborted as stop:
                self.aborted.append(stop)
                return
            if not self.deliver(record):
                return

    def deliver(self, record: dict[str, Any], paid_before: bool = False) -> bool:
        """Write a finished item's record and count it; False when the results file cannot take it (disk full, I/O
        error: the run stops). The Ray engine's driver delivers its workers' records here, ``paid_before`` for an
        item still paused for review whose usage an earlier invocation paid."""
        if paid_before:
            self.still_waiting.add(record["id"])
        try:
            self.results.write(record)
        except OSError as err:
            self.aborted.append(RunAborted(_os_reason(err, self.out / RESULTS), exit_code=2))
            return False
        self.tally(record)
        return True

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

    async def judge(self, app: Any, item: EvalItem, fresh: bool, *, traced: bool | None = None) -> dict[str, Any]:
        """One item's record: from its finished checkpoint, by continuing its pending steps, or from the start.
        ``traced``: whether LangSmith traces this item (default: whether tracing was on when the run began)."""
        config: RunnableConfig = {"configurable": {"thread_id": item.id}}
        # every paid call is recorded in the ledger as it is paid, before its answer is used, and counts against
        # the run's spend and this item's reserve
        context = dataclasses.replace(self.context, on_usage=functools.partial(self.meter.paid, item.id))
        if self.traced if traced is None else traced:  # LangGraph copies a run's metadata into every checkpoint
            config.update(trace_config(item.id, self.protocol, self.out.name))
        snapshot = _NO_STATE if fresh else await app.aget_state(config)
        if paused_for_review(snapshot.interrupts):  # waiting for a person (`jurygraph review`): nothing to pay
            self.still_waiting.add(item.id)  # its usage was paid (and counted) by the invocation that paused it
            return item_record(item, snapshot.values, AWAITING_REVIEW)
        if waits_for_batch(snapshot.interrupts):  # a --batch run resumed online: afresh, the cache replays its answers
            await app.checkpointer.adelete_thread(item.id)
            snapshot = _NO_STATE
        try:
            # pending tasks, not `next`: a kill between a node's saved writes and the step's checkpoint
            # leaves next == () with the finished task still pending; it must be resumed, not restarted
            if snapshot.values and not snapshot.tasks and snapshot.values.get("verdict") is not None:
                return item_record(item, snapshot.values, "ok")
            # a thread with pending steps continues from its last checkpoint; otherwise a fresh start
            # the item goes in as plain data, so checkpoints never hold our classes
            graph_input = None if snapshot.values and snapshot.tasks else {
                "item": item.model_dump(mode="json", exclude_none=True)}
            if self.on_token is None:
                values = await app.ainvoke(graph_input, config, context=context, durability=self.mode)
            else:
                values = await _streamed(app, graph_input, config, context, item.id, self.on_token, self.mode)
            if self.keep_checkpoints == "final" and self.mode != "exit":
                await keep_final_only(app.checkpointer, item.id)
            return item_record(item, values, AWAITING_REVIEW if values.get("__interrupt__") else "ok")
        except Exception as err:
            fatal = _fatal(err)
            if fatal is not None:
                raise fatal from err
            state = await app.aget_state(config)
            return item_record(item, state.values or {}, "failed", redact_text(f"{type(err).__name__}: {err}"))

    def tally(self, record: dict[str, Any]) -> None:
        """Count a finished item: outcome, usage (summed by ``add_usage``, the one place usage is summed)."""
        summary = self.summary
        if record["status"] == "ok":
            summary.done += 1
            verdict = record.get("verdict") or {}
            summary.missing_verdicts += 1 if not verdict or verdict.get("missing") else 0
        elif record["status"] == AWAITING_REVIEW:
            summary.awaiting_review += 1
            summary.awaiting.append(record["id"])
        else:
            summary.failed += 1
            summary.failures[record["id"]] = record.get("error", "")
        summary.missing_judgments += int(record.get("n_missing", 0))
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

    def finish(self) -> RunSummary:
        """Totals and the manifest's end; raises the stop (:class:`RunAborted`) or the interruption, if any."""
        summary, out, manifest = self.summary, self.out, self.manifest
        summary.seconds = time.monotonic() - self.started
        _flush_traces()
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
        invocation.usage_by_agent = ledger.usage_by_agent(k)
        invocation.usage_by_model = ledger.usage_by_model(k)
        invocation.attempts_by_model = ledger.attempts_by_model(k)
        invocation.spend = self.meter.spent_here().figures()
        everything = ledger.totals()
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
        manifest.usage_by_agent = ledger.usage_by_agent()
        manifest.usage_by_model = ledger.usage_by_model()
        manifest.attempts_by_model = ledger.attempts_by_model()
        manifest.generation = self.generation
        # the items a person has to decide (`jurygraph review RUN_DIR`); they keep their checkpoints
        manifest.awaiting_review = sorted(summary.awaiting)
        manifest.spend = self.meter.total.figures()  # the whole run's, every invocation's: as spend.json
        if self.budget is not None:
            manifest.budget = BudgetInfo.model_validate(self.budget.as_json(self.meter))
        if manifest.dataset is not None and manifest.dataset.changes:
            manifest.dataset.note_judged(self.kept_ids, self.done_ids)


class OpenRun:
    """A run whose items come one at a time from its caller, in any order and at any moment, instead of from a list
    (an evaluator inside another harness, :mod:`jurygraph.evaluators`): :func:`open_run` opens it, :meth:`judge`
    judges one item with the runner's own steps. Every invocation's items stay in the run: one asked again that an
    earlier invocation finished is answered from its record (counted as skipped), one that failed is judged again."""

    def __init__(self, run: _Run, app: Any, kept: dict[str, dict[str, Any]]) -> None:
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
        item would hit (no key, no server, a full disk) is raised as :class:`RunAborted`, nothing recorded; the run
        goes on for the next call. One call per item at a time: the caller waits for an item in flight."""
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
            try:
                record = await run.judge(self._app, item, fresh=False, traced=traced)
            except BaseException:
                run.meter.finished(item.id)
                raise
            if not run.deliver(record):
                raise run.aborted.pop()
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
    """A run directory open for items that come one at a time (:class:`OpenRun`), with the runner's own steps: the
    run's lock held until the block ends, :meth:`_Run.start` (a directory with a manifest continued as by a
    resume), the run's checkpoints and call cache, and :meth:`_Run.finish` at the end (the manifest's totals from
    the ledger, spend.json; :class:`RunAborted` if spend could not be written). ``manifest``: the run's own fields,
    as :func:`arun` takes them; ``same_run``: the fields of it that define the run: a directory whose manifest has
    other values there is another run (ValueError naming them), as its records would answer these items."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with run_lock(out):
        previous = load_manifest(out)
        if previous is not None and same_run:
            _check_same_run(out, previous, manifest or {}, same_run)
        run = _Run(out, (), context=context, concurrency=1, checkpoint=None, cache=True,
                   resume=previous is not None, keep_checkpoints=keep_checkpoints, progress=False,
                   manifest=manifest, prices=prices, on_result=None, on_token=None)
        run.total = None  # the items come as they are asked for: counted at the end
        run.start()
        run.manifest.concurrency = None  # the caller's: as many items at once as it asks for
        kept = {record["id"]: record for record in iter_results(out) if record["id"] in run.finished}
        opened = None
        try:
            async with open_checkpointer(out / CHECKPOINTS) as saver:
                opened = OpenRun(run, graph.compile(checkpointer=saver), kept)
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


@dataclass
class ShardJob:
    """A shard of a run judged in another process (a worker of the Ray engine, :mod:`jurygraph.running.distributed`)
    by this runner: the same judging as :func:`arun`, from the same shared checkpoints and call cache, with each
    record handed to ``deliver`` instead of written (the driver alone writes the run directory). Picklable: the
    engine ships it to its workers."""

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

    async def judge(self, items: Sequence[EvalItem],
                    deliver: Callable[[dict[str, Any], dict[str, Any]], None]) -> dict[str, Any]:
        """Judge ``items``, ``concurrency`` at a time; each record goes to ``deliver(record, counters)`` as it
        finishes. Returns the shard's :meth:`_Run.counters`; raises :class:`RunAborted` as a run would stop."""
        run = _Run(self.out, items, context=self.context, concurrency=self.concurrency, checkpoint=self.checkpoint,
                   cache=self.cache, resume=False, keep_checkpoints=self.keep_checkpoints, progress=False,
                   manifest={"protocol": self.protocol}, prices=self.prices, on_result=None, on_token=None)
        run.start_shard(deliver, self.ledger, self.run_id, self.invocation)
        try:
            async with open_checkpointer(self.checkpoint) as saver:
                graph = self.graph  # a compiled graph came without a checkpointer: it gets the shared one
                await run.judge_all(graph.compile(checkpointer=saver) if isinstance(graph, StateGraph)
                                    else graph.copy(update={"checkpointer": saver}))
            counters = run.counters()
        finally:
            _flush_traces()  # this worker process may be gone before LangSmith's queue would have been sent
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

    def __init__(self, deliver: Callable[[dict[str, Any], dict[str, Any]], None],
                 counters: Callable[[], dict[str, Any]], still_waiting: set[str]) -> None:
        self._deliver, self._counters, self._still_waiting = deliver, counters, still_waiting

    def write(self, record: dict[str, Any]) -> None:
        # an item an earlier invocation paused for review: its usage was counted then (see _Run.tally)
        self._deliver(record, {**self._counters(), "paid_before": record["id"] in self._still_waiting})

    def close(self) -> None:
        return None


_NO_STATE = StateSnapshot(values={}, next=(), config={}, metadata=None, created_at=None, parent_config=None,
                          tasks=(), interrupts=())


async def _has_threads(saver: BaseCheckpointSaver) -> bool:
    # closed here, on the saver's open connection: an abandoned generator would be closed by the garbage
    # collector after the connection is ("Task exception was never retrieved ... closed database")
    checkpoints = saver.alist(None, limit=1)
    try:
        async for _ in checkpoints:
            return True
        return False
    finally:
        close = getattr(checkpoints, "aclose", None)  # typed as an iterator; savers return async generators
        if close is not None:
            await close()


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


def _note_generation(generation: dict[str, dict[str, Any]], record: dict[str, Any]) -> None:
    generation.update({agent: entry["params"] for agent, entry in (record.get("usage") or {}).items()
                       if "params" in entry})


def _progress_bar(total: int | None, enabled: bool) -> Any:
    if not enabled or total == 0:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="item", dynamic_ncols=True, file=sys.stderr)


def trace_config(item_id: str, protocol: str, run: str) -> RunnableConfig:
    """How one item's graph run is found in LangSmith (when ``LANGSMITH_TRACING`` is on; otherwise these are
    inert): named after the protocol and the item, with the item id, protocol and run directory as metadata and
    tags. LangChain hands metadata and tags down to every node and model call of the item, and each model call
    adds its agent's name (``jurygraph.llm.calls``)."""
    tags = [f"item:{item_id}", *([f"protocol:{protocol}"] if protocol else [])]
    metadata = {"item_id": item_id, "run": run, **({"protocol": protocol} if protocol else {})}
    return {"run_name": f"{protocol or 'jurygraph'} item {item_id}", "tags": tags, "metadata": metadata}


def _tracing() -> bool:
    """Whether LangSmith tracing is on (``LANGSMITH_TRACING``)."""
    from langsmith.utils import tracing_is_enabled

    return bool(tracing_is_enabled())


def _flush_traces() -> None:
    """Send the traces still queued before the command exits (a no-op when tracing is off)."""
    if _tracing():
        from langchain_core.tracers.langchain import wait_for_all_tracers

        wait_for_all_tracers()


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
