"""The run directory: its file names, the manifest, the results file and the one-writer lock.

    RUN_DIR/results.jsonl      one JSON line per item, appended and synced as each item finishes (or pauses for a
                               review: status "awaiting_review", replaced by its reviewed line)
    RUN_DIR/manifest.json      what defines the run (protocol, models, dataset, options), its totals over every
                               invocation and each invocation's own (:class:`RunManifest`)
    RUN_DIR/checkpoints.sqlite one LangGraph thread per item (thread_id = item id)
    RUN_DIR/llm_cache.sqlite   every answered model call
    RUN_DIR/ledger.sqlite      every paid call, recorded before its answer is used (:mod:`jurygraph.running.ledger`)
    RUN_DIR/spend.json         what the run has paid so far, over every invocation: the ledger's sums (the budget's
                               ground; its file name and fields are an interface)
    RUN_DIR/batches.jsonl      the provider batches of a --batch run: each submitted, collected, settled
    RUN_DIR/batches/           the batch files sent to the provider (one per batch, kept until it is settled)
    RUN_DIR/run.lock           held (flock) by the one process writing the directory

The manifest is one typed record, :class:`RunManifest`, and :func:`write_manifest` its one writer: the runner writes
it when an invocation starts and ends, a review when it answers an item; everything else reads it
(:func:`load_manifest` typed, :func:`read_manifest` as plain JSON). Its top-level ``counts``, ``usage_by_agent``,
``usage_by_model`` and ``attempts_by_model`` are the whole run's, over every invocation (from the ledger, so an
invocation killed half-way counts too); ``invocations`` has each invocation's own. A manifest of an older version
loads (every field has a default) and keeps what it has that this version does not know.

The lock is an ``fcntl.flock`` on ``run.lock``: the kernel drops it when its holder exits, however it
exits, so a lock left by a killed process never blocks a resume; the file keeps the holder's PID so a
refused second writer can name it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field

RESULTS = "results.jsonl"
# a results line's status: "ok", "failed", or waiting for a person's verdict (a review node's interrupt())
AWAITING_REVIEW = "awaiting_review"
MANIFEST = "manifest.json"
CHECKPOINTS = "checkpoints.sqlite"
CACHE = "llm_cache.sqlite"
SPEND = "spend.json"
LEDGER = "ledger.sqlite"
BATCHES = "batches.jsonl"
BATCH_FILES = "batches"
LOCK = "run.lock"


class RunLocked(RuntimeError):
    """Another process is writing this run directory."""


def read_results(out_dir: str | Path) -> list[dict[str, Any]]:
    """The records of a run's results.jsonl (a torn last line from a crash is ignored)."""
    return list(iter_results(out_dir))


def iter_results(out_dir: str | Path) -> Iterator[dict[str, Any]]:
    """The records one at a time: a 20,000-item run's records as dicts are ~300 MB, its file ~30 MB."""
    path = Path(out_dir) / RESULTS
    if not path.exists():
        return
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            with contextlib.suppress(json.JSONDecodeError):
                yield json.loads(line)


# --- the manifest ----------------------------------------------------------------------------------------------
#
# Each section is a model with defaults for every field (a manifest written by an older version loads) and
# ``extra="allow"`` (a field this version does not know is kept as it was). A new section of the run's record is a
# field here: typed, with a default, documented in its docstring.


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", validate_assignment=True)


