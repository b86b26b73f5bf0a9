"""What an item waits for in its thread, told apart by its interrupt: its batch's answers (the batch engine's
``interrupt()``, :mod:`jurygraph.running.batch`) or a person's verdict (the review node's,
:mod:`jurygraph.nodes.review`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["BATCH_CALL", "paused_for_review", "review_interrupt", "waits_for_batch"]

# what an item waiting for its batch interrupts with; any other interrupt is a person's review (nodes.review)
BATCH_CALL = "batch_call"


def waits_for_batch(interrupts: Sequence[Any]) -> bool:
    """Whether a graph's interrupts are all batch calls waiting for their answers (not a review's pause)."""
    return bool(interrupts) and all(isinstance(i.value, Mapping) and BATCH_CALL in i.value for i in interrupts)


def review_interrupt(interrupts: Sequence[Any]) -> Any | None:
    """The interrupt by which an item waits for a person (a review node's: any that is not a batch call), or None."""
    return next((i for i in interrupts if not (isinstance(i.value, Mapping) and BATCH_CALL in i.value)), None)


def paused_for_review(interrupts: Sequence[Any]) -> bool:
    """Whether an item waits for a person: an interrupt that is not a batch call (a review node's)."""
    return review_interrupt(interrupts) is not None
