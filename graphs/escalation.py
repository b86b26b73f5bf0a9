"""When the panel is unsure: a conditional edge after the verdict sends a doubtful item to a stronger judge (an
escalation subgraph) or to a person (a review node that calls ``interrupt()``). Built on the wiring helpers: the node
that writes the verdict (ChatEval's ``aggregate``, DEBATE's ``finalize``, ReFeR's ``area_chair``, a calibration's
``calibrate``...) keeps its place, and its edge to the end becomes :func:`~jurygraph.graphs.wiring.branch_when`'s.

    aggregate -.->|escalate if agreement<1| escalate -.->|review if flip| review --> END
    aggregate -.->|review if flip| review
    aggregate -.-> END

The doubt signals and conditions are :mod:`jurygraph.judging.doubt`'s; both decisions read the **panel's** signals
(a review after an escalation too). Items that meet no condition go straight to the end: they cost nothing more.

The escalation runs another graph on the item, compiled once and invoked inside the ``escalate`` node (as a
calibration runs its protocol), so its state never mixes with the panel's. Its agents use the model the context maps
to ``"escalation"`` (``JuryContext(models={"escalation": "openai:gpt-4o"})``, ``--escalate-to SPEC``) for every agent,
else the run's own models. It writes:

- ``verdict``: the escalated verdict (or the panel's, when the escalated one is missing), its ``detail.escalation`` =
  ``{decided_by, triggered_by, signals, panel, escalated, cost: {panel, escalation}}`` where each cost is the requests,
  tokens and list-price ``usd`` (None when no price is known) of that side;
- ``usage`` and ``histories`` of its agents under ``escalation/<agent>``, so the panel's stay as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, StateGraph

from jurygraph.graphs.wiring import GraphLike, branch_when, compile_inner, edges_of
from jurygraph.judging.doubt import Condition, doubt_signals, parse_conditions, triggered
from jurygraph.judging.state import COUNTS, ESCALATION_PREFIX
from jurygraph.llm.calls import current_context
from jurygraph.llm.models import JuryContext
from jurygraph.llm.pricing import estimate_cost
from jurygraph.nodes.review import make_review_node

__all__ = ["ESCALATION", "route_doubtful", "verdict_node"]

ESCALATION = "escalation"  # the models key of the stronger judge, and the namespace of its agents

def verdict_node(builder: StateGraph) -> str:
    """The node whose plain edge ends the graph: the one that writes the verdict."""
    sources = sorted(s for s, t in edges_of(builder) if t == END)
    if len(sources) != 1:
        raise ValueError(f"the graph should end at one node that writes the verdict, not {sources or 'none'}; "
                         "pass source= to say which")
    return sources[0]


def side_cost(usage: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Requests, tokens and list-price USD (None when no model is priced) of some agents' usage."""
    totals = {key: sum(int(entry.get(key, 0)) for entry in usage.values()) for key in COUNTS}
    return {**totals, "usd": estimate_cost(usage)}


def _escalation_context() -> JuryContext:
    """The run's context, with every agent on the ``escalation`` model when the context names one."""
    context = current_context()
    stronger = context.models.get(ESCALATION)
    return context if stronger is None else replace(context, models={}, default=stronger)


def make_escalation_node(graph: GraphLike, conditions: Sequence[Condition], name: str = "escalate") -> RunnableLambda:
    """The node that judges the item again with ``graph`` and records both verdicts (see the module's doc)."""
    escalation = compile_inner(graph)
    when = tuple(conditions)

    def result(state: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
        panel = dict(state.get("verdict") or {})
        escalated = dict(out.get("verdict") or {})
        usage = dict(out.get("usage") or {})
        signals = doubt_signals(state)
        decided = "escalation" if escalated and not escalated.get("missing") else "panel"
        record: dict[str, Any] = {
            "decided_by": decided, "triggered_by": triggered(when, signals), "signals": signals,
            "panel": panel, "escalated": escalated,
            "cost": {"panel": side_cost(state.get("usage") or {}), "escalation": side_cost(usage)},
        }
        if decided == "panel":
            record["reason"] = "the escalated verdict is missing" if escalated else "the escalation gave no verdict"
        decider = escalated if decided == "escalation" else panel
        verdict = {**decider, "detail": {**(decider.get("detail") or {}), "escalation": record}}
        histories = {f"{ESCALATION_PREFIX}{agent}": {"replace": list(history)}
                     for agent, history in (out.get("histories") or {}).items()}
        return {"verdict": verdict, "usage": {f"{ESCALATION_PREFIX}{agent}": entry for agent, entry in usage.items()},
                "histories": histories}

    def run_sync(state: dict[str, Any]) -> dict[str, Any]:
        return result(state, escalation.invoke({"item": state["item"]}, context=_escalation_context()))

    async def run_async(state: dict[str, Any]) -> dict[str, Any]:
        return result(state, await escalation.ainvoke({"item": state["item"]}, context=_escalation_context()))

    return RunnableLambda(run_sync, afunc=run_async, name=name)


def route_doubtful(
    builder: StateGraph,
    *,
    escalate_when: str | Sequence[str | Condition] = (),
    escalation: GraphLike | None = None,
    review_when: str | Sequence[str | Condition] = (),
    source: str | None = None,
) -> StateGraph:
    """Send doubtful items, after the verdict, to ``escalation`` and/or a person; returns ``builder``, edited.

    ``escalate_when`` / ``review_when``: conditions such as ``"agreement<1"``, ``"margin<1"``, ``"flip"``,
    ``"missing"`` (:func:`~jurygraph.judging.doubt.parse_conditions`); any one that holds sends the item on.
    ``escalation``: the graph that judges an escalated item (e.g. ``create_single_agent()``, with the context's
    ``"escalation"`` model). ``source``: the node that writes the verdict (default: the one that ends the graph).
    A reviewed graph needs a checkpointer: the item waits in it for ``Command(resume=...)``.
    """
    escalate = _conditions(escalate_when)
    review = _conditions(review_when)
    if bool(escalate) != (escalation is not None):
        raise ValueError("an escalation needs both its conditions (escalate_when) and its graph (escalation)")
    if not escalate and not review:
        return builder
    source = source or verdict_node(builder)
    branches: list[tuple[str, Callable[[dict[str, Any]], bool], str]] = []
    needs_review = _holds(review)
    if escalate:
        assert escalation is not None
        builder.add_node("escalate", make_escalation_node(escalation, escalate))
        branches.append((_label("escalate", escalate), _holds(escalate), "escalate"))
        builder.add_edge("escalate", END)
    if review:
        builder.add_node("review", make_review_node(review))
        branches.append((_label("review", review), needs_review, "review"))
        builder.add_edge("review", END)
    branch_when(builder, source, branches)
    if escalate and review:  # an escalated item the panel was doubtful enough about goes to a person too
        branch_when(builder, "escalate", [(_label("review", review), needs_review, "review")])
    return builder


def _conditions(given: str | Sequence[str | Condition]) -> list[Condition]:
    if isinstance(given, str):
        return parse_conditions(given)
    return [found for c in given for found in ([c] if isinstance(c, Condition) else parse_conditions(c))]


def _holds(conditions: Sequence[Condition]) -> Callable[[dict[str, Any]], bool]:
    def condition(state: dict[str, Any]) -> bool:
        signals = doubt_signals(state)
        return any(c.holds(signals) for c in conditions)

    return condition


def _label(target: str, conditions: Sequence[Condition]) -> str:
    return f"{target} if {' or '.join(c.text for c in conditions)}"
