"""ReFeR's agents: peers, who each review the item independently, and the area chair, who reads the item
and the peers' evaluations and gives the final analysis and rating (Narsupalli et al., Algorithm 1, App. B).

Prompts are the paper's (Appendix N), one file per role and task in ``prompts/refer/``; the table
``prompts/refer/templates.json`` says which files serve which dataset/aspect or task, and how one peer's
evaluation is written into the area chair's prompt.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from langchain_core.exceptions import ModelAuthenticationError, ModelNotFoundError, ModelPermissionDeniedError
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableLambda

from jurygraph.judging.aggregation import aggregate
from jurygraph.judging.aspects import aspect_title, get_aspect
from jurygraph.judging.benchmarks import canonical
from jurygraph.judging.extraction import AnswerForm
from jurygraph.judging.items import EvalItem, Scale, TaskKind, as_item, format_score
from jurygraph.judging.judgments import Judgment, Verdict
from jurygraph.judging.reasoning import agreement, format_options, is_correct, options_from_question
from jurygraph.llm.calls import ModelReply, ModelRequest, agent_node
from jurygraph.llm.models import MissingAPIKey
from jurygraph.nodes.common import render_history, spoken
from jurygraph.nodes.conversation import conversation_slots
from jurygraph.prompts import load_json, load_prompt, load_prompt_file, render, select_template

Feedback = Literal["score", "comment", "both"]
FEEDBACK_MODES: tuple[str, ...] = ("score", "comment", "both")
# a peer whose judgment is missing: "blank" = the released scripts' " " in its place, the count kept; "omit" = left
# out of the area chair's prompt, which then names one model fewer
MissingPeers = Literal["blank", "omit"]
MISSING_PEERS: tuple[str, ...] = ("blank", "omit")
BLANK_EVALUATION = " "
ORDINALS = ("First", "Second", "Third", "Fourth", "Fifth", "Sixth", "Seventh", "Eighth", "Ninth", "Tenth")
NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
# errors that mean the run is misconfigured (no key, a wrong key or model name, no model for the agent):
# a peer must not hide them as a missing judgment; anything else after the client's retries is a failing peer
CONFIGURATION_ERRORS: tuple[type[BaseException], ...] = (
    MissingAPIKey, LookupError, TypeError, ModelAuthenticationError, ModelPermissionDeniedError, ModelNotFoundError)
# a custom prompt file (e.g. written by auto-prompt) serves both roles; the area chair's copy gets this intro
CUSTOM_PEER_INTRO = ("Alongside your evaluation, you will also receive initial evaluations from ${n_peers} large "
                     "language models, referred to as the assistants’ evaluations. Use them as a guide, "
                     "critically assessing the assistants’ inputs.\n\n")


@dataclass(frozen=True)
class Peer:
    """A peer reviewer: its name (node name and key in the models mapping) and call parameter overrides."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReferTemplate:
    """The peer and area-chair templates for one task, and how to read and pass on their answers."""

    key: str
    peer: str
    area_chair: str
    peer_line: str
    separator: str
    label: str
    answer: str  # "score" | "option" | "number"
    scale: Scale | None = None

    @classmethod
    def named(cls, key: str) -> ReferTemplate:
        table = load_json("refer/templates")
        if key not in table or key.startswith("_") or key == "custom":
            known = ", ".join(k for k in table if not k.startswith("_") and k != "custom")
            raise KeyError(f"no ReFeR template {key!r}; known: {known} (or pass prompt_file=)")
        entry = table[key]
        scale = Scale(low=entry["scale"][0], high=entry["scale"][1]) if "scale" in entry else None
        return cls(key, load_prompt(f"refer/{entry['peer']}"),
                   load_prompt(f"refer/{entry['area_chair']}"), entry["peer_line"],
                   entry["separator"], entry["label"], entry["answer"], scale)

    @classmethod
    def from_file(cls, path: str | Path, answer: str = "score") -> ReferTemplate:
        """A user's prompt file (e.g. from ``jurygraph autoprompt``): one template for both roles; its
        ``${peer_evaluations}`` slot is empty for the peers and holds the peers' block for the area chair."""
        file = Path(path)
        if not file.is_file():
            raise FileNotFoundError(f"prompt file {str(file)!r} does not exist")
        text = load_prompt_file(file)
        if "${peer_evaluations}" not in text:
            raise ValueError(f"prompt file {str(file)!r} has no ${{peer_evaluations}} slot for the area chair")
        entry = load_json("refer/templates")["custom"]
        return cls(f"file:{file.name}", text, text, entry["peer_line"], entry["separator"], "Rating", answer)

    def form(self, item: EvalItem) -> AnswerForm:
        """How a reply is read: 'Rating:' on the template's scale, or 'Answer:' an option letter / a number."""
        if self.answer == "score":
            scale = item.scale or self.scale
            if scale is None:
                raise ValueError(f"item {item.id!r}: a rating needs a scale")
            return AnswerForm(TaskKind.SCORE, f"Analysis: <your analysis>\nRating: <a number from {scale}>",
                              scale=scale, labels=("Rating", self.label))
        if self.answer == "option":
            options = choice_options(item)
            return AnswerForm(TaskKind.CHOICE, f"Analysis: <your analysis>\nAnswer: <one of {', '.join(options)}>",
                              options=options)
        return AnswerForm(TaskKind.CHOICE, "Analysis: <your analysis>\nAnswer: <the number only>")


