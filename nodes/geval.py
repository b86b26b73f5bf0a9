"""G-Eval's form-filling evaluator and its two estimators of the expected score.

G-Eval (Liu et al. 2023) asks for the score only and takes as final score the expectation over the score
tokens, sum_s p(s) * s. Two estimators:

(a) ``samples``: the mean of n sampled replies (the paper: n = 20, temperature 1), sent as ONE request
    with the provider's native ``n`` where it has one; unreadable samples are left out and counted.
(b) ``logprobs``: the probabilities of the score tokens, from the log-probabilities an OpenAI-compatible
    API returns (``logprobs`` + ``top_logprobs``) at the position of the score the form asks for (the reply's
    leading number for G-Eval's "scores ONLY", the number after "Rating" for Analyze-Rate), renormalised
    over the valid scores. A model that returns none (Gemini, OpenAI o-series, a server that ignores the
    flag) falls back to (a) and the verdict's ``detail`` says why.

Replies are read as G-Eval's own script reads them (meta_eval_summeval.py ``parse_output``: the number the
reply starts with, so "4\n\nThe summary..." and "3 - The summary..." are 4 and 3); a reply that does not
start with a number is read from its "<Aspect>:"/"Rating:" line; one that has neither is a missing judgment
(G-Eval's script counts it as 0). A score off the prompt's scale ("4" on the 1-3 fluency) is kept, as both
released meta-evaluation scripts (G-Eval's and Analyze-Rate's) keep the number, and counted in the verdict's
``detail["off_scale"]``; ``off_scale="drop"`` makes it a missing judgment instead.

Generation parameters: G-Eval samples at temperature 1, top_p 1 (the paper, §3.1: "n = 20, temperature = 1,
top_p = 1") with max_tokens 5, as its released ``gpt4_eval.py`` sends (the paper gives none; ``max_tokens=None``
lifts it); Analyze-Rate with max_tokens 256 (as ReFeR, Appendix C, reports following Analyze-Rate).

Analyze-Rate (Chiang & Lee 2023) is the same evaluator with the form asking for an analysis first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableLambda

from jurygraph.judging.aggregation import aggregate
from jurygraph.judging.aspects import aspect_title, get_aspect, scale_of
from jurygraph.judging.extraction import AnswerForm, UnreadableReply
from jurygraph.judging.items import EvalItem, Scale, TaskKind, as_item, format_number
from jurygraph.judging.judgments import Judgment, Verdict
from jurygraph.llm.calls import ModelRequest, agent_node, current_context
from jurygraph.llm.models import ResolvedModel
from jurygraph.nodes.common import node_id, spoken
from jurygraph.nodes.conversation import conversation_slots
from jurygraph.prompts import load_prompt, render, select_template

Style = Literal["geval", "analyze-rate"]
Estimator = Literal["samples", "logprobs"]
FORMS: dict[str, str] = {"geval": "geval/form", "analyze-rate": "analyze_rate/form"}
ESTIMATORS: tuple[str, ...] = ("samples", "logprobs")
FLUENCY_SCALES: tuple[int, ...] = (3, 5)
OffScale = Literal["keep", "drop"]
OFF_SCALE: tuple[str, ...] = ("keep", "drop")
# the scale each released SummEval prompt states in its text (fluency: "Fluency (1-3)"); replies are read on it
RELEASED_SCALES: dict[str, Scale] = {"geval/summeval_coherence": Scale(low=1, high=5),
                                     "geval/summeval_consistency": Scale(low=1, high=5),
                                     "geval/summeval_fluency": Scale(low=1, high=3),
                                     "geval/summeval_relevance": Scale(low=1, high=5)}
# sampling parameters of the two papers (see the module docstring); max_tokens is each factory's parameter
SAMPLE_PARAMS: dict[str, dict[str, Any]] = {"geval": {"top_p": 1}, "analyze-rate": {"top_p": 1}}
# max_tokens by default: G-Eval's released gpt4_eval.py sends 5 (its paper gives none); Analyze-Rate 256
MAX_TOKENS: dict[str, int] = {"geval": 5, "analyze-rate": 256}
# the log-probability request reads the distribution at the score position of the most likely reply: the
# papers give no setting for it (a project choice, see docs)
LOGPROB_PARAMS: dict[str, Any] = {"temperature": 0}


@dataclass(frozen=True)
class FormFillingTemplate:
    """The G-Eval prompt of an item's aspect, with G-Eval's or Analyze-Rate's evaluation form.

    ``template`` replaces the built-in prompt; it may use the slots ``criteria``, ``aspect``,
    ``aspect_title``, ``scale_low``, ``scale_high``, ``source_text``, ``fact``, ``generated_text``,
    ``evaluation_form`` (the whole form) and ``form_header`` (its first line only).
    SummEval's prompts are G-Eval's released ones; ``fluency_scale=5`` swaps the released 1-3 fluency
    prompt for the project's 1-5 variant.
    """

    style: Style | str = "geval"
    template: str | None = None
    fluency_scale: int = 3

    def build(self, item: EvalItem) -> tuple[str, AnswerForm]:
        if item.task is not TaskKind.SCORE:
            raise ValueError(f"item {item.id!r}: G-Eval and Analyze-Rate rate one text on a scale (score items), "
                             f"not {item.task.value} items")
        if self.style not in FORMS:
            raise ValueError(f"unknown evaluation form {self.style!r}; choose one of {', '.join(FORMS)}")
        if item.conversational:
            return self._conversation(item)
        aspect_name = item.aspect or "overall quality"
        aspect = get_aspect(item.dataset, item.aspect) if item.aspect else None
        scale = scale_of(item, aspect)
        title = aspect_title(aspect_name)
        if self.fluency_scale not in FLUENCY_SCALES:
            raise ValueError(f"fluency_scale must be 3 (G-Eval's released prompt) or 5, not {self.fluency_scale}")
        name = self._name(aspect.dataset if aspect else None, aspect_name)
        template = self.template or self._builtin(item, name, aspect_name)
        # a released prompt states its own scale in its text: the reply is read on that scale (fluency 1-3)
        scale = RELEASED_SCALES.get(name or "", scale) if self.template is None else scale
        definition = aspect.definition if aspect else ""
        # G-Eval writes the criterion as "Coherence (1-5) - the collective quality ..."
        head, sep, rest = definition.partition(" - ")
        criteria = f"{head} ({scale}) - {rest}" if sep else definition
        form_text = render(load_prompt(FORMS[self.style]), aspect_title=title)
        prompt = render(template, criteria=criteria, aspect=aspect_name, aspect_title=title,
                        scale_low=format_number(scale.low), scale_high=format_number(scale.high),
                        source_text=item.source or "", fact=item.context or "", generated_text=item.response,
                        evaluation_form=form_text, form_header=form_text.partition("\n")[0])
        return prompt.rstrip(), AnswerForm(TaskKind.SCORE, form_text, scale=scale, labels=(title, aspect_name))

    def _conversation(self, item: EvalItem) -> tuple[str, AnswerForm]:
        """A conversation item: jurygraph's conversation prompt in G-Eval's structure, the rubric of its aspect."""
        scale = scale_of(item, None)
        slots = conversation_slots(item, scale=scale)
        title = slots["aspect_title"]
        form_text = render(load_prompt(FORMS[self.style]), aspect_title=title)
        name = select_template("geval", task=TaskKind.SCORE.value, conversation=True)
        assert name is not None  # the table has a conversation template for G-Eval
        prompt = render(self.template or load_prompt(name), **slots, evaluation_form=form_text,
                        form_header=form_text.partition("\n")[0])
        return prompt.rstrip(), AnswerForm(TaskKind.SCORE, form_text, scale=scale, labels=(title, slots["aspect"]))

    def _name(self, dataset: str | None, aspect: str) -> str | None:
        """The built-in prompt's name from the table of templates (the 1-5 fluency variant on request)."""
        return select_template("geval", task=TaskKind.SCORE.value, dataset=dataset, aspect=aspect,
                               variant="1to5" if self.fluency_scale == 5 else None)

    @staticmethod
    def _builtin(item: EvalItem, name: str | None, aspect: str) -> str:
        if name is None:
            raise ValueError(f"item {item.id!r}: no G-Eval prompt for aspect {aspect!r} of dataset {item.dataset!r} "
                             "(built in: SummEval coherence/consistency/fluency/relevance, Topical-Chat coherence/"
                             "engagingness/groundedness/naturalness); pass template=")
        return load_prompt(name)