class SpendFigures(_Section):
    """What was paid: ``spend.json``'s fields (an interface: names and meanings stay). ``cost_usd`` is None when no
    paid call had a price (an unpriced model is not free: its cost is unknown)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    batch_requests: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class Counts(_Section):
    """Counts of a run (the top-level ``counts``: over every invocation) or of one invocation (its ``counts``).

    ``items``: the run's items; ``done``, ``failed``, ``awaiting_review``, ``missing_*``: the items in that state
    (the run's: as results.jsonl has them now). ``skipped``: items an invocation found done already (per
    invocation; 0 at the top); ``reviewed``: items a person decided (``jurygraph review``). ``requests``, the tokens
    and ``cost_usd``: paid calls (the ledger's); ``attempts``: HTTP requests sent for calls, retries and failed
    calls included (the ledger's: a call in flight at a kill is not known); ``cache_hits``: calls the cache
    answered free; ``seconds``: wall time (summed over invocations)."""

    items: int | None = None
    done: int = 0
    failed: int = 0
    skipped: int = 0
    missing_verdicts: int = 0
    missing_judgments: int = 0
    requests: int = 0
    attempts: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_hits: int = 0
    cost_usd: float | None = None
    seconds: float = 0.0
    interrupted: bool = False
    awaiting_review: int = 0
    reviewed: int = 0  # items a person decided since (``jurygraph review``)


class Invocation(_Section):
    """One ``jurygraph eval`` (or ``run()``) on the run directory: when, which process, whether it resumed, its
    execution-only options, and at its end (missing for an invocation that was killed) what it did: its counts,
    usage per agent and model, HTTP attempts per model, its spend, how it stopped and what the budget held back.
    ``dataset_sha256``: the dataset file's hash as this invocation read it."""

    at: str | None = None
    pid: int | None = None
    resume: bool = False
    execution: dict[str, Any] = Field(default_factory=dict)
    dataset_sha256: str | None = None
    ended: str | None = None
    counts: Counts | None = None
    usage_by_agent: dict[str, dict[str, Any]] = Field(default_factory=dict)
    usage_by_model: dict[str, dict[str, Any]] = Field(default_factory=dict)
    attempts_by_model: dict[str, int] = Field(default_factory=dict)
    spend: SpendFigures | None = None
    stopped: str | None = None
    aborted: str | None = None


class DatasetChange(_Section):
    """The dataset file read with another hash than the run began on (``--dataset-changed continue``)."""

    sha256: str
    invocation: int
    at: str | None = None


class DatasetInfo(_Section):
    """Which data the run judges. ``sha256`` is the file's hash when the run began, never overwritten; a resume that
    read another (``--dataset-changed continue``) adds it to ``changes``, and ``judged_on`` then says which items were
    judged on which hash."""

    name: str | None = None
    source: str | None = None
    sha256: str | None = None
    rows_skipped: int | None = None
    changes: list[DatasetChange] = Field(default_factory=list)
    judged_on: dict[str, list[str]] = Field(default_factory=dict)

    def current(self) -> str | None:
        """The hash the latest invocation read."""
        return self.changes[-1].sha256 if self.changes else self.sha256

    def read(self, sha256: str | None, invocation: int, at: str | None) -> None:
        """An invocation read the dataset with this hash: a change when it is not the one the latest read."""
        if sha256 and self.sha256 and sha256 != self.current():
            self.changes.append(DatasetChange(sha256=sha256, invocation=invocation, at=at))

    def note_judged(self, kept: Iterable[str], done: Iterable[str]) -> None:
        """Which items were judged on which hash, once the file has changed: ``done`` (this invocation's) on the
        current one; at the first change, ``kept`` (every item judged before it) on the hash read before."""
        if not self.changes:
            return
        if not self.judged_on:
            before = self.changes[-2].sha256 if len(self.changes) > 1 else self.sha256
            self.judged_on[str(before)] = sorted(kept)
        current = str(self.current())
        self.judged_on[current] = sorted({*self.judged_on.get(current, []), *done})


class BudgetInfo(_Section):
    """``--max-cost`` / ``--max-total-tokens``: the limits, the largest reserve an item was given, the items held
    back (id -> why) by the latest invocation, and by how much the spend passed a limit (None: it did not)."""

    max_cost_usd: float | None = None
    max_total_tokens: int | None = None
    reserve_per_item: dict[str, Any] | None = None
    held_back: dict[str, str] = Field(default_factory=dict)
    overrun: dict[str, Any] | None = None


class EvaluatorInfo(_Section):
    """A run whose items an evaluator inside another harness judged (:mod:`jurygraph.evaluators`): their task, the
    aspect a score task rates, the built-in benchmark whose templates they use, the scale."""

    task: str | None = None
    aspect: str | None = None
    dataset: str | None = None
    scale: list[float] | None = None


class RunManifest(_Section):
    """``manifest.json``: what defines the run, its totals over every invocation, and each invocation's own.

    Written by :func:`write_manifest` only. ``counts``, ``usage_by_agent``, ``usage_by_model``, ``attempts_by_model``
    and ``spend`` cover every invocation (``invocations[k]`` has each one's); ``run_id`` names the run in a ledger
    shared by several runs (a cluster's PostgreSQL table)."""

    run_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    protocol: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    dataset: DatasetInfo | None = None
    models: dict[str, str] = Field(default_factory=dict)
    requests_per_item: int | None = None
    cli: dict[str, Any] = Field(default_factory=dict)
    structured_output: bool | None = None
    gen: dict[str, Any] = Field(default_factory=dict)
    started: str | None = None
    ended: str | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    concurrency: int | None = None
    items: int | None = None
    checkpoint: str | None = None
    keep_checkpoints: str | None = None
    interrupted: bool = False
    counts: Counts = Field(default_factory=Counts)
    usage_by_agent: dict[str, dict[str, Any]] = Field(default_factory=dict)
    usage_by_model: dict[str, dict[str, Any]] = Field(default_factory=dict)
    generation: dict[str, dict[str, Any]] = Field(default_factory=dict)
    attempts_by_model: dict[str, int] = Field(default_factory=dict)
    awaiting_review: list[str] = Field(default_factory=list)
    spend: SpendFigures | None = None
    budget: BudgetInfo | None = None
    stopped: str | None = None
    aborted: str | None = None
    batches: list[dict[str, Any]] | None = None
    ray: dict[str, Any] | None = None
    workers: list[dict[str, Any]] | None = None
    evaluator: EvaluatorInfo | None = None
    invocations: list[Invocation] = Field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The manifest as written: every field, but the sections of a kind of run this one is not (budget, batches,
        ray, workers, evaluator) left out while empty."""
        data = self.model_dump(mode="json")
        for name in _ONLY_WHEN_SET:
            if data.get(name) is None:
                data.pop(name, None)
        return data

    def totals(self) -> dict[str, Any]:
        """The run's totals over every invocation, as ``show``, ``metaeval`` and ``report`` give them: items and
        their states, paid calls, HTTP attempts, tokens, USD (None: no price known), wall time, invocations."""
        counts = self.counts
        return {"items": counts.items, "done": counts.done, "failed": counts.failed,
                "awaiting_review": counts.awaiting_review, "requests": counts.requests, "attempts": counts.attempts,
                "input_tokens": counts.input_tokens, "output_tokens": counts.output_tokens,
                "cost_usd": counts.cost_usd, "seconds": round(counts.seconds, 3), "invocations": len(self.invocations)}

    @property
    def invocation(self) -> Invocation:
        """The latest invocation (one is added when there is none)."""
        if not self.invocations:
            self.invocations.append(Invocation())
        return self.invocations[-1]

    @classmethod
    def begin(cls, previous: RunManifest | None, given: Mapping[str, Any], invocation: Invocation) -> RunManifest:
        """The manifest of an invocation that starts: the run's (``previous``, None for a new run) with the fields
        the caller gives (``given``: what defines the run, as ``eval`` restored it) over it, and ``invocation``
        added. What a run accumulates stays: its id, every earlier invocation, the hash its dataset had when it
        began (a different one now is recorded as a change, never written over it)."""
        given = {key: value for key, value in given.items() if key not in ("invocations", "run_id")}
        if previous is None:
            manifest = cls.model_validate(given)
        else:
            manifest = previous.model_copy(deep=True)
            dataset = given.pop("dataset", None)
            for key, value in given.items():
                setattr(manifest, key, value)
            if dataset is not None:
                now = DatasetInfo.model_validate(dataset)
                if manifest.dataset is None or not manifest.dataset.sha256:
                    manifest.dataset = now
                else:
                    kept = manifest.dataset
                    manifest.dataset = now.model_copy(update={"sha256": kept.sha256, "changes": kept.changes,
                                                              "judged_on": kept.judged_on})
                    manifest.dataset.read(now.sha256, len(manifest.invocations), invocation.at)
        if manifest.dataset is not None:
            invocation.dataset_sha256 = manifest.dataset.current()
        manifest.invocations.append(invocation)
        manifest.stopped = manifest.aborted = None
        manifest.interrupted = False
        return manifest


_ONLY_WHEN_SET = ("budget", "batches", "ray", "workers", "evaluator")


def read_manifest(out_dir: str | Path) -> dict[str, Any] | None:
    """The run's manifest as plain JSON, or None when the directory has none."""
    path = Path(out_dir) / MANIFEST
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def load_manifest(out_dir: str | Path) -> RunManifest | None:
    """The run's manifest, typed (any version's: missing fields take their defaults), or None when there is none."""
    data = read_manifest(out_dir)
    return None if data is None else RunManifest.model_validate(data)


def write_manifest(out_dir: str | Path, manifest: RunManifest) -> None:
    """Replace the manifest atomically (a crash leaves the old one or the new one, never half of one). The one
    writer of ``manifest.json``."""
    _replace_json(Path(out_dir) / MANIFEST, manifest.as_json(), indent=2)


def read_spend(out_dir: str | Path) -> dict[str, Any] | None:
    """What the run has paid so far (requests, tokens, USD), or None before its first paid call."""
    path = Path(out_dir) / SPEND
    if not path.exists():
        return None
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None
    return data


def write_spend(out_dir: str | Path, spend: SpendFigures) -> None:
    _replace_json(Path(out_dir) / SPEND, spend.model_dump(mode="json"))


SPEND_INTERVAL = 0.1  # seconds between two writes of spend.json while a run pays


class SpendFile:
    """``spend.json`` kept up to date off the event loop: :meth:`update` hands the latest figures to a thread that
    writes them (each write renamed into place, so a reader never sees half a file; a rename costs ~1-3 ms on a
    loaded disk, which no model call should wait for). The thread writes at most every ``SPEND_INTERVAL`` seconds,
    the latest figures then: a write per paid call (hundreds a second at zero latency) took ~12 % of a 2-core
    machine's throughput (benchmarks/README.md, "framework"). :meth:`flush` writes what is pending now and waits; an
    error of the thread (a full disk) is raised there."""

    def __init__(self, out_dir: str | Path) -> None:
        self.out = Path(out_dir)
        self._latest: SpendFigures | None = None
        self._written: SpendFigures | None = None
        self._error: BaseException | None = None
        self._closed = self._now = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def update(self, spend: SpendFigures) -> None:
        with self._changed:
            self._latest = spend
            if self._thread is None:
                self._thread = threading.Thread(target=self._write_each, name="jurygraph-spend", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def _next(self, written_at: float) -> SpendFigures | None:
        """The figures to write once they are due (None: closed with nothing pending); called holding the lock."""
        while True:
            if self._latest is None or self._latest is self._written:
                if self._closed:
                    return None
                self._changed.wait()
                continue
            wait = written_at + SPEND_INTERVAL - time.monotonic()
            if wait <= 0 or self._closed or self._now:
                self._now = False
                return self._latest
            self._changed.wait(wait)

    def _write_each(self) -> None:
        written_at = -SPEND_INTERVAL
        while True:
            with self._changed:
                spend = self._next(written_at)
            if spend is None:
                return
            try:
                write_spend(self.out, spend)
            except BaseException as err:
                with self._changed:
                    self._error, self._written = err, spend
                    self._changed.notify_all()
                return
            written_at = time.monotonic()
            with self._changed:
                self._written = spend
                self._changed.notify_all()

    def flush(self) -> None:
        """Write the latest figures now (in this thread if the writer is gone) and wait; raise the writer's error."""
        with self._changed:
            self._now = True
            self._changed.notify_all()
            while self._thread is not None and self._thread.is_alive() and self._error is None and \
                    self._latest is not self._written:
                self._changed.wait(1.0)
            self._now = False
            error, self._error = self._error, None
            pending = self._latest if self._latest is not self._written else None
        if error is not None:
            self._thread = None
            raise error
        if pending is not None:
            write_spend(self.out, pending)
            self._written = pending

    def close(self) -> None:
        """Flush and stop the writer."""
        try:
            self.flush()
        finally:
            with self._changed:
                self._closed = True
                self._changed.notify_all()


def read_batch_events(out_dir: str | Path) -> list[dict[str, Any]]:
    """The batch ledger of a --batch run, oldest first (a torn last line from a crash is ignored)."""
    path = Path(out_dir) / BATCHES
    if not path.exists():
        return []
    events = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            with contextlib.suppress(json.JSONDecodeError):
                events.append(json.loads(line))
    return events


def append_batch_event(out_dir: str | Path, event: Mapping[str, Any]) -> None:
    """Add one event to the batch ledger, synced before returning: a batch id is on disk before anything else
    happens, so a process killed a moment later never submits the same calls again."""
    with (Path(out_dir) / BATCHES).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(event, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def batch_file(out_dir: str | Path, round_number: int, part: int) -> Path:
    """Where a round's batch file (its requests, one JSON line each) is written before it is uploaded."""
    folder = Path(out_dir) / BATCH_FILES
    folder.mkdir(exist_ok=True)
    return folder / f"round-{round_number:03d}-{part}.jsonl"


def _replace_json(path: Path, data: Mapping[str, Any], indent: int | None = None) -> None:
    """Write beside, then rename over: a crash leaves the old file or the new one. A failed write (a full disk)
    leaves neither a half file nor its empty temporary."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=indent, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def replace_result(out_dir: str | Path, record: dict[str, Any]) -> None:
    """Put ``record`` in place of its item's line (appended when the item has none), rewriting results.jsonl
    atomically: a crash leaves the old file or the new one. For the holder of the run's lock (a review)."""

    def replaced() -> Iterator[dict[str, Any]]:
        placed = False
        for old in iter_results(out_dir):
            if old.get("id") == record["id"]:
                if placed:
                    continue
                old, placed = record, True
            yield old
        if not placed:
            yield record

    _rewrite_results(Path(out_dir) / RESULTS, replaced())


def _rewrite_results(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """results.jsonl holding ``records``, written beside it, synced and put in its place in one rename."""
    tmp = path.with_suffix(".jsonl.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk: the old file stays whole, and no half-written temporary beside it
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class ResultsFile:
    """results.jsonl with one line per item: each line is written whole into the file before :meth:`write` returns
    (a killed process loses none), and synced to the disk by a thread (:class:`_Syncer`), off the event loop: an
    ``fsync`` on the loop held every item in flight for 0.5-3 ms a line (benchmarks/README.md, "Where the time
    goes"). :meth:`close` syncs what is left and waits; a failed sync is raised by the next write or the close."""

    def __init__(self, path: Path, keep: Iterable[dict[str, Any]]) -> None:
        self.path = path
        _rewrite_results(path, keep)
        # unbuffered bytes: a failed write (disk full) leaves nothing queued that close() would retry
        self._handle: IO[bytes] = path.open("ab", buffering=0)
        self._syncer = _Syncer(self._handle.fileno())

    def write(self, record: dict[str, Any]) -> None:
        self._syncer.check()
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        start = self._handle.tell()
        try:
            self._handle.write(line)
        except OSError:
            # drop a torn line so the file stays one whole record per line
            with contextlib.suppress(OSError):
                self._handle.truncate(start)
            raise
        self._syncer.due()

    def close(self) -> None:
        try:
            self._syncer.close()
        finally:
            with contextlib.suppress(OSError):
                self._handle.close()


class _Syncer:
    """Syncs a file descriptor from a thread whenever lines were written since its last sync (writes that arrive
    while it syncs are covered by the next one); its first error is kept and raised by :meth:`check`."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._pending = self._closed = False
        self._error: OSError | None = None
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def due(self) -> None:
        with self._changed:
            self._pending = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._sync_each, name="jurygraph-results-sync", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def _sync_each(self) -> None:
        while True:
            with self._changed:
                while not self._pending and not self._closed:
                    self._changed.wait()
                if not self._pending:
                    return
                self._pending = False
            try:
                os.fsync(self.fd)
            except OSError as err:
                with self._changed:
                    self._error = self._error or err
            with self._changed:
                self._changed.notify_all()

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Sync what was written and stop the thread; raises a sync's error."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        if self._thread is not None:  # none: nothing was written since the file was rewritten (and synced)
            self._thread.join()
        self.check()


@contextlib.contextmanager
def run_lock(out_dir: str | Path) -> Iterator[None]:
    """Hold the run directory's lock; RunLocked at once (naming the holder's PID) if another process has it."""
    path = Path(out_dir) / LOCK
    handle = path.open("a+", encoding="utf-8")
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise RunLocked(f"{out_dir} is in use by PID {holder} (one writer per run directory; "
                            "wait for it to finish or stop it, then --resume)") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()  # closing the descriptor releases the flock