def choice_options(item: EvalItem) -> dict[str, str]:
    """The item's options, or the '(A) ...' options written inside its question (BBH); none is an error."""
    options = item.options or options_from_question(item.question or "")
    if not options:
        raise ValueError(f"item {item.id!r}: an option answer needs 'options' (or '(A) ...' lines in the question)")
    return options


def template_for(item: EvalItem, template: str | None = None, prompt_file: str | Path | None = None) -> ReferTemplate:
    """The template an item is judged with: a prompt file, a named template, the item's dataset/aspect,
    its dataset (aqua, bbh_du, csqa, gsm8k, icqd, agiqa), else the generic one for its task kind."""
    if item.task is TaskKind.PAIRWISE:
        raise ValueError(f"item {item.id!r}: ReFeR judges score and choice items, not pairwise ones")
    tpl = _template_for(item, template, prompt_file)
    if (tpl.answer == "score") != (item.task is TaskKind.SCORE):
        wants = "a rating" if tpl.answer == "score" else "an answer"
        raise ValueError(f"item {item.id!r}: template {tpl.key!r} asks for {wants}, "
                         f"but the item is a {item.task.value} item")
    return tpl


def _template_for(item: EvalItem, template: str | None, prompt_file: str | Path | None) -> ReferTemplate:
    if prompt_file is not None:
        return ReferTemplate.from_file(prompt_file, "score" if item.task is TaskKind.SCORE else
                                       "option" if item.options else "number")
    if template is not None:
        return ReferTemplate.named(template)
    key = select_template("refer", task=item.task.value, dataset=canonical(item.dataset) or item.dataset,
                          aspect=item.aspect, conversation=item.conversational)
    if key is not None:
        return ReferTemplate.named(key)
    # CSQA's prompt is the least domain-specific of the option prompts; GSM8k's asks for a number
    return ReferTemplate.named("csqa" if item.options or options_from_question(item.question or "") else "gsm8k")


def item_slots(item: EvalItem, tpl: ReferTemplate) -> dict[str, Any]:
    """Every slot a ReFeR template may use, from the item (each filled once, verbatim); a conversation item's
    also those of :func:`jurygraph.nodes.conversation.conversation_slots` (its aspect and label the rubric's)."""
    if item.conversational:
        slots = conversation_slots(item, scale=item.scale or tpl.scale)
        return {**_text_slots(item, tpl), **slots, "label": slots["aspect_title"]}
    return _text_slots(item, tpl)


