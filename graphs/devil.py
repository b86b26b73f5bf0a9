"""ChatEval with a devil's advocate (jurygraph's own hybrid of ChatEval and DEBATE; neither paper has it).

ChatEval's panel discusses as usual (any strategy); at every hand-over from one turn to the next an edit of
edges inserts a DEBATE-style Critic (:func:`~jurygraph.nodes.devil.make_devil_node`) that objects to the
panel's current majority, and every referee hears the objection in the next turn. Its reply is read with
DEBATE's NO ISSUE test: NO ISSUE ends the discussion (a conditional edge to the aggregator), as it ends
DEBATE's loop. Referees answer in the final-turn form every turn, so the devil has a majority to object to.
With ``stop_when="consensus"`` the panel's agreement is checked first, and an agreeing panel stops before
the devil speaks. After the last turn nobody speaks again, so the devil speaks after turns 1..T-1.

This module is the edit (:func:`add_devil`); the hybrid's factory, ChatEval's graph with the edit made, is
:func:`jurygraph.graphs.chateval.create_chateval_devil` (ChatEval's ``--devil``, declared in ChatEval's spec).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.graph import StateGraph

from jurygraph.graphs.wiring import exit_when, insert_after, turn_boundaries, turn_of
from jurygraph.nodes.debate import CriticPersona, NoIssueRule
from jurygraph.nodes.devil import make_devil_node


def devil_said_no_issue(state: dict[str, Any]) -> bool:
    """The devil's latest review passed the NO ISSUE test."""
    reviews = state.get("reviews") or []
    return bool(reviews) and bool(reviews[-1].get("no_issue"))


def add_devil(builder: StateGraph, referees: Sequence[str], *, critic: str | CriticPersona = "strict",
              no_issue_rule: NoIssueRule | str = "paper", exit_to: str = "aggregate") -> list[str]:
    """Insert a devil's advocate at every turn hand-over of a ChatEval builder; returns the nodes that ended
    the turns before the insertion (where an early stop would go)."""
    ends = [end for end, _ in turn_boundaries(builder)]
    for end in ends:
        devil = f"devil_t{turn_of(end)}"
        insert_after(builder, end, devil, make_devil_node(referees, turn_of(end) or 0, critic=critic,
                                                          no_issue_rule=no_issue_rule, name=devil))
        exit_when(builder, devil, devil_said_no_issue, exit_to, label="NO ISSUE")
    return ends
