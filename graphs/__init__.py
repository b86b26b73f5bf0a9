"""Protocol graph factories; each returns an uncompiled ``StateGraph``. Each protocol's module also declares its
``SPEC`` (:mod:`jurygraph.graphs.spec`), which the registry (:mod:`jurygraph.graphs.registry`) finds."""

from jurygraph.graphs.calibration import CalibrationState, calibrate
from jurygraph.graphs.chateval import (
    STRATEGIES,
    ChatEvalState,
    create_chateval,
    create_chateval_devil,
    panel_agrees,
    stop_on_consensus,
    strategy_plan,
    wire_turns,
)
from jurygraph.graphs.debate import DebateState, create_debate
from jurygraph.graphs.devil import add_devil
from jurygraph.graphs.ensemble import create_ensemble
from jurygraph.graphs.escalation import route_doubtful
from jurygraph.graphs.faireval import create_faireval
from jurygraph.graphs.geval import create_analyze_rate, create_geval
from jurygraph.graphs.peer_discussion import add_peer_discussion
from jurygraph.graphs.refer import ReferState, create_refer, create_refer_discussion, create_refer_peer
from jurygraph.graphs.single import create_single_agent
from jurygraph.graphs.wiring import (
    branch_when,
    chain,
    copied,
    edges_of,
    exit_when,
    insert_after,
    remove_edge,
    replace_edges,
    turn_boundaries,
)

__all__ = [
    "STRATEGIES",
    "CalibrationState",
    "ChatEvalState",
    "DebateState",
    "ReferState",
    "add_devil",
    "add_peer_discussion",
    "branch_when",
    "calibrate",
    "chain",
    "copied",
    "create_analyze_rate",
    "create_chateval",
    "create_chateval_devil",
    "create_debate",
    "create_ensemble",
    "create_faireval",
    "create_geval",
    "create_refer",
    "create_refer_discussion",
    "create_refer_peer",
    "create_single_agent",
    "edges_of",
    "exit_when",
    "insert_after",
    "panel_agrees",
    "remove_edge",
    "replace_edges",
    "route_doubtful",
    "stop_on_consensus",
    "strategy_plan",
    "turn_boundaries",
    "wire_turns",
]