def _text_slots(item: EvalItem, tpl: ReferTemplate) -> dict[str, Any]:
    aspect_name = item.aspect or tpl.label
    aspect = get_aspect(item.dataset, item.aspect) if item.aspect else None
    scale = item.scale or tpl.scale or (aspect.scale if aspect else None)
    scale_text = str(scale) if scale else ""
    title = aspect_title(aspect_name)
    definition = aspect.definition if aspect else str(item.meta.get("criteria") or "")
    if definition.startswith(f"{title} - "):
        criteria = f"{title} ({scale_text}) - {definition[len(title) + 3:]}"
    else:
        criteria = f"{title} ({scale_text})" + (f": {definition}" if definition else "")
    steps = ""
    if aspect and aspect.dataset == "summeval":
        steps = "\n\n".join(f"{i}. {s}" for i, s in enumerate(load_json("refer/summeval")[aspect.name], 1))
    question = item.question or ""
    if item.options and tpl.answer == "option" and "${options}" not in tpl.peer:
        # BBH's prompt has no options slot: its questions carry them, so given options go with the question
        question = f"{question}\n{format_options(item.options)}"
    parts = [("Input", item.source), ("Context", item.context), ("Question", item.question),
             ("Response", item.response), ("Reference", item.reference_text)]
    return {
        "source": item.source or "", "context": item.context or "", "response": item.response or "",
        "question": question, "options": format_options(item.options) if item.options else "",
        "reference": item.reference_text or "", "aspect": aspect_name, "label": tpl.label if tpl.label != "Rating"
        else title, "criteria": criteria, "steps": steps, "scale": scale_text,
        "input": "\n\n".join(f"{name}: {text}" for name, text in parts if text),
    }


# --- generation parameters (Appendix C) -----------------------------------------------------------
# "For the peer models, we use the default hyperparameters except for the max_tokens=128" (NLG); 192 for
# multimodal peers; reasoning peers: max_tokens 256, temperature 1, top_p 1. temperature None = not sent,
# so the provider's default applies (a model spec's own temperature, 0 by default, would not be "default").
PEER_PARAMS: dict[str, dict[str, Any]] = {
    "nlg": {"temperature": None, "max_tokens": 128},
    "multimodal": {"temperature": None, "max_tokens": 192},
    "reasoning": {"temperature": 1, "top_p": 1, "max_tokens": 256},
}
# the area chair: "temperature=1, max_tokens=256, top_p=1 ... n=20" (NLG and multimodal); for reasoning "we
# don't set any limit on the max_tokens" (None: not sent). frequency/presence penalty 0 and stop=None are the
# providers' defaults and are not sent (Gemini and local models have no such parameters).
AREA_CHAIR_MAX_TOKENS: dict[str, int | None] = {"nlg": 256, "multimodal": 256, "reasoning": None}


def setting_of(item: EvalItem, tpl: ReferTemplate) -> str:
    """Which of Appendix C's settings applies: 'reasoning' (an answer), 'multimodal' (an image), else 'nlg'."""
    if tpl.answer != "score":
        return "reasoning"
    return "multimodal" if item.image is not None else "nlg"


def area_chair_params(setting: str, temperature: float) -> dict[str, Any]:
    return {"temperature": temperature, "top_p": 1, "max_tokens": AREA_CHAIR_MAX_TOKENS[setting]}


def human_message(prompt: str, item: EvalItem) -> HumanMessage:
    """The prompt as a user message; with the item's image as a second content part (vision models of
    OpenAI and Gemini both read ``image_url`` parts with a data URL)."""
    url = item.image_data_url()
    if url is None:
        return HumanMessage(prompt)
    return HumanMessage(content=[{"type": "text", "text": prompt}, {"type": "image_url", "image_url": {"url": url}}])


# --- what a peer passes on ----------------------------------------------------------------------

_ANSWER_LINE = r"^[\s*_#>\-•]*(?:final\s+)?(?:rating|answer|score|{labels})\b[\s*_]*[:：]"


