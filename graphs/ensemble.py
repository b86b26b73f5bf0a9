"""ChatEval's "Multi-Agent (Ensemble)" baseline (ICLR version, §3.2): "we apply the single-agent method
multiple times using different role prompts across the same instance and then aggregate their results
through averaging to derive the final outcome" — independently and in parallel, with no discussion.
Averaging is the default (the same rule as ChatEval's default verdict, :func:`jurygraph.judging.aggregation.aggregate`);
a majority vote over the pairwise labels is the alternative. Each member is the single-agent method with a
role prompt: the multi-agent template with the persona in the role slot and an empty history (the released
code's one-role runs kept the multi-agent prompt), temperature 0, 512 max tokens.

All referees run in ONE superstep (fan-out from START), so none can hear another; the core aggregator
node is the barrier that combines them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from langgraph.graph import END, START, StateGraph

from jurygraph.graphs.calibration import NO_CALIBRATE
from jurygraph.graphs.chateval import AGENTS, PERSONAS, panel_size
from jurygraph.graphs.escalation import route_doubtful
from jurygraph.graphs.single import create_single_agent
from jurygraph.graphs.spec import Built, Option, Params, ProtocolSpec, panel_signals
from jurygraph.judging.state import JuryState
from jurygraph.llm.models import JuryContext
from jurygraph.nodes.aggregator import make_aggregator_node
from jurygraph.nodes.common import node_id
from jurygraph.nodes.referee import ChatEvalTemplate, Referee, chateval_personas
from jurygraph.nodes.solo import make_solo_referee_node

EnsembleMethod = Literal["majority", "mean"]


def create_ensemble(
    *,
    referees: int | None = None,
    personas: Sequence[str | Referee] | str | None = None,
    method: EnsembleMethod | str = "mean",
    template: str | None = None,
    final_prompt: str | None = None,
    state_schema: type[Any] = JuryState,
    context_schema: type[Any] = JuryContext,
) -> StateGraph:
    """An uncompiled Ensemble graph: one independent referee per persona, then the aggregator.

    ``referees``/``personas`` choose the panel as in :func:`create_chateval` (default: General Public and
    Critic). ``method``: ``"mean"`` (the paper) averages each answer's scores and takes the label from the
    means; ``"majority"`` votes the pairwise labels. Score items are always averaged.
    """
    if method not in ("majority", "mean"):
        raise ValueError(f"unknown ensemble method {method!r}; choose 'majority' or 'mean'")
    panel = chateval_personas(personas, referees)
    frame = ChatEvalTemplate(template, final_prompt)
    builder = StateGraph(state_schema, context_schema=context_schema)
    nodes = []
    for referee in panel:
        node = node_id(referee.name)
        builder.add_node(node, make_solo_referee_node(referee, template=frame))
        builder.add_edge(START, node)
        nodes.append(node)
    builder.add_node("aggregate", make_aggregator_node([r.name for r in panel], method=method))
    builder.add_edge(nodes, "aggregate")
    builder.add_edge("aggregate", END)
    return builder


# --- the protocol on the command line and around a run (graphs/spec.py) ---------------------------------------


def _build(values: Params) -> Built:
    graph = create_ensemble(referees=values["agents"], personas=values["personas"], method=values["ensemble_method"])
    return Built(graph, {"agents": values["agents"], "personas": values["personas"],
                         "method": values["ensemble_method"]})


SPEC = ProtocolSpec(
    name="ensemble",
    factory=create_ensemble,
    help="Multi-Agent (Ensemble) baseline: one independent referee per persona, no discussion",
    options=(AGENTS, PERSONAS, NO_CALIBRATE,
             Option("ensemble_method", str, "mean",
                    "Ensemble: average each answer's scores (default, the paper) or vote the labels",
                    choices=("mean", "majority"))),
    build=_build,
    tasks=("pairwise", "score"),
    conversations=("pairwise", "score"),
    plan=lambda params: 2 * panel_size(params),
    position_calibration=True,
    signals=lambda params, task: panel_signals(task, members=panel_size(params)),
    # General Public and Critic; with doubtful items (jurygraph's own, opt-in) sent to a stronger judge, or a person
    studio={"ensemble": lambda: create_ensemble(),
            "ensemble_escalation": lambda: route_doubtful(create_ensemble(), escalate_when="agreement<1",
                                                          escalation=create_single_agent()),
            "ensemble_review": lambda: route_doubtful(create_ensemble(), review_when="agreement<1")},
    order=50,
)