# --- reading a reply where the form asks for the score -------------------------------------------------

# meta_eval_summeval.py's parse_output: re.search("^ ?([\d\.]+)", output), the number the reply starts with
_LEADING = re.compile(r"^ ?([\d.]+)")
_MARK = r"[\s*_`]*"


def score_in_reply(text: str, style: str, form: AnswerForm, off_scale: OffScale | str = "keep") -> tuple[float, int]:
    """The score of a reply and the character offset where it starts: where the answer form asks for it.

    G-Eval ("scores ONLY"): the number the reply starts with, as G-Eval's script reads it ("4/5", "4 out
    of 5", "4\n\nThe summary...", "3 - The summary..."), else the number on the last "<Aspect>:" line
    ("- Coherence: 4"). Analyze-Rate: the number after the last "Rating:" (or "<Aspect>:") label, else a
    leading number. Raises UnreadableReply when there is none, or (``off_scale="drop"``) when the score is off
    the prompt's scale; ``"keep"`` (default) returns it, as the released scripts keep it.
    """
    assert form.scale is not None
    names = "|".join(["rating", "score", *(re.escape(label) for label in form.labels if label)])
    labelled = list(re.finditer(rf"(?:{names}){_MARK}(?:\([^)\n]*\))?{_MARK}[:：=]{_MARK}(\d+(?:\.\d+)?)",
                                text, flags=re.IGNORECASE))
    leading = _LEADING.match(text)
    found: list[tuple[str, int]] = []
    if leading:
        found.append((leading.group(1), leading.start(1)))
    if labelled:
        found.insert(0 if style == "analyze-rate" else len(found), (labelled[-1].group(1), labelled[-1].start(1)))
    if not found:
        raise UnreadableReply("no score where the form asks for it (a leading number or a '<aspect>:'/'Rating:' line)")
    value_text, offset = found[0]
    try:
        value = float(value_text)
    except ValueError:
        raise UnreadableReply(f"the reply starts with {value_text!r}, which is not a number") from None
    if off_scale not in OFF_SCALE:
        raise ValueError(f"unknown off-scale rule {off_scale!r}; choose one of {', '.join(OFF_SCALE)}")
    if off_scale == "drop" and not form.scale.contains(value):
        raise UnreadableReply(f"the score {value_text} is outside the prompt's scale {form.scale}")
    return value, offset


