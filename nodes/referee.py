"""ChatEval's referee: one agent speaking once, from the history it has heard, in ChatEval's FairEval template
(the paper's) or a scoring template in its frame (jurygraph's own for Topical-Chat, SummEval and other items)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableLambda

from jurygraph.judging.aggregation import CODE_ATTEMPTS, UNREADABLE_RULES, UnreadableRule
from jurygraph.judging.aspects import Aspect, get_aspect, scale_of
from jurygraph.judging.extraction import AnswerForm
from jurygraph.judging.items import EvalItem, TaskKind, as_item, format_number
from jurygraph.llm.calls import ModelRequest, agent_node
from jurygraph.nodes.common import node_id, render_history, spoken
from jurygraph.nodes.conversation import conversation_slots
from jurygraph.nodes.faireval import FAIREVAL_SCALE
from jurygraph.prompts import load_json, load_prompt, render, select_template

PERSONA_ORDER = ("General Public", "Critic", "News Author", "Psychologist", "Scientist")
# ChatEval's generation parameters: the paper's temperature 0, and the released configs' llm block
# (temperature: 0, max_tokens: 512) for referees, the single agent and the summarizer alike
CHATEVAL_PARAMS: dict[str, Any] = {"temperature": 0, "max_tokens": 512}


@dataclass(frozen=True)
class Referee:
    """A referee: its name (also its key in the models mapping) and its role description (persona)."""

    name: str
    role_description: str

    @classmethod
    def persona(cls, name: str) -> Referee:
        """One of the paper's personas: General Public, Critic, News Author, Psychologist, Scientist, Annotator."""
        table = load_json("chateval/personas")
        if name not in table or name.startswith("_"):
            known = ", ".join(k for k in table if not k.startswith("_"))
            raise KeyError(f"unknown persona {name!r}; the paper's personas are {known} (or pass a Referee)")
        return cls(name, table[name])