def comment_of(text: str, labels: Sequence[str] = ()) -> str:
    """The peer's analysis: its reply without the 'Analysis:' label and without the final rating/answer line."""
    names = "|".join(re.escape(label) for label in labels if label) or "rating"
    pattern = re.compile(_ANSWER_LINE.format(labels=names), re.IGNORECASE)
    lines = text.strip().splitlines()
    cut = next((i for i in range(len(lines) - 1, -1, -1) if pattern.match(lines[i])), len(lines))
    body = "\n".join(lines[:cut]).strip()
    return re.sub(r"^[\s*_#\-•]*analysis[\s*_]*[:：][\s*_]*", "", body, flags=re.IGNORECASE)


def value_of(judgment: Judgment) -> str:
    return format_score(judgment.score) if judgment.score is not None else str(judgment.answer)


def feedback_of(judgment: Judgment, mode: str, tpl: ReferTemplate) -> str:
    """A readable peer judgment as the area chair sees it: score only, comment only, or both."""
    if mode == "score":
        return value_of(judgment)
    comment = comment_of(judgment.raw, (tpl.label, tpl.label.replace("_", " ")))
    if mode == "comment":
        return comment
    if mode == "both":
        return f"{comment}\n{'Rating' if judgment.kind is TaskKind.SCORE else 'Answer'}: {value_of(judgment)}"
    raise ValueError(f"unknown feedback mode {mode!r}; choose one of {', '.join(FEEDBACK_MODES)}")


def peer_block(evaluations: Sequence[str], tpl: ReferTemplate) -> str:
    """The peers' evaluations in peer order, each in the template's line form (First Assistant’s ... / LLM 1 ...)."""
    if len(evaluations) > len(ORDINALS):
        raise ValueError(f"the prompts name at most {len(ORDINALS)} peers, got {len(evaluations)}")
    return tpl.separator.join(render(tpl.peer_line, ordinal=ORDINALS[i], index=i + 1, evaluation=text)
                              for i, text in enumerate(evaluations))


def number_word(n: int) -> str:
    return NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else str(n)


# --- the nodes ----------------------------------------------------------------------------------

TemplateChoice = Callable[[EvalItem], ReferTemplate]


def make_peer_node(peer: Peer, choose: TemplateChoice, *, discussion_round: int | None = None,
                   audience: Sequence[str] = ()) -> RunnableLambda:
    """A peer: one independent evaluation with the peer prompt. If its model fails for good (after the
    client's retries) the peer's judgment is missing with the reason and the graph goes on without it.

    ``discussion_round`` (jurygraph's peer discussion, not the paper's): the peer speaks again in that
    round, with the discussion so far (every message of the ``audience`` peers, in order) appended to its
    prompt (``prompts/refer/discussion.txt``); its reply is heard by every peer of the ``audience`` and
    its judgment replaces its earlier one, so the area chair reads the final reviews."""
    listeners = tuple(audience)
    discussion = load_prompt("refer/discussion") if discussion_round is not None else ""

    def prepare(state: dict[str, Any]) -> tuple[HumanMessage, AnswerForm, dict[str, Any]]:
        item = as_item(state["item"])
        tpl = choose(item)
        form = tpl.form(item)
        prompt = render(tpl.peer, **item_slots(item, tpl), peer_evaluations="", n_peers="")
        if discussion:
            said = [m for m in state.get("transcript") or [] if m.name in listeners]
            prompt = prompt.rstrip() + "\n" + render(discussion, chat_history=render_history(said), name=peer.name,
                                                     answer_form=form.reminder)
        params = {**PEER_PARAMS[setting_of(item, tpl)], **peer.params}  # the peer's own overrides win
        return human_message(prompt, item), form, params

    def body(state: dict[str, Any]):
        message, form, params = prepare(state)
        reply: ModelReply = yield ModelRequest(agent=peer.name, role="peer", messages=[message],
                                               form=form, params=params)
        judgment = reply.judgment
        assert judgment is not None  # a form was given
        if discussion_round is None:
            histories = {peer.name: [message, reply.message]}
            said = reply.message
        else:
            said = spoken(AIMessage(reply.message.text, name=peer.name), discussion_round)
            histories = {**{n: [said] for n in listeners if n != peer.name}, peer.name: [message, said]}
        return {"judgments": {peer.name: judgment.to_state()}, "histories": histories, "transcript": [said]}

    def failed(state: dict[str, Any], err: Exception) -> dict[str, Any]:
        if isinstance(err, CONFIGURATION_ERRORS):
            raise err
        prepare(state)  # a bad item or template is an error, not a failing peer: it is raised
        kind = as_item(state["item"]).task
        reason = f"peer model failed: {type(err).__name__}: {err}"
        return {"judgments": {peer.name: Judgment.missing_for(peer.name, kind, "", reason, 1).to_state()}}

    name = peer.name if discussion_round is None else f"{peer.name}_r{discussion_round}"
    return agent_node(body, name, on_failure=failed)


