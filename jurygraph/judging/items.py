"""The unit of work: one item to judge, validated before any model is called."""

from __future__ import annotations

import base64
import re
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class TaskKind(StrEnum):
    """What the judges are asked to do with an item."""

    PAIRWISE = "pairwise"  # compare two answers to one question: Assistant 1 / Assistant 2 / tie
    SCORE = "score"  # rate one text on one aspect, on a numeric scale
    CHOICE = "choice"  # pick one option (a letter) or give one answer (a number)


class Scale(BaseModel):
    """A closed numeric rating scale, e.g. 1–5 or 0–1."""

    model_config = ConfigDict(frozen=True)

    low: float
    high: float

    @model_validator(mode="after")
    def _ordered(self) -> Scale:
        if not self.low < self.high:
            raise ValueError(f"scale low ({self.low}) must be below high ({self.high})")
        return self

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    @classmethod
    def parse(cls, text: str) -> Scale:
        """``"1-5"`` (also ``1..5``, ``1,5``, ``0-1``, ``-2-2``, ``1.5-4.5``); ValueError saying how to write one."""
        match = _SCALE.match(text)
        low, high = (float(match["low"]), float(match["high"])) if match else (0.0, 0.0)
        if match is None or not low < high:
            raise ValueError(f"--scale {text!r}: write LOW-HIGH with LOW below HIGH, e.g. --scale 1-5")
        return cls(low=low, high=high)

    def __str__(self) -> str:
        return f"{format_number(self.low)}-{format_number(self.high)}"


_SCALE = re.compile(r"^\s*(?P<low>-?\d+(?:\.\d+)?)\s*(?:-|–|\.\.|,)\s*(?P<high>-?\d+(?:\.\d+)?)\s*$")


def format_number(x: float) -> str:
    """A score or scale bound as people write it: 5, not 5.0; 2.5 stays 2.5."""
    return str(int(x)) if float(x).is_integer() else str(x)


def format_score(x: float) -> str:
    """A computed score (e.g. a mean) as an agent reports it to another: 5, 3.66667 (6 significant digits)."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


# a pairwise label once the two answers change places
SWAP_LABEL: dict[str, str] = {"1": "2", "2": "1", "tie": "tie"}


# the spellings benchmarks use for a pairwise preference (Chatbot Arena: model_a/model_b/tie; MT-Bench: A/B)
_PAIRWISE_SPELLINGS = {
    "1": "1", "2": "2", "tie": "tie", "a": "1", "b": "2", "model_a": "1", "model_b": "2", "assistant 1": "1",
    "assistant 2": "2", "assistant_1": "1", "assistant_2": "2", "response_1": "1", "response_2": "2",
    "response 1": "1", "response 2": "2", "tie (bothbad)": "tie", "draw": "tie", "equal": "tie", "1.0": "1", "2.0": "2",
}


def pairwise_label(value: Any) -> str | None:
    """'1', '2' or 'tie' for a common spelling of a pairwise preference, None for anything else."""
    return _PAIRWISE_SPELLINGS.get(str(value).strip().lower())


class MissingFields(ValueError):
    """An item lacks fields its task needs; ``fields`` names them (a loader says which columns would give them)."""

    def __init__(self, item_id: str, task: TaskKind, fields: list[str]) -> None:
        super().__init__(f"item {item_id!r}: a {task.value} item needs {', '.join(repr(f) for f in fields)}")
        self.item_id, self.task, self.fields = item_id, task, fields


class UnknownLabel(ValueError):
    """A pairwise item's human label is none of the spellings of 1, 2 or tie."""