@dataclass(frozen=True)
class ChatEvalTemplate:
    """ChatEval's prompt frame for an item: FairEval's pairwise template (the paper's), or a scoring
    template in the same frame (Topical-Chat, SummEval, or a generic one: jurygraph's own, see their
    ``#:`` headers). ``template`` overrides the frame's text.

    ``single``: the single-agent baseline's frame: the released code's single-agent prompt (FairEval's
    style, the answer form inside, no history, role or referee lines; ``prompts/chateval/single_*.txt``).
    """

    template: str | None = None
    final_prompt: str | None = None
    single: bool = False

    def frame(self, item: EvalItem) -> tuple[str, str, AnswerForm, dict[str, Any]]:
        """(template, final-turn answer form text, how to read it, the item's slots)."""
        if item.conversational and item.task in (TaskKind.PAIRWISE, TaskKind.SCORE):
            return self._conversation_frame(item)
        if item.task is TaskKind.PAIRWISE:
            final = self.final_prompt or load_prompt(self._name("final_pairwise"))
            slots = {"source_text": item.question, "compared_text_one": item.response_1,
                     "compared_text_two": item.response_2}
            scale = item.scale or FAIREVAL_SCALE
            template = self.template or load_prompt(self._builtin(TaskKind.PAIRWISE, None))
            return template, final, AnswerForm(TaskKind.PAIRWISE, final, scale=scale), slots
        if item.task is TaskKind.SCORE:
            return self._score_frame(item)
        raise ValueError(f"item {item.id!r}: ChatEval judges pairwise and score items, not {item.task.value}")

    def _name(self, final: str) -> str:
        """The answer form's file: the single agent's drops the line about other referees."""
        return f"chateval/{final}_single" if self.single else f"chateval/{final}"

    def _score_frame(self, item: EvalItem) -> tuple[str, str, AnswerForm, dict[str, Any]]:
        aspect_name = item.aspect or "overall quality"
        aspect = get_aspect(item.dataset, aspect_name) if item.aspect else None
        scale = scale_of(item, aspect)
        target = aspect.target if aspect else "response"
        # a benchmark's template has its own slots for the context (Topical-Chat's fact); the generic one
        # shows every text the item has as the source
        if aspect:
            source, extra = item.source or "", {"fact": item.context or ""}
        else:
            source, extra = "\n".join(p for p in (item.source, item.context, item.question) if p), {}
        final = self.final_prompt or render(load_prompt(self._name("final_score")), aspect=aspect_name, target=target)
        slots = {"source_text": source, "generated_text": item.response, "aspect": aspect_name,
                 "aspect_definition": aspect.definition if aspect else "",
                 "scale_low": format_number(scale.low), "scale_high": format_number(scale.high), **extra}
        form = AnswerForm(TaskKind.SCORE, final, scale=scale, labels=(aspect_name, f"the score of the {target}"))
        return self.template or load_prompt(self._builtin(TaskKind.SCORE, aspect)), final, form, slots

    def _conversation_frame(self, item: EvalItem) -> tuple[str, str, AnswerForm, dict[str, Any]]:
        """A conversation item's frame: jurygraph's conversation templates, the rubric of its aspect."""
        pairwise = item.task is TaskKind.PAIRWISE
        scale = item.scale or FAIREVAL_SCALE if pairwise else scale_of(item, None)
        slots = conversation_slots(item, scale=scale)
        if pairwise:
            final = self.final_prompt or load_prompt(self._name("final_pairwise"))
            form = AnswerForm(TaskKind.PAIRWISE, final, scale=scale)
        else:
            final = self.final_prompt or render(load_prompt(self._name("final_score")), aspect=slots["aspect"],
                                                target="assistant")
            form = AnswerForm(TaskKind.SCORE, final, scale=scale,
                              labels=(slots["aspect"], "the score of the assistant"))
        return self.template or load_prompt(self._builtin(item.task, None, conversation=True)), final, form, slots

    def _builtin(self, task: TaskKind, aspect: Aspect | None, *, conversation: bool = False) -> str:
        """The built-in template's name for the item, from the table of templates."""
        name = select_template("chateval-single" if self.single else "chateval", task=task.value,
                               dataset=aspect.dataset if aspect else None, conversation=conversation)
        assert name is not None  # the table has one for every pairwise and score item
        return name

    def build(self, item: EvalItem, referee: Referee | None, history: Sequence[BaseMessage],
              final: bool) -> tuple[str, AnswerForm | None]:
        """The prompt a referee sees, and the answer form when this is its final turn.

        ``referee=None`` with a multi-agent frame leaves the role and name slots empty; the single-agent
        baseline uses ``single=True`` (its own template, which has no such slots).
        """
        template, final_text, form, slots = self.frame(item)
        prompt = render(
            template,
            **slots,
            chat_history=render_history(history),
            role_description=referee.role_description if referee else "",
            agent_name=referee.name if referee else "",
            final_prompt=final_text if final else "",
        )
        return prompt.rstrip(), (form if final else None)



