"""ReFeR with a peer discussion (jurygraph's own hybrid of ReFeR and ChatEval; neither paper has it).

ReFeR's peers never hear each other. Here, after their independent reviews (ReFeR's phase 1, unchanged),
the peers discuss for ``rounds`` rounds in ChatEval's one-by-one manner: each speaks in turn and hears every
review and message said before it. Then the area chair reads their final reviews (ReFeR's phase 2,
unchanged). It is an edit of edges of :func:`create_refer`'s graph: the barrier ``[peers] -> area_chair``
becomes ``[peers] -> peer_1_r1 -> ... -> peer_K_rR -> area_chair``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.graph import StateGraph

from jurygraph.graphs.refer import AREA_CHAIR, create_refer, refer_peers
from jurygraph.graphs.wiring import chain, replace_edges
from jurygraph.judging.items import EvalItem
from jurygraph.nodes.refer import Peer, make_peer_node, template_for


def create_refer_discussion(*, rounds: int = 1, peers: int | Sequence[str | Peer] = 3,
                            **refer_options: Any) -> StateGraph:
    """An uncompiled ReFeR graph whose peers discuss ``rounds`` rounds (one-by-one) before the area chair.

    The other options (``variant``, ``samples``, ``feedback``, ``template``, ``prompt_file``, ...) are
    :func:`create_refer`'s. A discussion turn uses the peer's own prompt, parameters and model, with the
    discussion so far appended (``prompts/refer/discussion.txt``); its judgment replaces the peer's earlier
    one, so the area chair reads each peer's last review.
    """
    if rounds < 1:
        raise ValueError("a peer discussion needs at least one round (rounds=0 is create_refer)")
    builder = create_refer(peers=peers, **refer_options)
    panel = refer_peers(peers)
    names = [p.name for p in panel]
    template, prompt_file = refer_options.get("template"), refer_options.get("prompt_file")

    def choose(item: EvalItem) -> Any:
        return template_for(item, template, prompt_file)

    speakers = []
    for r in range(1, rounds + 1):
        for peer in panel:
            node = f"{peer.name}_r{r}"
            builder.add_node(node, make_peer_node(peer, choose, discussion_round=r, audience=names))
            speakers.append(node)
    replace_edges(builder, remove=[(n, AREA_CHAIR) for n in names], add=[(tuple(names), speakers[0])])
    chain(builder, speakers[1:], start=speakers[0], end=AREA_CHAIR)
    return builder
