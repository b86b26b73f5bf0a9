"""ChatEval's Single-Agent baseline: one referee, ChatEval's single-agent prompt.

The papers say the multi-agent template was used "except that we ignore some slot" (arXiv footnote 3;
ICLR Table 4: "ignore the chat history and role description slot"); blanking the slots leaves text that
still addresses other referees. The released code's single-agent config instead has its own prompt in
FairEval's style (no history, role or referee lines, the answer form inside): that is the default
(``prompts/chateval/single_faireval.txt``; the score templates ``single_*.txt`` are jurygraph's own in
the same shape). Pass ``template=`` for another. The code ran it at temperature 0 with 512 tokens. The
paper evaluates it with position calibration; wrap the graph with
:func:`jurygraph.graphs.calibration.calibrate` for that.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph

from jurygraph.judging.state import JuryState
from jurygraph.llm.models import JuryContext
from jurygraph.nodes.aggregator import make_aggregator_node
from jurygraph.nodes.common import node_id
from jurygraph.nodes.referee import ChatEvalTemplate
from jurygraph.nodes.solo import SINGLE_AGENT, make_solo_referee_node


def create_single_agent(
    *,
    agent: str = SINGLE_AGENT,
    template: str | None = None,
    final_prompt: str | None = None,
    state_schema: type[Any] = JuryState,
    context_schema: type[Any] = JuryContext,
) -> StateGraph:
    """An uncompiled graph where one referee judges the item (pairwise or score) with ChatEval's single-agent prompt.

    The model comes from the runtime context by ``agent`` name, else the ``"referee"`` role. The verdict
    is that referee's judgment (a missing judgment gives a missing verdict, never a default).
    """
    builder = StateGraph(state_schema, context_schema=context_schema)
    node = node_id(agent)
    frame = ChatEvalTemplate(template, final_prompt, single=True)
    builder.add_node(node, make_solo_referee_node(None, agent=agent, template=frame))
    builder.add_node("aggregate", make_aggregator_node([agent]))
    builder.add_edge(START, node)
    builder.add_edge(node, "aggregate")
    builder.add_edge("aggregate", END)
    return builder
