"""Reading judgments out of model replies.

Three layers, tried in order by :mod:`jurygraph.llm.calls`: the structured object when the model filled one,
then the tolerant text parsers below, then (once) a re-ask with the format reminder. A reply that none
of them can read becomes a *missing* judgment that keeps the raw text and the reason — never a 0 or a tie.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import BaseModel, Field, create_model

from jurygraph.judging.items import Scale, TaskKind, format_number
from jurygraph.judging.judgments import (
    ChoiceAnswer,
    Judgment,
    PairwiseAnswer,
    ScoreAnswer,
    pairwise_label,
)


class UnreadableReply(ValueError):
    """The reply does not contain the answer in a form we can read; the message says what is wrong."""


_NUM = r"([-+]?\d+(?:\.\d+)?)"
_OUT_OF = rf"(?:\s*(?:/|out\s+of)\s*{_NUM})?"
# markdown emphasis, code ticks, brackets and quotes that models wrap around labels and numbers
_DECOR = r"[\s*_`\[\]\"'(]*"
_COLON = r"\s*(?:[:：=]|\bis\b)"


def _clean(text: str) -> str:
    # full-width digits and punctuation (Chinese replies) become ASCII so one set of patterns serves
    table = {ord(c): ord(c) - 0xFEE0 for c in "０１２３４５６７８９．／"}
    return text.translate(table).replace("：", ":")


def _number(value: str, out_of: str | None, scale: Scale | None, what: str) -> float:
    number = float(value)
    if out_of is not None and scale is not None and float(out_of) != scale.high:
        raise UnreadableReply(f"{what} is given as {value}/{out_of}, but the scale is {scale}")
    if scale is not None and not scale.contains(number):
        raise UnreadableReply(f"{what} {value} is outside the scale {scale}")
    return number


def _last_match(patterns: list[str], text: str) -> re.Match[str] | None:
    best: re.Match[str] | None = None
    for pattern in patterns:
        for match in re.finditer(pattern, text, flags=re.IGNORECASE):
            if best is None or match.start() > best.start():
                best = match
    return best


def _evidence(text: str) -> str | None:
    match = re.search(r"evaluation evidence\s*[:：]\s*(.+?)(?=\n\s*[*_]*the score of|\Z)", text, re.I | re.S)
    return match.group(1).strip() if match else None


def parse_pairwise(text: str, scale: Scale) -> tuple[float, float, str | None]:
    """Scores of Assistant 1 and 2 from a reply in ChatEval's answer form (or a close variant).

    The last mention of each score wins, since a final answer follows the discussion.
    """
    cleaned = _clean(text)
    scores: list[float] = []
    for n in ("1", "2"):
        patterns = [
            # "Score of the Assistant 1: <score>" is FairEval's own answer form
            rf"score\s+(?:of|for)\s+(?:the\s+)?assistant\s*{n}\b{_DECOR}{_COLON}{_DECOR}{_NUM}{_OUT_OF}",
            rf"(?:^|\n){_DECOR}assistant\s*{n}(?:'s)?(?:\s+score)?{_DECOR}{_COLON}{_DECOR}{_NUM}{_OUT_OF}{_DECOR}(?=\n|$)",
        ]
        match = _last_match(patterns, cleaned)
        if match is None:
            raise UnreadableReply(f"no score for Assistant {n} in the reply")
        scores.append(_number(match.group(1), match.group(2), scale, f"the score of Assistant {n}"))
    return scores[0], scores[1], _evidence(text)


# where an answer line starts: a list dash, a quote or heading mark, then the label (markdown decoration allowed)
_LINE_START = rf"(?:^|\n)[ \t>#-]*{_DECOR}"


def parse_score(text: str, scale: Scale, labels: tuple[str, ...] = ()) -> tuple[float, str | None]:
    """A single rating: 'The score of the response: 4', 'Score: 4', 'Rating: 4/5', 'Final: 4', '<aspect>: 4' or a
    bare number.

    Which mention is the answer: models write their answer on a line of its own, after the reasoning (the
    papers' released transcripts end on a line such as ``Answer: Assistant 1``, while the reasoning mentions
    scores inside sentences). So the last *line that starts with a label* wins ("Score: 3 ... \nFinal: 2" is 2),
    and a label inside a sentence or parentheses counts only when no line starts with one ("Rating: 2 (at first
    I thought Rating: 5)" is 2).
    """
    cleaned = _clean(text)
    names = [r"the\s+score\s+of\s+the\s+\w+", r"(?:final\s+|overall\s+)?score", r"(?:final\s+)?rating",
             r"final(?:\s+answer)?"]
    names += [re.escape(label) for label in labels]
    patterns = [rf"(?:{name}){_DECOR}{_COLON}{_DECOR}{_NUM}{_OUT_OF}" for name in names]
    match = _last_match([_LINE_START + pattern for pattern in patterns], cleaned) or _last_match(patterns, cleaned)
    if match is not None:
        return _number(match.group(1), match.group(2), scale, "the score"), _evidence(text)
    bare = re.fullmatch(rf"{_DECOR}{_NUM}{_OUT_OF}{_DECOR}\.?\s*", cleaned.strip())
    if bare:
        return _number(bare.group(1), bare.group(2), scale, "the score"), None
    raise UnreadableReply("no score in the reply")


def parse_choice(text: str, options: dict[str, str] | None) -> tuple[str, str | None]:
    """An option letter (when options are given) or a number (free numeric answer, e.g. GSM8k)."""
    cleaned = _clean(text)
    if options:
        letters = "".join(re.escape(k) for k in options)
        patterns = [
            rf"answer{_DECOR}(?:is)?{_DECOR}[:：]?{_DECOR}\(?([{letters}])\)?(?![\w])",
            rf"(?:^|\n){_DECOR}\(?([{letters}])\)?{_DECOR}\.?\s*$",
        ]
        match = _last_match(patterns, cleaned)
        if match is None:
            raise UnreadableReply(f"no option among {', '.join(options)} in the reply")
        return match.group(1).upper() if match.group(1).upper() in options else match.group(1), None
    match = _last_match([rf"answer{_DECOR}(?:is)?{_DECOR}[:：]?{_DECOR}\$?{_NUM}"], cleaned.replace(",", ""))
    if match is None:
        raise UnreadableReply("no numeric answer in the reply")
    value = float(match.group(1))
    return format_number(value), None


@dataclass(frozen=True)
class AnswerForm:
    """What a judging call must produce and how to read it.

    ``reminder`` is the text of the template's answer form; it is sent once more when a reply cannot
    be read. ``labels`` are extra names a score may be written under (e.g. the aspect name).
    """

    kind: TaskKind
    reminder: str
    scale: Scale | None = None
    options: dict[str, str] | None = None
    labels: tuple[str, ...] = field(default_factory=tuple)

    def schema(self) -> type[BaseModel]:
        """The structured-output schema, with the scale's bounds on the scores."""
        return _schema(self.kind, self.scale.low if self.scale else None, self.scale.high if self.scale else None)

    def read(self, agent: str, text: str, attempts: int = 1) -> Judgment:
        """Parse reply text into a judgment; raises UnreadableReply with the reason."""
        if self.kind is TaskKind.PAIRWISE:
            assert self.scale is not None
            s1, s2, evidence = parse_pairwise(text, self.scale)
            return Judgment(
                agent=agent, kind=self.kind, raw=text, attempts=attempts, evidence=evidence,
                score_1=s1, score_2=s2, label=pairwise_label(s1, s2),
            )
        if self.kind is TaskKind.SCORE:
            assert self.scale is not None
            score, evidence = parse_score(text, self.scale, self.labels)
            return Judgment(agent=agent, kind=self.kind, raw=text, attempts=attempts, evidence=evidence, score=score)
        answer, evidence = parse_choice(text, self.options)
        return Judgment(agent=agent, kind=self.kind, raw=text, attempts=attempts, evidence=evidence, answer=answer)

    def from_structured(self, agent: str, parsed: BaseModel, attempts: int = 1) -> Judgment:
        """A judgment from a structured-output object; out-of-scale values are unreadable, not clipped."""
        text = self.render(parsed)
        judgment = self.read(agent, text, attempts)
        return judgment.model_copy(update={"evidence": getattr(parsed, "evidence", None), "raw": text})

    def render(self, parsed: BaseModel) -> str:
        """The structured object written in the template's answer form, as the agent's spoken message."""
        if isinstance(parsed, PairwiseAnswer):
            return (
                f"Evaluation evidence: {parsed.evidence}\n"
                f"The score of Assistant 1: {format_number(parsed.score_assistant_1)}\n"
                f"The score of Assistant 2: {format_number(parsed.score_assistant_2)}"
            )
        if isinstance(parsed, ScoreAnswer):
            return f"Evaluation evidence: {parsed.evidence}\nScore: {format_number(parsed.score)}"
        if isinstance(parsed, ChoiceAnswer):
            return f"{parsed.evidence}\nAnswer: {parsed.answer}"
        raise TypeError(f"no answer form for {type(parsed).__name__}")


@cache
def _schema(kind: TaskKind, low: float | None, high: float | None) -> type[BaseModel]:
    schemas: dict[TaskKind, type[BaseModel]] = {
        TaskKind.PAIRWISE: PairwiseAnswer, TaskKind.SCORE: ScoreAnswer, TaskKind.CHOICE: ChoiceAnswer}
    base = schemas[kind]
    if kind is TaskKind.CHOICE or low is None or high is None:
        return base
    names = ("score_assistant_1", "score_assistant_2") if kind is TaskKind.PAIRWISE else ("score",)
    bounded: dict[str, Any] = {
        name: (float, Field(ge=low, le=high, description=base.model_fields[name].description)) for name in names
    }
    return create_model(base.__name__, __base__=base, __doc__=base.__doc__, **bounded)

