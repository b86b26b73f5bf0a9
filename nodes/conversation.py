"""What every protocol's conversation templates are filled with: the conversation as text (roles, tool calls and
results, system messages marked, the turn judged marked), within the run's context budget, and the rubric of the
item's aspect.

The slots (:func:`conversation_slots`): ``conversation`` (the rendered conversation, or the two of a pairwise item
with their shared prefix), ``judged`` (what is judged: the conversation, or the turn marked in it), ``aspect``,
``aspect_title``, ``rubric`` (the criterion), ``criteria`` (``Title (scale) - criterion``, as G-Eval writes it),
``steps`` (the rubric's evaluation steps, numbered), ``scale``, ``scale_low``, ``scale_high``, ``task`` (the first
user message) and ``turn``.

Budget: ``JuryContext.max_context_tokens`` (``--max-context-tokens``) bounds the rendered conversation text, counted
with :data:`jurygraph.llm.tokens.APPROXIMATE` (UTF-8 bytes / 4.8): the same count on every machine and for every
model, so a prompt never depends on whether a tokenizer's file is cached (a cache key and a resumed run stay the
same). Over budget, the middle messages are elided, and the text says how many; the task and the turn judged never
are (:func:`jurygraph.judging.conversations.fit_blocks`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jurygraph.judging.aspects import aspect_title
from jurygraph.judging.conversations import (
    Block,
    Message,
    assistant_turns,
    conversation_block,
    fit_blocks,
)
from jurygraph.judging.items import EvalItem, Scale, TaskKind, format_number
from jurygraph.llm.calls import current_context
from jurygraph.llm.tokens import APPROXIMATE
from jurygraph.prompts import load_json, render

RUBRICS = "conversation/rubrics"
DEFAULT_ASPECT = "helpfulness"
CUSTOM_ASPECT = "overall quality"  # a --rubric FILE on an item without an aspect
CONVERSATION_SCALE = Scale(low=1, high=10)  # a pairwise conversation item without its own scale (FairEval's)


@dataclass(frozen=True)
class Rubric:
    """The criterion a conversation is judged on: its name in the templates, its definition, its steps."""

    aspect: str
    definition: str
    steps: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        return aspect_title(self.aspect)


def builtin_rubrics() -> list[str]:
    """The aspects with a built-in conversation rubric."""
    return [key for key in load_json(RUBRICS) if not key.startswith("_")]


def rubric_for(item: EvalItem, custom: str | None = None) -> Rubric:
    """The item's rubric: ``custom`` text (``--rubric FILE``) when given, else the built-in rubric of the item's
    aspect (default helpfulness); an aspect without one is an error naming the item."""
    if custom is not None:
        return Rubric(item.aspect or CUSTOM_ASPECT, custom.strip())
    key = item.aspect or DEFAULT_ASPECT
    table = load_json(RUBRICS)
    if key not in table or key.startswith("_"):
        raise ValueError(f"item {item.id!r}: no built-in conversation rubric for aspect {key!r} (built in: "
                         f"{', '.join(builtin_rubrics())}); pass your own with --rubric FILE "
                         "(JuryContext(rubric=...))")
    entry = table[key]
    return Rubric(entry["name"], entry["definition"], tuple(entry["steps"]))


def judged_span(messages: list[Message], turn: int | None) -> tuple[int, int] | None:
    """The message range of assistant turn ``turn`` (1-based), or None for the whole conversation."""
    return None if turn is None else assistant_turns(messages)[turn - 1]


def conversation_blocks(item: EvalItem) -> list[Block]:
    """The item's conversation(s) as blocks: a score item's conversation (up to the end of the turn judged, the
    turn marked); a pairwise item's shared prefix and two continuations, or its two whole conversations."""
    if item.task is TaskKind.SCORE:
        messages = list(item.messages or [])
        span = judged_span(messages, item.turn)
        shown = messages[:span[1]] if span else messages
        return [conversation_block(shown, judged=span, header="[The Start of the Conversation]",
                                   footer="[The End of the Conversation]", steps=None if span else item.steps)]
    prefix = list(item.messages or [])
    blocks = []
    if prefix:
        blocks.append(conversation_block(prefix, header="[The Start of the Conversation So Far]",
                                         footer="[The End of the Conversation So Far]"))
    for number, (own, steps) in enumerate(((item.messages_1, item.steps_1), (item.messages_2, item.steps_2)), 1):
        whole = [*prefix, *(own or [])]
        span = judged_span(whole, item.turn)
        shown = whole[:span[1]] if span else whole
        what = "Continuation" if prefix else "Conversation"
        blocks.append(conversation_block(shown, start=len(prefix), judged=span, head=not prefix, prefix=prefix,
                                         header=f"[The Start of Assistant {number}’s {what}]",
                                         footer=f"[The End of Assistant {number}’s {what}]",
                                         steps=None if span else steps))
    return blocks


def conversation_text(item: EvalItem, max_context_tokens: int | None = None) -> str:
    """The ``${conversation}`` slot: the item's conversation(s), whole when they fit ``max_context_tokens``, else
    with their middle messages elided and said so."""
    return fit_blocks(conversation_blocks(item), max_context_tokens, APPROXIMATE.text, item=item.id)


def conversation_slots(item: EvalItem, *, scale: Scale | None = None) -> dict[str, Any]:
    """Every slot a conversation template may use, from the item and the run's context (its rubric and its
    context budget). ``scale``: the scale the protocol reads the reply on (the item's by default)."""
    context = current_context()
    rubric = rubric_for(item, context.rubric)
    scale = scale or item.scale or CONVERSATION_SCALE
    phrases = load_json("conversation/frame")[item.task.value]
    judged = render(phrases["whole" if item.turn is None else "turn"], turn=item.turn or "")
    steps = "\n\n".join(f"{i}. {step}" for i, step in enumerate(rubric.steps, 1)) or \
        "1. Read the conversation carefully.\n\n2. Judge it on the criterion above."
    return {
        "conversation": conversation_text(item, context.max_context_tokens), "judged": judged,
        "aspect": rubric.aspect, "aspect_title": rubric.title, "rubric": rubric.definition,
        "criteria": f"{rubric.title} ({scale}) - {rubric.definition}", "steps": steps, "scale": str(scale),
        "scale_low": format_number(scale.low), "scale_high": format_number(scale.high),
        "task": item.question or "", "turn": item.turn or "",
    }


__all__ = ["CONVERSATION_SCALE", "DEFAULT_ASPECT", "Rubric", "builtin_rubrics", "conversation_blocks",
           "conversation_slots", "conversation_text", "judged_span", "rubric_for"]
