"""A referee judging alone: ChatEval's template with no discussion (the Single-Agent and Ensemble baselines)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableLambda

from jurygraph.judging.items import as_item
from jurygraph.llm.calls import ModelRequest, agent_node
from jurygraph.nodes.common import node_id, spoken
from jurygraph.nodes.referee import CHATEVAL_PARAMS, ChatEvalTemplate, Referee

SINGLE_AGENT = "Single Agent"


def make_solo_referee_node(referee: Referee | None = None, *, agent: str | None = None,
                           template: ChatEvalTemplate | None = None) -> RunnableLambda:
    """A node where one referee judges the item once, having heard nobody.

    ``referee=None`` is ChatEval's Single-Agent baseline: the released code's single-agent prompt
    (FairEval's style, no history, role or referee lines), unless ``template`` says otherwise. With a
    persona it is one member of the Ensemble baseline: the multi-agent template with the persona in the
    role slot and an empty history, as the code's one-role runs (``multi_role_prompt_but1role``) kept
    the multi-agent prompt. The reply is read with the template's final answer form; the agent's model
    comes from its name, else the "referee" role. Generation parameters: ChatEval's (temperature 0, 512 tokens).
    """
    frame = template or ChatEvalTemplate(single=referee is None)
    name = agent or (referee.name if referee else SINGLE_AGENT)

    def body(state: dict[str, Any]):
        item = as_item(state["item"])
        prompt, form = frame.build(item, referee, [], final=True)
        reply = yield ModelRequest(agent=name, role="referee", messages=[HumanMessage(prompt)], form=form,
                                   params=dict(CHATEVAL_PARAMS))
        message = spoken(reply.message, 1)
        update: dict[str, Any] = {"histories": {name: [message]}, "transcript": [message]}
        if reply.judgment is not None:
            update["judgments"] = {name: reply.judgment.to_state()}
        return update

    return agent_node(body, node_id(name))
