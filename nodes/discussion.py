"""What happens between simultaneous rounds: the round's buffer is delivered to every history as is
(Algorithm 2), or through a summarizer (Algorithm 3). Three summarizer variants (``SummaryMode``):

- ``append``: Algorithm 3 as both versions print it (arXiv text): one summary of the round's buffer
  is appended to every referee's history, ``H_n <- H_n + SUM(BUF)``; the raw messages reach nobody.
- ``replace``: the ICLR text (Appendix C, "we replace the chat history slots of all debater agents
  with this summarization"): the summary is cumulative (the previous one is its "Current summary")
  and replaces every history.
- ``code``: the released code (``SummaryMemoryManipulator``, ``llm_eval_multi_agent_con``): every
  referee still receives the round's raw messages, and before it speaks again its own summarizer
  summarises its WHOLE memory (raw messages and its earlier summaries, as ``[sender] : text`` lines),
  with its previous summary as "Current summary"; that summary is appended to its memory only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableLambda

from jurygraph.llm.calls import ModelRequest, agent_node
from jurygraph.nodes.common import render_history, spoken
from jurygraph.nodes.referee import CHATEVAL_PARAMS
from jurygraph.prompts import load_prompt, render

SummaryMode = Literal["append", "replace", "code"]
SUMMARY_MODES: tuple[str, ...] = ("append", "replace", "code")
SUMMARIZER = "Summarizer"


def merge_buffer(old: dict[str, AIMessage] | None, new: dict[str, AIMessage] | None) -> dict[str, AIMessage]:
    """Round buffer: speakers of one superstep add their messages; writing None empties it."""
    if new is None:
        return {}
    return {**(old or {}), **new}


def _round_messages(state: dict[str, Any], speakers: Sequence[str]) -> list[AIMessage]:
    buffer = state.get("round_buffer") or {}
    return [buffer[name] for name in speakers if name in buffer]


def make_delivery_node(speakers: Sequence[str], audience: Sequence[str], name: str) -> RunnableLambda:
    """After a simultaneous round: every listener hears the round's messages, in speaking order."""
    order, listeners = tuple(speakers), tuple(audience)

    def deliver(state: dict[str, Any]) -> dict[str, Any]:
        messages = _round_messages(state, order)
        return {"histories": {n: list(messages) for n in listeners}, "transcript": messages, "round_buffer": None}

    return RunnableLambda(deliver, name=name)


def memory_lines(messages: Sequence[BaseMessage]) -> str:
    """A memory as the released code's summarizer reads it: one ``[sender] : text`` line per message."""
    return "".join(f"[{m.name}] : {m.text}\n" for m in messages)


def make_summarizer_node(speakers: Sequence[str], audience: Sequence[str], turn: int, name: str,
                         mode: SummaryMode = "append", template: str | None = None) -> RunnableLambda:
    """After a simultaneous round: an extra LLM summarises it (see the module docstring for ``mode``)."""
    if mode not in SUMMARY_MODES:
        raise ValueError(f"unknown summary mode {mode!r}; choose one of {', '.join(SUMMARY_MODES)}")
    order, listeners = tuple(speakers), tuple(audience)
    prompt_template = template or load_prompt("chateval/summarizer")

    def request(prompt: str) -> ModelRequest:
        # the code's summarizer llm: temperature 0, max_tokens 512, like the referees
        return ModelRequest(agent=SUMMARIZER, role="summarizer", messages=[HumanMessage(prompt)],
                            params=dict(CHATEVAL_PARAMS))

    def body(state: dict[str, Any]):
        messages = _round_messages(state, order)
        if mode == "code":
            return (yield from per_referee(state, messages))
        previous = state.get("summary", "") if mode == "replace" else ""
        reply = yield request(render(prompt_template, summary=previous, new_lines=render_history(messages)))
        summary = spoken(reply.message, turn)
        histories: dict[str, Any] = (
            {n: {"replace": [summary]} for n in listeners} if mode == "replace"
            else {n: [summary] for n in listeners}
        )
        transcript: list[BaseMessage] = [*messages, summary]
        return {"histories": histories, "transcript": transcript, "round_buffer": None, "summary": summary.text}

    def per_referee(state: dict[str, Any], messages: list[AIMessage]):
        histories = state.get("histories") or {}
        previous = state.get("summaries") or {}
        memories = {n: [*histories.get(n, []), *messages] for n in listeners}
        replies = yield [request(render(prompt_template, summary=previous.get(n, ""),
                                        new_lines=memory_lines(memories[n]))) for n in listeners]
        summaries = {n: spoken(reply.message, turn) for n, reply in zip(listeners, replies, strict=True)}
        return {"histories": {n: [*messages, summaries[n]] for n in listeners},
                "transcript": [*messages, *summaries.values()], "round_buffer": None,
                "summaries": {n: s.text for n, s in summaries.items()}}

    return agent_node(body, name)