def read_reply(form: AnswerForm, style: str, agent: str, text: str, off_scale: OffScale | str = "keep") -> Judgment:
    """The judgment of one reply (:func:`score_in_reply`), or a missing judgment with the raw text and reason."""
    try:
        score, _ = score_in_reply(text, style, form, off_scale)
    except UnreadableReply as err:
        return Judgment.missing_for(agent, TaskKind.SCORE, text, str(err), 1)
    return Judgment(agent=agent, kind=TaskKind.SCORE, raw=text, attempts=1, score=score)


# --- estimator (b): probability-weighted score from log-probabilities --------------------------------


def _score_of_token(token: str, valid: Sequence[int]) -> int | None:
    text = token.strip()
    if not re.fullmatch(r"\d+", text):
        return None
    value = int(text)
    return value if value in valid else None


def valid_scores(scale: Scale) -> list[int]:
    """The integer scores of a scale: the values a score token can take (1-5 -> 1..5, 0-1 -> 0, 1)."""
    return list(range(math.ceil(scale.low), math.floor(scale.high) + 1))


def token_at(content: Sequence[Mapping[str, Any]], offset: int) -> int:
    """The index of the token that covers character ``offset`` of the reply the tokens spell."""
    start = 0
    for index, position in enumerate(content):
        end = start + len(str(position.get("token", "")))
        if start <= offset < end:
            return index
        start = end
    raise UnreadableReply(f"the reply's tokens end before character {offset}")


