"""FairEval's own baseline (Wang et al. 2023): its evaluator prompt with Multiple Evidence Calibration (k
sampled reviews in one request) and Balanced Position Calibration (the same in the other answer order).

    START -> original_order -\\
    START -> swapped_order  --> calibrate -> END       (swapped_order only with BPC)

As FairEval.py's get_eval: every readable review of both orders (swapped ones mapped back) is pooled, each
answer's score is the mean over them, and the label follows the two means (equal means: tie). A review
that cannot be read is left out and counted (FairEval.py skips it too); none readable gives a missing verdict.

This is what ``jurygraph eval --protocol single --calibrate {bpc,mec,bpc+mec}`` runs (the single-agent
baseline FairEval calibrated); ``--calibration-baseline chateval`` instead wraps ChatEval's single-agent
graph with :func:`jurygraph.graphs.calibration.calibrate`, as the calibration of any other protocol does.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, START, StateGraph

from jurygraph.judging.aggregation import aggregate
from jurygraph.judging.items import TaskKind
from jurygraph.judging.judgments import Judgment
from jurygraph.judging.state import JuryState
from jurygraph.llm.models import JuryContext
from jurygraph.nodes.faireval import FAIREVAL_PARAMS, in_original_order, make_faireval_node

ORDERS = ("original_order", "swapped_order")


def _pool_node(k: int, bpc: bool) -> RunnableLambda:
    def pool(state: dict[str, Any]) -> dict[str, Any]:
        stored = state.get("judgments") or {}
        reviews: list[Judgment] = []
        for order in ORDERS[: 2 if bpc else 1]:
            for i in range(1, k + 1):
                name = f"{order} #{i}"
                judgment = Judgment.model_validate(stored[name]) if name in stored else \
                    Judgment.missing_for(name, TaskKind.PAIRWISE, "", "no review was recorded", 0)
                reviews.append(in_original_order(judgment) if order == "swapped_order" else judgment)
        verdict = aggregate(reviews, TaskKind.PAIRWISE, "mean")
        mode = "bpc+mec" if bpc and k > 1 else "bpc" if bpc else "mec"
        detail = {"calibration": mode, "k": k, "reviews": {
            j.agent: {"missing": True, "reason": j.reason} if j.missing
            else {"score_1": j.score_1, "score_2": j.score_2} for j in reviews}}
        method = "FairEval: mean scores of the pooled reviews" if not verdict.missing else "none"
        return {"verdict": verdict.model_copy(update={"method": method, "detail": detail}).to_state()}

    return RunnableLambda(pool, name="calibrate")


def create_faireval(
    *,
    k: int = 3,
    bpc: bool = True,
    params: dict[str, Any] | None = None,
    state_schema: type[Any] = JuryState,
    context_schema: type[Any] = JuryContext,
) -> StateGraph:
    """An uncompiled graph of FairEval's calibrated evaluator for pairwise items.

    ``k``: reviews sampled per order in ONE request (n = k; MEC, FairEval's default 3; k = 1 is no MEC);
    ``bpc``: also judge the swapped order; ``params``: the call parameters (default FairEval.py's
    ``temperature=1, max_tokens=512``). The model is the ``FairEval`` agent's, else the ``referee`` role's.
    """
    call_params = dict(FAIREVAL_PARAMS if params is None else params)
    builder = StateGraph(state_schema, context_schema=context_schema)
    orders = ORDERS[: 2 if bpc else 1]
    for order in orders:
        builder.add_node(order, make_faireval_node(order, swapped=order == "swapped_order", k=k, params=call_params))
        builder.add_edge(START, order)
    builder.add_node("calibrate", _pool_node(k, bpc))
    builder.add_edge(list(orders), "calibrate")
    builder.add_edge("calibrate", END)
    return builder
