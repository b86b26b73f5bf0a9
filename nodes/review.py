"""The review node: a person decides the item. It calls LangGraph's ``interrupt()`` with the panel's verdict, its doubt
signals and the transcript; the item's thread waits in the checkpointer (for days, if need be) until it is resumed with
``Command(resume=...)``, and the node then writes the reviewer's verdict.

What a resume may carry (:func:`read_review`): the verdict alone (``"1"``, ``"2"``, ``"tie"``; a score; a choice's
answer) or ``{"verdict": ..., "reviewer": ..., "note": ..., "at": ...}``. A value that does not fit the item (a score
off its scale, ``"3"`` for a pairwise item) interrupts again with ``error`` saying why, so a bad answer from LangGraph
Studio or a notebook never ends the item.
"""

from __future__ import annotations

import getpass
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from langchain_core.runnables import RunnableLambda
from langgraph.types import interrupt

from jurygraph.judging.doubt import Condition, doubt_signals, panel_verdict, triggered
from jurygraph.judging.items import EvalItem, TaskKind, as_item, pairwise_label
from jurygraph.judging.judgments import Verdict
from jurygraph.judging.state import transcript_data

__all__ = ["expected_answer", "login_name", "make_review_node", "read_review", "review_request"]


def login_name() -> str:
    """The reviewer when none is named: the login name of the user running the review."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER (some containers)
        return "unknown"


def expected_answer(item: EvalItem) -> str:
    """What a reviewer may answer for this item, in words."""
    if item.task is TaskKind.PAIRWISE:
        return "1, 2 or tie"
    if item.task is TaskKind.SCORE:
        return f"a score from {item.scale}" if item.scale else "a score"
    return f"one of {', '.join(item.options)}" if item.options else "the answer"


def read_review(answer: Any, item: EvalItem) -> dict[str, Any]:
    """A reviewer's answer as ``{"verdict", "reviewer", "note", "at"}``; a ValueError (naming the item and what it
    takes) when the verdict does not fit the item."""
    given = dict(answer) if isinstance(answer, Mapping) else {"verdict": answer}
    value = given.get("verdict")
    where = f"item {item.id!r} takes {expected_answer(item)}"
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"no verdict given: {where}")
    verdict: str | float
    if item.task is TaskKind.PAIRWISE:
        label = pairwise_label(value)
        if label is None:
            raise ValueError(f"{value!r} is not a pairwise verdict: {where}")
        verdict = label
    elif item.task is TaskKind.SCORE:
        try:
            verdict = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{value!r} is not a score: {where}") from None
        if item.scale is not None and not item.scale.contains(verdict):
            raise ValueError(f"{verdict:g} is off the scale: {where}")
    else:
        verdict = str(value).strip()
        if item.options:
            by_key = {key.lower(): key for key in item.options}
            if verdict.lower() not in by_key:
                raise ValueError(f"{verdict!r} is not an option: {where}")
            verdict = by_key[verdict.lower()]
    note = given.get("note")
    return {"verdict": verdict, "reviewer": str(given.get("reviewer") or login_name()),
            "at": str(given.get("at") or datetime.now(UTC).isoformat(timespec="seconds")),
            "note": str(note) if note not in (None, "") else None}


def review_request(state: Mapping[str, Any], conditions: Sequence[Condition] = ()) -> dict[str, Any]:
    """What the review node shows the person (the ``interrupt()`` value): the item, the verdict that would stand and
    the panel's own, the doubt signals and the conditions that sent it here, the transcript and what an answer may be.
    Never the item's human label: the reviewer is measured against it."""
    item = as_item(state["item"])
    signals = doubt_signals(state)
    return {
        "item_id": item.id, "task": item.task.value, "expects": expected_answer(item),
        "verdict": state.get("verdict"), "panel_verdict": panel_verdict(state), "doubt": signals,
        "review_when": [c.text for c in conditions], "triggered_by": triggered(conditions, signals),
        "transcript": transcript_data(dict(state)),
    }


def make_review_node(conditions: Sequence[Condition] = (), name: str = "review") -> RunnableLambda:
    """The node that waits for a person's verdict (see the module's doc). The verdict it writes is the reviewer's,
    ``method`` "review", with ``detail.review`` = the verdict, reviewer, time, note and the panel's original verdict
    (and ``detail.escalation`` kept when a stronger judge had decided before)."""
    when = tuple(conditions)

    def run(state: dict[str, Any]) -> dict[str, Any]:
        item = as_item(state["item"])
        request = review_request(state, when)
        error: str | None = None
        while True:  # each interrupt() of the node is answered by one resume, in order
            answer = interrupt(request if error is None else {**request, "error": error})
            try:
                review = read_review(answer, item)
                break
            except ValueError as err:
                error = str(err)
        current = state.get("verdict") or {}
        detail: dict[str, Any] = {"review": {**review, "panel_verdict": request["panel_verdict"]}}
        escalation = (current.get("detail") or {}).get("escalation")
        if escalation:
            detail["escalation"] = escalation
        value = review["verdict"]
        fields = {"label": value} if item.task is TaskKind.PAIRWISE else \
            {"score": value} if item.task is TaskKind.SCORE else {"answer": value}
        verdict = Verdict(kind=item.task, method="review", n_judgments=1, detail=detail, **fields)
        return {"verdict": verdict.to_state()}

    return RunnableLambda(run, name=name)