def make_referee_node(referee: Referee, turn: int, *, final: bool, audience: Sequence[str],
                      buffered: bool, template: ChatEvalTemplate | None = None,
                      record_round: bool = False, unreadable: UnreadableRule | str = "missing") -> RunnableLambda:
    """A node where ``referee`` speaks at ``turn``.

    ``buffered`` (simultaneous talk): the message goes to the round buffer and is delivered to the
    ``audience`` after the round; otherwise it is appended to the audience's histories at once
    (one-by-one). On the ``final`` turn the referee's judgment is read from its reply. ``record_round``
    (judgments asked every round) also appends it, with its round, to ``round_judgments``: ``judgments``
    keeps the latest only, and the panel diagnostics read how each referee moved between rounds.

    An unreadable judgment (``unreadable``): ``"missing"`` (jurygraph) re-asks once with the format reminder,
    then records it missing; ``"code"`` (the released code, ``BaseAgent.max_retry``) sends the same prompt again,
    up to :data:`~jurygraph.judging.aggregation.CODE_ATTEMPTS` requests in all, and if none can be read the
    referee's message is empty, as the code's, and its judgment missing (its raw text the last reply).
    """
    if unreadable not in UNREADABLE_RULES:
        raise ValueError(f"unknown unreadable-judgment rule {unreadable!r}; "
                         f"choose one of {', '.join(UNREADABLE_RULES)}")
    frame = template or ChatEvalTemplate()
    listeners = tuple(audience)

    def body(state: dict[str, Any]):
        item = as_item(state["item"])
        history = (state.get("histories") or {}).get(referee.name, [])
        prompt, form = frame.build(item, referee, history, final)
        request = ModelRequest(agent=referee.name, role="referee", messages=[HumanMessage(prompt)], form=form,
                               params=dict(CHATEVAL_PARAMS))
        if form is None or unreadable == "missing":
            reply = yield request
            said = reply.message
        else:  # the same prompt again, each attempt its own cache entry
            for attempt in range(CODE_ATTEMPTS):
                reply = yield replace(request, reasks=0, sample_index=attempt)
                if reply.judgment is not None and not reply.judgment.missing:
                    break
            if reply.judgment is not None and reply.judgment.missing:  # none could be read: as the code, nothing said
                reply.judgment = reply.judgment.model_copy(update={"attempts": CODE_ATTEMPTS})
                said = reply.message.model_copy(update={"content": ""})
            else:
                said = reply.message
        message = spoken(said, turn)
        update: dict[str, Any] = {"turn": turn}
        if buffered:
            update["round_buffer"] = {referee.name: message}
        else:
            update["histories"] = {name: [message] for name in listeners}
            update["transcript"] = [message]
        if final and reply.judgment is not None:
            judged = reply.judgment.to_state()
            update["judgments"] = {referee.name: judged}
            if record_round:
                update["round_judgments"] = [round_judgment(judged, turn)]
        return update

    return agent_node(body, f"{node_id(referee.name)}_t{turn}")


_ROUND_VALUES = ("agent", "missing", "score", "score_1", "score_2", "label", "answer")


def round_judgment(judgment: dict[str, Any], turn: int) -> dict[str, Any]:
    """A judgment as one round's record: its values without the reply's text (kept in the transcript)."""
    return {"round": turn, **{key: judgment[key] for key in _ROUND_VALUES if key in judgment}}


def chateval_personas(personas: Sequence[str | Referee] | str | None, n: int | None) -> list[Referee]:
    """Resolve the panel: paper persona names, custom Referees, or 'same-role' (n Annotators)."""
    if personas == "same-role":
        count = n or 2
        text = Referee.persona("Annotator").role_description
        return [Referee(f"Annotator {i}", text) for i in range(1, count + 1)]
    if isinstance(personas, str):
        personas = [p.strip() for p in personas.split(",") if p.strip()]
    if personas is None:
        count = 2 if n is None else n
        if not 1 <= count <= len(PERSONA_ORDER):
            raise ValueError(f"the paper has {len(PERSONA_ORDER)} personas; for {count} referees pass personas=")
        personas = list(PERSONA_ORDER[:count])
    panel = [p if isinstance(p, Referee) else Referee.persona(p) for p in personas]
    if n is not None and n != len(panel):
        raise ValueError(f"{n} referees requested but {len(panel)} personas given")
    names = [r.name for r in panel]
    if len(set(names)) != len(names):
        raise ValueError(f"referee names must be distinct: {names}")
    if not panel:
        raise ValueError("a panel needs at least one referee")
    return panel


__all__ = ["CHATEVAL_PARAMS", "ChatEvalTemplate", "Referee", "chateval_personas", "make_referee_node",
           "round_judgment"]
