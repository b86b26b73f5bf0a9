"""A devil's advocate for a ChatEval panel (jurygraph's own hybrid, not in either paper): after a round, a
DEBATE-style Critic (its system message is one of DEBATE's Critic personas, strictly negative by default)
reads the item, the discussion so far and the referees' latest judgments, and objects to the current majority.
Its objection is heard by every referee; a reply that passes DEBATE's NO ISSUE test
(:func:`~jurygraph.nodes.debate.ends_debate`) ends the discussion (the graph's conditional edge reads
``reviews``). The request text is ``prompts/debate/devil_chateval.txt`` (jurygraph's own)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda

from jurygraph.judging.aggregation import aggregate
from jurygraph.judging.items import EvalItem, TaskKind, as_item, format_number
from jurygraph.judging.judgments import Judgment
from jurygraph.judging.state import judgments_of
from jurygraph.llm.calls import ModelRequest, agent_node
from jurygraph.nodes.common import render_history, spoken
from jurygraph.nodes.conversation import conversation_slots
from jurygraph.nodes.debate import DEBATE_PARAMS, CriticPersona, NoIssueRule, ends_debate
from jurygraph.prompts import load_prompt, render

DEVIL = "Devil's Advocate"  # not "Critic": that is one of ChatEval's referee personas


def item_text(item: EvalItem) -> str:
    """The texts under judgment, labelled, as the devil reads them (a conversation as the referees read it)."""
    if item.conversational:
        slots = conversation_slots(item)
        return f"{slots['conversation']}\n\nAspect: {slots['aspect']} ({slots['judged']})"
    if item.task is TaskKind.PAIRWISE:
        parts = [("Question", item.question), ("Assistant 1", item.response_1), ("Assistant 2", item.response_2)]
    else:
        parts = [("Source", item.source), ("Context", item.context), ("Question", item.question),
                 ("Response", item.response), ("Aspect", item.aspect)]
    return "\n\n".join(f"{name}: {text}" for name, text in parts if text)


def judgment_line(judgment: Judgment) -> str:
    if judgment.missing:
        return "no readable judgment"
    if judgment.kind is TaskKind.PAIRWISE and judgment.score_1 is not None and judgment.score_2 is not None:
        return f"Assistant 1: {format_number(judgment.score_1)}, Assistant 2: {format_number(judgment.score_2)}"
    if judgment.score is not None:
        return f"score {format_number(judgment.score)}"
    return str(judgment.label or judgment.answer)


def majority_text(judgments: Sequence[Judgment], kind: TaskKind) -> str:
    """The panel's current position: the winner by vote (pairwise), the mean score, or the majority answer."""
    verdict = aggregate(judgments, kind, "majority")
    if verdict.missing:
        return "none yet (no readable judgment)"
    if kind is TaskKind.PAIRWISE:
        return {"1": "Assistant 1 is better", "2": "Assistant 2 is better"}.get(str(verdict.label), "a tie")
    if kind is TaskKind.SCORE and verdict.score is not None:
        return f"a score of {format_number(verdict.score)}"
    return str(verdict.answer or "no majority")


def make_devil_node(referees: Sequence[str], turn: int, *, critic: str | CriticPersona = "strict",
                    no_issue_rule: NoIssueRule | str = "paper", name: str | None = None) -> RunnableLambda:
    """The devil's advocate after ``turn``: one request (DEBATE's Critic parameters, temperature 0, top_p 1);
    the objection goes into every referee's history and the transcript, the NO ISSUE test into ``reviews``."""
    persona = CriticPersona.of(critic)
    panel = tuple(referees)
    template = load_prompt("debate/devil_chateval")

    def body(state: dict[str, Any]):
        item = as_item(state["item"])
        stored = judgments_of(state)
        latest = [stored.get(n) or Judgment.missing_for(n, item.task, "", "no judgment yet", 0) for n in panel]
        prompt = render(template, item=item_text(item), chat_history=render_history(state.get("transcript") or []),
                        judgments="".join(f"[{j.agent}]: {judgment_line(j)}\n" for j in latest),
                        majority=majority_text(latest, item.task))
        chat = [SystemMessage(persona.text), HumanMessage(prompt)]
        reply = yield ModelRequest(agent=DEVIL, role="critic", messages=chat, params=dict(DEBATE_PARAMS))
        message = spoken(AIMessage(reply.message.text, name=DEVIL), turn)
        return {"histories": {**{n: [message] for n in panel}, DEVIL: [*chat, message]}, "transcript": [message],
                "reviews": [{"turn": turn, "no_issue": ends_debate(message.text, no_issue_rule)}]}

    return agent_node(body, name or f"devil_t{turn}")


__all__ = ["DEVIL", "item_text", "majority_text", "make_devil_node"]