def expected_score_from_logprobs(content: Sequence[Mapping[str, Any]], scale: Scale,
                                 offset: int) -> tuple[float, dict[int, float]]:
    """G-Eval's sum_s p(s) * s from an OpenAI ``logprobs.content`` list, at the score the form asks for.

    ``offset`` is where that score starts in the reply (:func:`score_in_reply`); the token there must be a
    valid score by itself (a "4" of "4/5", not a number elsewhere in the reply). Its ``top_logprobs``
    entries that are valid scores are renormalised to sum to one; tokens that spell the same score
    (``"3"``, ``" 3"``) add up. Returns the expected score and the probabilities. Raises UnreadableReply
    when the token at that position is not a score token on the scale.
    """
    valid = valid_scores(scale)
    position = content[token_at(content, offset)]
    chosen = _score_of_token(str(position.get("token", "")), valid)
    if chosen is None:
        raise UnreadableReply(f"the token {position.get('token')!r} at the score's position is not one score "
                              f"on the scale {scale}")
    mass: dict[int, float] = {}
    alternatives = position.get("top_logprobs") or []
    for alternative in alternatives:
        score = _score_of_token(str(alternative.get("token", "")), valid)
        if score is not None:
            mass[score] = mass.get(score, 0.0) + math.exp(float(alternative["logprob"]))
    if str(position.get("token")) not in {str(a.get("token")) for a in alternatives}:
        # the sampled token itself is missing from the top list: count it once
        mass[chosen] = mass.get(chosen, 0.0) + math.exp(float(position["logprob"]))
    total = sum(mass.values())
    probabilities = {score: p / total for score, p in sorted(mass.items())}
    return sum(score * p for score, p in probabilities.items()), probabilities


def logprobs_unavailable(resolved: ResolvedModel) -> str | None:
    """Why this model cannot return log-probabilities, or None when it can be asked for them."""
    model = resolved.model
    if "logprobs" not in type(model).model_fields:
        return f"{resolved.label} returns no log-probabilities (no logprobs parameter)"
    name = str(getattr(model, "model_name", None) or getattr(model, "model", None) or "")
    if re.fullmatch(r"(?:.*/)?o\d.*", name):
        return f"{resolved.label}: OpenAI reasoning (o-series) models return no log-probabilities"
    return None


# --- the node ------------------------------------------------------------------------------------------


