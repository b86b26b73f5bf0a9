"""jurygraph: panels of LLM judges as LangGraph state graphs.

>>> from jurygraph import EvalItem, JuryContext, create_chateval
>>> graph = create_chateval(strategy="one-by-one").compile()

The public surface is this module: every name below is imported on first use, so ``import jurygraph`` stays
cheap. Deeper module paths (``jurygraph.judging.items``...) are the layout, not the interface; the modules meant
for users besides this one are ``jurygraph.graphs`` (factories and wiring helpers), ``jurygraph.conversations``
(conversation items and agent trajectories: ``from_thread``, ``match_first``...) and ``jurygraph.testing`` (fake
chat models and a fake OpenAI-compatible server).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jurygraph.cli.diagrams import png_bytes, render_graph
    from jurygraph.evaluators.evaluator import PanelEvaluator, create_panel_evaluator
    from jurygraph.graphs.calibration import calibrate
    from jurygraph.graphs.chateval import ChatEvalState, create_chateval
    from jurygraph.graphs.debate import DebateState, create_debate
    from jurygraph.graphs.ensemble import create_ensemble
    from jurygraph.graphs.escalation import route_doubtful
    from jurygraph.graphs.faireval import create_faireval
    from jurygraph.graphs.geval import create_analyze_rate, create_geval
    from jurygraph.graphs.refer import ReferState, create_refer
    from jurygraph.graphs.single import create_single_agent
    from jurygraph.judging.aggregation import aggregate
    from jurygraph.judging.doubt import doubt_signals
    from jurygraph.judging.items import EvalItem, Scale, TaskKind
    from jurygraph.judging.judgments import Judgment, Verdict
    from jurygraph.judging.state import JuryState, judgments_of, verdict_of
    from jurygraph.llm.models import JuryContext, MissingAPIKey, ModelSpec
    from jurygraph.measuring.metaeval import MethodResult, metaeval
    from jurygraph.nodes.referee import Referee
    from jurygraph.running.batch import BatchOptions
    from jurygraph.running.budget import Budget, Spend
    from jurygraph.running.datasets import Dataset, DatasetError, load_dataset
    from jurygraph.running.distributed import RayOptions
    from jurygraph.running.estimate import Estimate, estimate
    from jurygraph.running.run import RunSummary
    from jurygraph.running.rundir import read_results
    from jurygraph.running.runner import arun, run

__version__ = "0.1.0"

# public name -> the module that defines it
_HOMES: dict[str, str] = {
    **dict.fromkeys(["png_bytes", "render_graph"], "jurygraph.cli.diagrams"),
    **dict.fromkeys(["PanelEvaluator", "create_panel_evaluator"], "jurygraph.evaluators.evaluator"),
    "calibrate": "jurygraph.graphs.calibration",
    **dict.fromkeys(["ChatEvalState", "create_chateval"], "jurygraph.graphs.chateval"),
    **dict.fromkeys(["DebateState", "create_debate"], "jurygraph.graphs.debate"),
    "create_ensemble": "jurygraph.graphs.ensemble",
    "route_doubtful": "jurygraph.graphs.escalation",
    "create_faireval": "jurygraph.graphs.faireval",
    **dict.fromkeys(["create_analyze_rate", "create_geval"], "jurygraph.graphs.geval"),
    **dict.fromkeys(["ReferState", "create_refer"], "jurygraph.graphs.refer"),
    "create_single_agent": "jurygraph.graphs.single",
    "aggregate": "jurygraph.judging.aggregation",
    "doubt_signals": "jurygraph.judging.doubt",
    **dict.fromkeys(["EvalItem", "Scale", "TaskKind"], "jurygraph.judging.items"),
    **dict.fromkeys(["Judgment", "Verdict"], "jurygraph.judging.judgments"),
    **dict.fromkeys(["JuryState", "judgments_of", "verdict_of"], "jurygraph.judging.state"),
    **dict.fromkeys(["JuryContext", "MissingAPIKey", "ModelSpec"], "jurygraph.llm.models"),
    **dict.fromkeys(["MethodResult", "metaeval"], "jurygraph.measuring.metaeval"),
    "Referee": "jurygraph.nodes.referee",
    "BatchOptions": "jurygraph.running.batch",
    **dict.fromkeys(["Budget", "Spend"], "jurygraph.running.budget"),
    **dict.fromkeys(["Dataset", "DatasetError", "load_dataset"], "jurygraph.running.datasets"),
    **dict.fromkeys(["Estimate", "estimate"], "jurygraph.running.estimate"),
    "RayOptions": "jurygraph.running.distributed",
    "read_results": "jurygraph.running.rundir",
    "RunSummary": "jurygraph.running.run",
    **dict.fromkeys(["arun", "run"], "jurygraph.running.runner"),
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'jurygraph' has no attribute {name!r}")
    value = getattr(import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