class EvalItem(BaseModel):
    """One thing to judge.

    Pairwise items carry ``question``, ``response_1`` and ``response_2``; score items carry
    ``response`` (plus ``source``/``context`` as the task needs) and ``scale``; choice items carry
    ``question`` and usually ``options``. ``human`` holds human labels for meta-evaluation
    (``{"label": "1"|"2"|"tie"}`` for pairwise, ``{aspect: value}`` for scores, ``{"answer": ...}``
    for choices) and ``group`` the document/context the item belongs to (summary-level correlation).
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    task: TaskKind
    dataset: str | None = None
    aspect: str | None = None
    scale: Scale | None = None
    question: str | None = None
    source: str | None = None
    context: str | None = None
    response: str | None = None
    response_1: str | None = None
    response_2: str | None = None
    options: dict[str, str] | None = None
    reference: str | None = None
    image: str | None = Field(
        default=None, description="an image as a file path, a data: URL or base64 text (see image_data_url)"
    )
    group: str | None = None
    human: dict[str, Any] | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id", mode="before")
    @classmethod
    def _id_to_str(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value

    @field_validator("image", mode="before")
    @classmethod
    def _image_bytes(cls, value: Any) -> Any:
        if isinstance(value, bytes | bytearray):
            return "data:image/png;base64," + base64.b64encode(bytes(value)).decode()
        if isinstance(value, Path):
            return str(value)
        return value

    @model_validator(mode="after")
    def _fields_for_task(self) -> EvalItem:
        needed: tuple[str, ...]
        if self.task is TaskKind.PAIRWISE:
            needed = ("question", "response_1", "response_2")
        elif self.task is TaskKind.SCORE:
            # an image can itself be what is rated (text-to-image quality, ReFeR's AGIQA)
            needed = ("scale",) if self.image else ("response", "scale")
        else:
            needed = ("question",)
        missing = [name for name in needed if getattr(self, name) in (None, "")]
        if missing:
            raise MissingFields(self.id, self.task, missing)
        if self.human and self.task is TaskKind.PAIRWISE and "label" in self.human:
            label = pairwise_label(self.human["label"])
            if label is None:
                raise UnknownLabel(f"item {self.id!r}: human label {self.human['label']!r} must be '1', '2' or "
                                   "'tie' (or A/B, model_a/model_b, Assistant 1/2, tie in any case)")
            self.human = {**self.human, "label": label}
        return self

    def swapped(self) -> EvalItem:
        """The same pairwise item with the two answers in the other order (labels mapped too)."""
        if self.task is not TaskKind.PAIRWISE:
            raise ValueError(f"item {self.id!r}: only pairwise items can be swapped")
        human = dict(self.human or {})
        if "label" in human:
            human["label"] = SWAP_LABEL[str(human["label"])]
        meta = dict(self.meta)
        if "model_1" in meta or "model_2" in meta:
            meta["model_1"], meta["model_2"] = self.meta.get("model_2"), self.meta.get("model_1")
        return self.model_copy(
            update={"response_1": self.response_2, "response_2": self.response_1, "human": human or None,
                    "meta": meta}
        )

    @property
    def systems(self) -> list[str] | None:
        """The systems that wrote a pairwise item's two answers (``meta.model_1``, ``meta.model_2``), when it
        names both: what ``jurygraph rank`` ranks and the same-family warning compares judges with."""
        one, two = self.meta.get("model_1"), self.meta.get("model_2")
        return [str(one), str(two)] if self.task is TaskKind.PAIRWISE and one and two else None

    def image_data_url(self) -> str | None:
        """The image as a data: URL, reading a file path if needed; None when there is no image."""
        if self.image is None:
            return None
        if self.image.startswith("data:"):
            return self.image
        path = Path(self.image)
        if path.suffix and len(self.image) < 4096 and path.exists():
            mime = {".jpg": "jpeg", ".jpeg": "jpeg", ".gif": "gif", ".webp": "webp"}.get(path.suffix.lower(), "png")
            return f"data:image/{mime};base64," + base64.b64encode(path.read_bytes()).decode()
        if path.suffix and len(self.image) < 4096:
            raise FileNotFoundError(f"item {self.id!r}: image file {self.image!r} does not exist")
        return "data:image/png;base64," + self.image


def as_item(value: EvalItem | dict[str, Any]) -> EvalItem:
    """Accept an item or its dict form (as stored in graph state)."""
    return value if isinstance(value, EvalItem) else EvalItem.model_validate(value)
