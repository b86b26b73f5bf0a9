"""The run directory an evaluator writes: every evaluation an item of it, so ``jurygraph show``, ``report`` and
``metaeval`` read evaluations made inside another harness.

The files are the runner's (:mod:`jurygraph.running.rundir` owns their names and formats): ``results.jsonl`` (one
line per evaluated item, synced as it is written), ``checkpoints.sqlite``, ``llm_cache.sqlite``, ``spend.json``
and ``manifest.json``. The evaluator holds the run's lock from its first evaluation until it is closed: one writer,
however many calls the harness makes at once. A later evaluator on the same directory continues it: the items
already judged are answered from their records, failed ones are judged again.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jurygraph.judging.state import COUNTS, add_usage, usage_by_model, usage_counts
from jurygraph.llm.pricing import estimate_cost
from jurygraph.running.budget import SpendMeter
from jurygraph.running.rundir import (
    CACHE,
    CHECKPOINTS,
    RESULTS,
    ResultsFile,
    iter_results,
    read_manifest,
    run_lock,
    write_manifest,
)

__all__ = ["CACHE", "CHECKPOINTS", "EvaluatorRun"]

# what makes a record the answer to an evaluation: a run directory holding other values is another run
DEFINING = ("protocol", "parameters", "models", "task", "aspect", "dataset", "scale")


class EvaluatorRun:
    """One evaluator's hold on its run directory: :meth:`open` (lock, finished records, results file, manifest),
    :meth:`write` (an item's record), :meth:`close` (totals, the manifest's end, the lock released)."""

    def __init__(self, out: str | Path, manifest: Mapping[str, Any], prices: Mapping[str, Any] | None = None) -> None:
        self.out = Path(out)
        self.given = dict(manifest)
        self.prices = prices
        self.usage: dict[str, dict[str, Any]] = {}
        self.counts = {"done": 0, "failed": 0, "missing_verdicts": 0, "answered_from_run": 0}
        self._lock: contextlib.ExitStack | None = None

    def open(self) -> dict[str, dict[str, Any]]:
        """Take the run's lock and start this invocation; returns the records of the items already judged (by id)."""
        self.out.mkdir(parents=True, exist_ok=True)
        stack = contextlib.ExitStack()
        stack.enter_context(run_lock(self.out))
        self._lock = stack
        try:
            previous = read_manifest(self.out) or {}
            before, now = _defining(previous), _defining(self.given)
            conflicts = [f"{key} {before[key]} (this evaluator: {now.get(key)})" for key in DEFINING
                         if key in before and _plain(before[key]) != _plain(now.get(key))]
            if conflicts:
                raise ValueError(f"run_dir {self.out} holds another run: {'; '.join(conflicts)}. Its records would "
                                 "answer this evaluator's items: give another run_dir")
            finished = {r["id"]: r for r in iter_results(self.out) if r.get("status") == "ok"}
            self.meter = SpendMeter(self.out, self.prices)
            self.manifest = {**previous, **self.given, "started": previous.get("started") or _now(),
                             "ended": None, "checkpoint": CHECKPOINTS,
                             "invocations": [*previous.get("invocations", []),
                                             {"at": _now(), "pid": os.getpid(), "by": "evaluator"}]}
            write_manifest(self.out, self.manifest)
            # a failed item's line is dropped: it is judged again when the harness asks for it
            self.results = ResultsFile(self.out / RESULTS, finished.values())
        except BaseException:
            stack.close()
            self._lock = None
            raise
        return finished

    def write(self, record: dict[str, Any], *, fresh: bool = True) -> None:
        """An item's record: appended and synced, counted (``fresh=False``: answered from an earlier record)."""
        self.results.write(record)
        self.count(record, fresh=fresh)

    def count(self, record: Mapping[str, Any], *, fresh: bool = True) -> None:
        if not fresh:
            self.counts["answered_from_run"] += 1
            return
        ok = record.get("status") == "ok"
        self.counts["done" if ok else "failed"] += 1
        verdict = record.get("verdict") or {}
        self.counts["missing_verdicts"] += int(ok and (not verdict or bool(verdict.get("missing"))))
        self.usage = add_usage(self.usage, {
            agent: {"role": entry.get("role"), "model": entry.get("model"), **usage_counts(entry)}
            for agent, entry in (record.get("usage") or {}).items()})

    def close(self) -> None:
        """The manifest's end (this invocation's totals, the run's spend) and the lock released."""
        if self._lock is None:
            return
        try:
            requests, input_tokens, output_tokens = (sum(int(e.get(k, 0)) for e in self.usage.values())
                                                     for k in COUNTS)
            self.meter.save()
            self.manifest.update(
                ended=_now(), usage_by_agent=self.usage, usage_by_model=usage_by_model(self.usage),
                counts={**self.counts, "requests": requests, "input_tokens": input_tokens,
                        "output_tokens": output_tokens, "cost_usd": estimate_cost(self.usage, self.prices)},
                spend=self.meter.total.as_json())
            write_manifest(self.out, self.manifest)
        finally:
            self.results.close()
            self._lock.close()
            self._lock = None


def _defining(manifest: Mapping[str, Any]) -> dict[str, Any]:
    evaluator = manifest.get("evaluator") or {}
    found = {key: manifest[key] for key in ("protocol", "parameters", "models") if key in manifest}
    found.update({key: evaluator[key] for key in ("task", "aspect", "dataset", "scale") if key in evaluator})
    return found


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _now() -> str:
    return datetime.now(UTC).isoformat()
