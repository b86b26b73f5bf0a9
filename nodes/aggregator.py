"""The aggregator node: the panel's verdict from its members' judgments (no model call)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.runnables import RunnableLambda

from jurygraph.judging.aggregation import UNREADABLE_RULES, UnreadableRule, aggregate, tie_on_unreadable
from jurygraph.judging.items import as_item
from jurygraph.judging.judgments import Judgment
from jurygraph.llm.calls import GraphNode


def make_aggregator_node(agents: Sequence[str], name: str = "aggregate", method: str | None = None,
                         annotate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                         unreadable: UnreadableRule | str = "missing") -> RunnableLambda:
    """The verdict over ``agents`` by :func:`jurygraph.judging.aggregation.aggregate`: by default each answer's mean
    score (pairwise), the mean (scores), the majority (choices); ``method="majority"`` votes pairwise labels.
    A judge with no judgment is missing: left out and counted (``unreadable="missing"``), or, with ``"code"``, a
    pairwise item with a missing judgment is a tie (:func:`~jurygraph.judging.aggregation.tie_on_unreadable`).
    ``annotate(state)`` adds to the verdict's detail (e.g. the rounds run)."""
    if unreadable not in UNREADABLE_RULES:
        raise ValueError(f"unknown unreadable-judgment rule {unreadable!r}; "
                         f"choose one of {', '.join(UNREADABLE_RULES)}")
    members = tuple(agents)

    def run(state: dict[str, Any]) -> dict[str, Any]:
        item = as_item(state["item"])
        stored = state.get("judgments") or {}
        judgments = [
            Judgment.model_validate(stored[a]) if a in stored
            else Judgment.missing_for(a, item.task, "", "no judgment was recorded for this agent", 0)
            for a in members
        ]
        verdict = (tie_on_unreadable(judgments, item.task) if unreadable == "code" else None) or \
            aggregate(judgments, item.task, method)
        if annotate is not None:
            verdict = verdict.model_copy(update={"detail": {**verdict.detail, **annotate(state)}})
        return {"verdict": verdict.to_state()}

    return GraphNode(run, name=name)  # pure and quick: on the event loop, with no run of its own when untraced
