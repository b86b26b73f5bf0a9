"""ReFeR with a peer discussion (jurygraph's own hybrid of ReFeR and ChatEval; neither paper has it).

ReFeR's peers never hear each other. Here, after their independent reviews (ReFeR's phase 1, unchanged),
the peers discuss for ``rounds`` rounds in ChatEval's one-by-one manner: each speaks in turn and hears every
review and message said before it. Then the area chair reads their final reviews (ReFeR's phase 2,
unchanged). It is an edit of edges of ReFeR's graph (:func:`add_peer_discussion`): the barrier
``[peers] -> area_chair`` becomes ``[peers] -> peer_1_r1 -> ... -> peer_K_rR -> area_chair``. The hybrid's factory,
ReFeR's graph with the edit made, is :func:`jurygraph.graphs.refer.create_refer_discussion` (ReFeR's
``--peer-discussion R``, declared in ReFeR's spec).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langgraph.graph import StateGraph

from jurygraph.graphs.wiring import chain, replace_edges
from jurygraph.judging.items import EvalItem
from jurygraph.nodes.refer import Peer, make_peer_node


def add_peer_discussion(builder: StateGraph, panel: Sequence[Peer], rounds: int,
                        choose: Callable[[EvalItem], Any], area_chair: str) -> StateGraph:
    """Insert ``rounds`` rounds of one-by-one discussion between the peers' reviews and ``area_chair`` in a
    ReFeR builder; ``choose`` gives each item's peer prompt (the one the peers reviewed with)."""
    if rounds < 1:
        raise ValueError("a peer discussion needs at least one round (rounds=0 is create_refer)")
    names = [p.name for p in panel]
    speakers = []
    for r in range(1, rounds + 1):
        for peer in panel:
            node = f"{peer.name}_r{r}"
            builder.add_node(node, make_peer_node(peer, choose, discussion_round=r, audience=names))
            speakers.append(node)
    replace_edges(builder, remove=[(n, area_chair) for n in names], add=[(tuple(names), speakers[0])])
    chain(builder, speakers[1:], start=speakers[0], end=area_chair)
    return builder
