"""The run directory an evaluator writes: every evaluation an item of it, so ``jurygraph show``, ``report`` and
``metaeval`` read evaluations made inside another harness as they read a ``jurygraph eval`` run.

It is the runner's run, opened for items that come one at a time (:func:`jurygraph.running.openrun.open_run`): the
same files (``results.jsonl``, ``checkpoints.sqlite``, ``llm_cache.sqlite``, ``ledger.sqlite``, ``spend.json``,
``manifest.json``: :mod:`jurygraph.running.rundir`), the same typed manifest with its totals over every invocation
from the ledger, every paid call in the ledger before its answer is used. The evaluator holds the run's lock from
its first evaluation until it is closed: one writer, however many calls the harness makes at once. A later
evaluator on the same directory continues it (a new invocation): the items already judged are answered from their
records, failed ones are judged again, and a directory whose protocol, parameters, models or evaluator section
differ is refused (its records would answer another question).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph.graph import StateGraph

from jurygraph.llm.models import JuryContext
from jurygraph.running.checkpoints import KeepCheckpoints
from jurygraph.running.openrun import OpenRun, open_run

# what makes a record the answer to an evaluation: a run directory holding other values is another run
SAME_RUN = ("protocol", "parameters", "models", "evaluator")


@dataclass(frozen=True)
class EvaluatorRun:
    """An evaluator's run directory: where, the manifest's fields that define it, how its checkpoints are kept and
    what its models cost."""

    out: Path
    manifest: Mapping[str, Any]
    keep_checkpoints: KeepCheckpoints = "final"
    prices: Mapping[str, Any] | None = None

    def open(self, graph: StateGraph, context: JuryContext) -> contextlib.AbstractAsyncContextManager[OpenRun]:
        return open_run(graph, self.out, context=context, keep_checkpoints=self.keep_checkpoints,
                        manifest=self.manifest, prices=self.prices, same_run=SAME_RUN)


def evaluator_manifest(protocol: str, params: Mapping[str, Any], models: Mapping[str, str], *, task: str,
                       aspect: str | None, dataset: str | None, scale: list[float] | None) -> dict[str, Any]:
    """The manifest's fields an evaluator gives its run (:class:`~jurygraph.running.rundir.RunManifest`)."""
    return {"protocol": protocol, "parameters": dict(params), "models": dict(models),
            "dataset": {"name": dataset or "evaluations", "source": "jurygraph.evaluators"},
            "evaluator": {"task": task, "aspect": aspect, "dataset": dataset, "scale": scale}}