def make_form_filling_node(
    *,
    agent: str = "G-Eval",
    style: Style | str = "geval",
    estimator: Estimator | str = "samples",
    n: int = 20,
    temperature: float = 1.0,
    template: str | None = None,
    role: str = "evaluator",
    fluency_scale: int = 3,
    max_tokens: int | Literal["style"] | None = "style",
    off_scale: OffScale | str = "keep",
) -> RunnableLambda:
    """A node where one evaluator fills the form and the verdict is the expected score.

    The model comes from the runtime context by ``agent`` name, else ``role``. Judgments: with samples,
    one per sample under ``"<agent> #<i>"``; with log-probabilities, the one reply under ``agent``.
    ``fluency_scale``: 3 = G-Eval's released SummEval fluency prompt (1-3), 5 = the project's 1-5 variant.
    ``max_tokens``: the reply's length limit on every request (None: not sent, the provider's default;
    ``"style"``: the style's, :data:`MAX_TOKENS`). ``off_scale``: a sample's score off the prompt's scale is
    kept (``"keep"``, as the released meta-evaluation scripts) and counted in ``detail["off_scale"]``, or is a
    missing judgment (``"drop"``).
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; choose one of {', '.join(ESTIMATORS)}")
    if n < 1:
        raise ValueError("n (the number of samples) must be at least 1")
    if fluency_scale not in FLUENCY_SCALES:
        raise ValueError(f"fluency_scale must be 3 (G-Eval's released prompt) or 5, not {fluency_scale}")
    if off_scale not in OFF_SCALE:
        raise ValueError(f"unknown off-scale rule {off_scale!r}; choose one of {', '.join(OFF_SCALE)}")
    frame = FormFillingTemplate(style, template, fluency_scale)
    limit = MAX_TOKENS.get(str(style)) if max_tokens == "style" else max_tokens

    def body(state: dict[str, Any]):
        item = as_item(state["item"])
        prompt, form = frame.build(item)
        messages: list[BaseMessage] = [HumanMessage(prompt)]
        fallback: str | None = None
        if estimator == "logprobs":
            fallback = logprobs_unavailable(current_context().model_for(agent, role))
            if fallback is None:
                # form=None: the reply is read from its text below; structured output would replace G-Eval's
                # "scores ONLY" form with a JSON schema (and its tokens would no longer be the form's)
                reply = yield ModelRequest(agent=agent, role=role, messages=messages, want_logprobs=True,
                                           params={**LOGPROB_PARAMS, "max_tokens": limit})
                content = (reply.message.response_metadata.get("logprobs") or {}).get("content")
                if content:
                    try:
                        text = reply.message.text
                        score, offset = score_in_reply(text, style, form, off_scale)
                        expected, probabilities = expected_score_from_logprobs(content, form.scale, offset)  # type: ignore[arg-type]
                        judgment = Judgment(agent=agent, kind=TaskKind.SCORE, raw=text, attempts=1, score=score)
                        return _logprob_update(agent, reply, judgment, expected, probabilities)
                    except UnreadableReply as err:
                        fallback = f"the reply's log-probabilities hold no score: {err}"
                else:
                    fallback = "the reply carried no log-probabilities"
        # samples are read as text and never re-asked: an unreadable sample is a missing judgment
        reply = yield ModelRequest(agent=agent, role=role, messages=messages, n=n,
                                   params={"temperature": temperature, **SAMPLE_PARAMS[str(style)],
                                           "max_tokens": limit})
        named = [read_reply(form, str(style), f"{agent} #{i}", sample.text, off_scale)
                 for i, sample in enumerate(reply.samples, 1)]
        verdict = aggregate(named, TaskKind.SCORE)
        detail: dict[str, Any] = {"estimator": "samples", "n": n, "temperature": temperature,
                                  "scores": [j.score for j in named], "unreadable": verdict.n_missing}
        assert form.scale is not None
        kept = sum(1 for j in named if j.score is not None and not form.scale.contains(j.score))
        if kept:
            detail["off_scale"] = kept
        if fallback:
            detail["fallback_reason"] = fallback
        verdict = verdict.model_copy(update={"method": f"mean of {n} samples" if not verdict.missing else "none",
                                             "detail": detail})
        message = spoken(reply.message, 1)
        return {"judgments": {j.agent: j.to_state() for j in named}, "verdict": verdict.to_state(),
                "histories": {agent: [message]}, "transcript": [message]}

    return agent_node(body, node_id(agent))


def _logprob_update(agent: str, reply: Any, judgment: Judgment, expected: float,
                    probabilities: dict[int, float]) -> dict[str, Any]:
    verdict = Verdict(kind=TaskKind.SCORE, method="probability-weighted", score=expected, n_judgments=1,
                      detail={"estimator": "logprobs", "probabilities": {str(s): p for s, p in probabilities.items()},
                              "sampled_score": judgment.score})
    message = spoken(reply.message, 1)
    return {"verdict": verdict.to_state(), "judgments": {agent: judgment.to_state()}, "histories": {agent: [message]},
            "transcript": [message]}