def make_area_chair_node(peers: Sequence[str], choose: TemplateChoice, *, samples: int = 20,
                         temperature: float = 1.0, feedback: str = "score",
                         name: str = "area_chair", use_first: bool = False,
                         missing_peers: MissingPeers | str = "blank") -> RunnableLambda:
    """The area chair: reads the item and the peers' evaluations (in peer order), samples ``samples``
    responses at ``temperature`` (Appendix C: top_p 1, max_tokens 256; no limit for reasoning) and gives the
    verdict: the mean of the parsed ratings (or the majority answer for reasoning), one chosen comment, the
    other comments kept. Unreadable samples and missing peers are counted. ``missing_peers``: a peer whose
    judgment is missing (its model failed, or its reply could not be read) is a blank evaluation (``" "``) in
    its place, the number of models unchanged, as the released scripts pass it (``"blank"``), or is left out of
    the prompt, which then names one model fewer (``"omit"``). ``use_first``: the verdict is the FIRST of the
    ``samples`` (ReFeR-Lite from Turbo's request); all samples stay in the history."""
    if feedback not in FEEDBACK_MODES:
        raise ValueError(f"unknown feedback mode {feedback!r}; choose one of {', '.join(FEEDBACK_MODES)}")
    if missing_peers not in MISSING_PEERS:
        raise ValueError(f"unknown missing-peer rule {missing_peers!r}; choose one of {', '.join(MISSING_PEERS)}")
    if samples < 1:
        raise ValueError("the area chair needs at least one sample")
    order = tuple(peers)

    def body(state: dict[str, Any]):
        item = as_item(state["item"])
        tpl = choose(item)
        stored = state.get("judgments") or {}
        peer_judgments = {p: Judgment.model_validate(stored[p]) if p in stored else
                          Judgment.missing_for(p, item.task, "", "no judgment was recorded for this peer", 0)
                          for p in order}
        shown = [p for p in order if missing_peers == "blank" or not peer_judgments[p].missing]
        block = peer_block([BLANK_EVALUATION if peer_judgments[p].missing else
                            feedback_of(peer_judgments[p], feedback, tpl) for p in shown], tpl)
        if tpl.key.startswith("file:") and shown:
            block = render(CUSTOM_PEER_INTRO, n_peers=number_word(len(shown))) + block
        prompt = render(tpl.area_chair, **item_slots(item, tpl), peer_evaluations=block,
                        n_peers=number_word(len(shown)))
        message = human_message(prompt, item)
        form = tpl.form(item)
        reply: ModelReply = yield ModelRequest(agent=name, role="area_chair", messages=[message], form=form,
                                               n=samples, params=area_chair_params(setting_of(item, tpl), temperature))
        if samples > 1:
            texts = [m.text for m in reply.samples]
            judgments = list(reply.sample_judgments)
            sampled = [AIMessage(t, name=name) for t in texts]
        else:
            assert reply.judgment is not None
            texts, judgments, sampled = [reply.message.text], [reply.judgment], [reply.message]
        if use_first:
            texts, judgments = texts[:1], judgments[:1]
        verdict, chosen = area_chair_verdict(item, judgments, texts, peer_judgments)
        if use_first:
            verdict = verdict.model_copy(update={"detail": {**verdict.detail, "first_of": samples}})
        final = _final_judgment(name, item, verdict, judgments, chosen)
        return {"verdict": verdict.to_state(), "judgments": {name: final.to_state()},
                "histories": {name: [message, *sampled]}, "transcript": sampled}

    return agent_node(body, name)


