"""Protocol graph factories; each returns an uncompiled ``StateGraph``."""

from jurygraph.graphs.calibration import CalibrationState, calibrate
from jurygraph.graphs.chateval import STRATEGIES, ChatEvalState, create_chateval, strategy_plan, wire_turns
from jurygraph.graphs.debate import DebateState, create_debate
from jurygraph.graphs.ensemble import create_ensemble
from jurygraph.graphs.faireval import create_faireval
from jurygraph.graphs.geval import create_analyze_rate, create_geval
from jurygraph.graphs.refer import ReferState, create_refer
from jurygraph.graphs.single import create_single_agent
from jurygraph.graphs.wiring import chain, edges_of, remove_edge, replace_edges

__all__ = [
    "STRATEGIES",
    "CalibrationState",
    "ChatEvalState",
    "DebateState",
    "ReferState",
    "calibrate",
    "chain",
    "create_analyze_rate",
    "create_chateval",
    "create_debate",
    "create_ensemble",
    "create_faireval",
    "create_geval",
    "create_refer",
    "create_single_agent",
    "edges_of",
    "remove_edge",
    "replace_edges",
    "strategy_plan",
    "wire_turns",
]
