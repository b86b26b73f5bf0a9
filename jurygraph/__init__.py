"""jurygraph: panels of LLM judges as LangGraph state graphs.

>>> from jurygraph import EvalItem, JuryContext, create_chateval
>>> graph = create_chateval(strategy="one-by-one").compile()
"""

from jurygraph.graphs.calibration import calibrate
from jurygraph.graphs.chateval import ChatEvalState, create_chateval
from jurygraph.graphs.debate import DebateState, create_debate
from jurygraph.graphs.ensemble import create_ensemble
from jurygraph.graphs.faireval import create_faireval
from jurygraph.graphs.geval import create_analyze_rate, create_geval
from jurygraph.graphs.refer import ReferState, create_refer
from jurygraph.graphs.single import create_single_agent
from jurygraph.judging.aggregation import aggregate
from jurygraph.judging.items import EvalItem, Scale, TaskKind
from jurygraph.judging.judgments import Judgment, Verdict
from jurygraph.judging.state import JuryState, judgments_of, verdict_of
from jurygraph.llm.models import JuryContext, MissingAPIKey, ModelSpec
from jurygraph.nodes.referee import Referee

__version__ = "0.1.0"

__all__ = [
    "ChatEvalState",
    "DebateState",
    "EvalItem",
    "Judgment",
    "JuryContext",
    "JuryState",
    "MissingAPIKey",
    "ModelSpec",
    "ReferState",
    "Referee",
    "Scale",
    "TaskKind",
    "Verdict",
    "aggregate",
    "calibrate",
    "create_analyze_rate",
    "create_chateval",
    "create_debate",
    "create_ensemble",
    "create_faireval",
    "create_geval",
    "create_refer",
    "create_single_agent",
    "judgments_of",
    "verdict_of",
]
