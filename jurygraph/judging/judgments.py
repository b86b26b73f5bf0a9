"""What a judge concluded, as data: one pydantic object per agent judgment, and the verdict of a panel."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from jurygraph.judging.items import SWAP_LABEL, TaskKind

PairwiseLabel = Literal["1", "2", "tie"]
PAIRWISE_LABELS: tuple[str, ...] = get_args(PairwiseLabel)  # in this order: tables, rankings, scripted judges


class Judgment(BaseModel):
    """One agent's judgment of one item.

    Exactly one of the kind-specific groups is filled: ``score_1``/``score_2``/``label`` for pairwise,
    ``score`` for scoring, ``answer`` for choices. When the reply could not be read even after the
    re-ask, ``missing`` is True, the value fields are None and ``reason`` says why; ``raw`` always
    keeps the model's last reply text.
    """

    agent: str
    kind: TaskKind
    missing: bool = False
    reason: str | None = None
    raw: str = ""
    attempts: int = 1
    evidence: str | None = None
    score_1: float | None = None
    score_2: float | None = None
    label: PairwiseLabel | None = None
    score: float | None = None
    answer: str | None = None

    @classmethod
    def missing_for(cls, agent: str, kind: TaskKind, raw: str, reason: str, attempts: int) -> Judgment:
        return cls(agent=agent, kind=kind, missing=True, raw=raw, reason=reason, attempts=attempts)

    def to_state(self) -> dict[str, Any]:
        """The JSON form kept in graph state (checkpoints hold plain data, not our classes)."""
        return self.model_dump(mode="json", exclude_none=True)


def map_back(verdict: dict[str, Any]) -> dict[str, Any]:
    """A verdict (or judgment, as state data) given on the swapped item, stated for the original order:
    Assistant 1 <-> 2. Calibration maps each swapped run back with it, the panel diagnostics each member."""
    mapped = dict(verdict)
    mapped["score_1"], mapped["score_2"] = verdict.get("score_2"), verdict.get("score_1")
    if verdict.get("label") is not None:
        mapped["label"] = SWAP_LABEL[verdict["label"]]
    if verdict.get("votes"):
        mapped["votes"] = {SWAP_LABEL.get(label, label): count for label, count in verdict["votes"].items()}
    return {key: value for key, value in mapped.items() if value is not None}


def pairwise_label(score_1: float, score_2: float) -> PairwiseLabel:
    if score_1 > score_2:
        return "1"
    if score_2 > score_1:
        return "2"
    return "tie"


class Verdict(BaseModel):
    """A panel's conclusion on one item, with the count of judges whose judgment was missing."""

    kind: TaskKind
    method: str = Field(description="how judgments were combined, e.g. 'majority', 'mean', 'last score'")
    label: PairwiseLabel | None = None
    score: float | None = None
    score_1: float | None = None
    score_2: float | None = None
    answer: str | None = None
    votes: dict[str, int] | None = None
    n_judgments: int = 0
    n_missing: int = 0
    missing: bool = Field(default=False, description="True when no judgment could be read at all")
    detail: dict[str, Any] = Field(default_factory=dict)

    def to_state(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


# --- structured-output schemas: what a model that supports structured output is asked to fill ---


class PairwiseAnswer(BaseModel):
    """Your evaluation of the two assistants."""

    evidence: str = Field(description="your explanation of the evaluation")
    score_assistant_1: float = Field(description="the score of Assistant 1")
    score_assistant_2: float = Field(description="the score of Assistant 2")


class ScoreAnswer(BaseModel):
    """Your evaluation of the text."""

    evidence: str = Field(description="your explanation of the evaluation")
    score: float = Field(description="the score")


class ChoiceAnswer(BaseModel):
    """Your answer."""

    evidence: str = Field(description="your reasoning")
    answer: str = Field(description="the option letter or the number you choose")
