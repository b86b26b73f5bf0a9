"""Accuracy of a reasoning run (ReFeR Appendix N.3) against gold answers: the verdict's, each peer's and the
peer majority's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jurygraph.judging.reasoning import agreement, is_correct, normalize_answer


def reasoning_report(records: Sequence[Mapping[str, Any]], peers: Sequence[str] | None = None) -> dict[str, Any]:
    """Accuracy against gold answers from run records (``results.jsonl`` lines or ``{"verdict", "judgments",
    "human"}`` dicts): the framework's, each peer's, and the peer majority's; items without a gold answer
    are not counted, a missing answer counts as wrong and is reported."""
    graded = [r for r in records if (r.get("human") or {}).get("answer") is not None]
    names = list(peers) if peers is not None else sorted(
        {p for r in graded for p in (r.get("judgments") or {}) if p != "area_chair"})

    def accuracy(answers: list[Any], golds: list[Any]) -> float | None:
        return sum(a is not None and is_correct(a, g) for a, g in zip(answers, golds, strict=True)) / len(golds) \
            if golds else None

    golds = [r["human"]["answer"] for r in graded]
    final = [(r.get("verdict") or {}).get("answer") for r in graded]
    per_peer = {p: accuracy([((r.get("judgments") or {}).get(p) or {}).get("answer") for r in graded], golds)
                for p in names}
    majorities = [agreement([j.get("answer") for p, j in (r.get("judgments") or {}).items()
                             if p in names and j.get("answer") is not None])[0] for r in graded]
    return {
        "items": len(graded),
        "accuracy": accuracy(final, golds),
        "missing_answers": sum(a is None for a in final),
        "peer_accuracy": per_peer,
        "peer_majority_accuracy": accuracy(list(majorities), golds),
        "agrees_with_peer_majority": (sum(a is not None and m is not None and normalize_answer(a) == m
                                          for a, m in zip(final, majorities, strict=True)) / len(graded))
        if graded else None,
    }
