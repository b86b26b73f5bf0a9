"""The run directory: its file names, the manifest, the results file and the one-writer lock.

    RUN_DIR/results.jsonl      one JSON line per item, appended and synced as each item finishes (or pauses for a
                               review: status "awaiting_review", replaced by its reviewed line)
    RUN_DIR/manifest.json      what defines the run (protocol, models, dataset, options) and its invocations
    RUN_DIR/checkpoints.sqlite one LangGraph thread per item (thread_id = item id)
    RUN_DIR/llm_cache.sqlite   every answered model call
    RUN_DIR/spend.json         what the run has paid so far, over every invocation (the budget's ground)
    RUN_DIR/batches.jsonl      the provider batches of a --batch run: each submitted, collected, settled
    RUN_DIR/batches/           the batch files sent to the provider (one per batch, kept until it is settled)
    RUN_DIR/run.lock           held (flock) by the one process writing the directory

The lock is an ``fcntl.flock`` on ``run.lock``: the kernel drops it when its holder exits, however it
exits, so a lock left by a killed process never blocks a resume; the file keeps the holder's PID so a
refused second writer can name it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

RESULTS = "results.jsonl"
# a results line's status: "ok", "failed", or waiting for a person's verdict (a review node's interrupt())
AWAITING_REVIEW = "awaiting_review"
MANIFEST = "manifest.json"
CHECKPOINTS = "checkpoints.sqlite"
CACHE = "llm_cache.sqlite"
SPEND = "spend.json"
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


def read_manifest(out_dir: str | Path) -> dict[str, Any] | None:
    """The run's manifest, or None when the directory has none."""
    path = Path(out_dir) / MANIFEST
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def write_manifest(out_dir: str | Path, data: Mapping[str, Any]) -> None:
    """Replace the manifest atomically (a crash leaves the old one or the new one, never half of one)."""
    _replace_json(Path(out_dir) / MANIFEST, data, indent=2)


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


def write_spend(out_dir: str | Path, data: Mapping[str, Any]) -> None:
    _replace_json(Path(out_dir) / SPEND, data)


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
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=indent, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


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
    with tmp.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class ResultsFile:
    """results.jsonl with one line per item: each line is written whole, flushed and synced."""

    def __init__(self, path: Path, keep: Iterable[dict[str, Any]]) -> None:
        self.path = path
        _rewrite_results(path, keep)
        # unbuffered bytes: a failed write (disk full) leaves nothing queued that close() would retry
        self._handle: IO[bytes] = path.open("ab", buffering=0)

    def write(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        start = self._handle.tell()
        try:
            self._handle.write(line)
            os.fsync(self._handle.fileno())
        except OSError:
            # drop a torn line so the file stays one whole record per line
            with contextlib.suppress(OSError):
                self._handle.truncate(start)
            raise

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._handle.close()


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
