"""An item's results line (``results.jsonl``): what a run keeps of each item, built from its graph state.

Every engine builds an item's line here (:func:`item_record`), and so does a review that finishes an item
(:mod:`jurygraph.running.review`) and an evaluator judging without a run directory; ``metaeval``, ``show``,
``report`` and ``rank`` read these fields back through :mod:`jurygraph.running.rundir`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jurygraph.judging.doubt import decided_by, doubt_signals
from jurygraph.judging.items import EvalItem
from jurygraph.running.rundir import AWAITING_REVIEW

__all__ = ["item_record", "verdict_kind"]


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


def verdict_kind(record: Mapping[str, Any]) -> str | None:
    """What a results line's verdict is, as ``jurygraph eval``'s summary counts them: ``awaiting review``,
    ``failed``, ``missing``, ``Assistant 1``/``Assistant 2``/``tie``, ``scored``, ``answered`` (None: none of these)."""
    verdict = record.get("verdict") or {}
    if record.get("status") == AWAITING_REVIEW:
        return "awaiting review"
    if record.get("status") != "ok":
        return "failed"
    if verdict.get("missing"):
        return "missing"
    if verdict.get("label") is not None:
        return f"Assistant {verdict['label']}" if verdict["label"] != "tie" else "tie"
    if verdict.get("score") is not None:
        return "scored"
    if verdict.get("answer") is not None:
        return "answered"
    return None