def area_chair_verdict(item: EvalItem, samples: Sequence[Judgment], texts: Sequence[str],
                       peers: dict[str, Judgment]) -> tuple[Verdict, int | None]:
    """Algorithm 1's last step: S_final = mean of the n parsed ratings (majority answer for reasoning);
    C_final = one chosen comment (the first sample closest to the final score / agreeing with the final
    answer), all comments kept in ``detail``. Returns the verdict and the chosen sample's index."""
    kind = item.task
    base = aggregate(samples, kind)
    readable = [i for i, j in enumerate(samples) if not j.missing]
    chosen: int | None = None
    if readable and kind is TaskKind.SCORE and base.score is not None:
        chosen = min(readable, key=lambda i: abs((samples[i].score or 0.0) - base.score))  # type: ignore[operator]
    elif readable and base.answer is not None:
        chosen = next(i for i in readable if samples[i].answer == base.answer)
    missing_peers = {p: j.reason or "missing" for p, j in peers.items() if j.missing}
    detail: dict[str, Any] = {
        "samples": len(samples),
        "unreadable_samples": len(samples) - len(readable),
        "sample_reasons": [j.reason for j in samples if j.missing],
        "ratings" if kind is TaskKind.SCORE else "answers": [
            None if j.missing else (j.score if kind is TaskKind.SCORE else j.answer) for j in samples],
        "comment": texts[chosen] if chosen is not None else None,
        "comments": list(texts),
        "peers": {p: None if j.missing else (j.score if j.score is not None else j.answer)
                  for p, j in peers.items()},
        "missing_peers": missing_peers,
        "n_missing_peers": len(missing_peers),
    }
    if kind is TaskKind.CHOICE:
        peer_answers = [j.answer for j in peers.values() if not j.missing and j.answer is not None]
        majority, share = agreement(peer_answers)
        detail.update(peer_majority=majority, peer_agreement=share,
                      agrees_with_peers=None if majority is None or base.answer is None else base.answer == majority)
        gold = (item.human or {}).get("answer")
        if gold is not None and base.answer is not None:
            detail["correct"] = is_correct(base.answer, gold)
    method = f"area chair mean of {len(samples)}" if kind is TaskKind.SCORE and len(samples) > 1 else \
        f"area chair majority of {len(samples)}" if len(samples) > 1 else "area chair"
    verdict = base.model_copy(update={"method": method, "detail": {**base.detail, **detail}})
    return verdict, chosen


def _final_judgment(name: str, item: EvalItem, verdict: Verdict, samples: Sequence[Judgment],
                    chosen: int | None) -> Judgment:
    """The area chair's own judgment in ``judgments``: the final score/answer and the chosen comment."""
    if verdict.detail.get("no_majority"):
        # the paper gives no tie-break for n sampled answers: no answer rather than an arbitrary one
        return Judgment.missing_for(name, item.task, "", f"no majority among the samples' answers {verdict.votes}", 1)
    if verdict.missing or chosen is None:
        reasons = "; ".join(sorted({j.reason or "" for j in samples if j.reason}))
        return Judgment.missing_for(name, item.task, samples[-1].raw if samples else "",
                                    f"no sample could be read ({reasons})", 1)
    return Judgment(agent=name, kind=samples[chosen].kind, raw=samples[chosen].raw, score=verdict.score,
                    answer=verdict.answer, evidence=comment_of(samples[chosen].raw))


__all__ = ["AREA_CHAIR_MAX_TOKENS", "FEEDBACK_MODES", "MISSING_PEERS", "PEER_PARAMS", "Peer", "ReferTemplate",
           "area_chair_params", "area_chair_verdict", "comment_of", "feedback_of", "human_message", "item_slots",
           "make_area_chair_node", "make_peer_node", "peer_block", "setting_of", "template_for"]
