"""The unit of work: one item to judge, validated before any model is called."""

from __future__ import annotations

import base64
import re
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from jurygraph.judging.conversations import Message, assistant_turns, check_messages, first_user_text, parse_messages


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


def plural(count: int, noun: str) -> str:
    """A count and its noun as people write them: 1 item, 2 items, 20,000 items."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


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
    reference: str | list[Message] | None = Field(
        default=None, description="a reference answer (text), or a reference trajectory (messages) that an agent's "
                                  "tool calls are matched against (graphs.trajectory)")
    image: str | None = Field(
        default=None, description="an image as a file path, a data: URL or base64 text (see image_data_url)"
    )
    messages: list[Message] | None = None
    messages_1: list[Message] | None = None
    messages_2: list[Message] | None = None
    steps: list[list[str]] | None = None
    steps_1: list[list[str]] | None = None
    steps_2: list[list[str]] | None = None
    turn: int | None = Field(default=None, ge=1, description="the assistant turn judged, from 1; None: all of them")
    group: str | None = None
    human: dict[str, Any] | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id", mode="before")
    @classmethod
    def _id_to_str(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value

    @field_validator("messages", "messages_1", "messages_2", mode="before")
    @classmethod
    def _messages(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        return parse_messages(value, item=str(info.data.get("id", "?")), field=str(info.field_name))

    @field_validator("reference", mode="before")
    @classmethod
    def _reference(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, list | tuple):
            return value
        item = str(info.data.get("id", "?"))
        messages = parse_messages(value, item=item, field="reference")
        check_messages(messages, item=item, field="reference")
        return messages

    @field_validator("steps", "steps_1", "steps_2", mode="before")
    @classmethod
    def _steps(cls, value: Any) -> Any:
        # a step may be written as one node name (a superstep that ran one node)
        return [[step] if isinstance(step, str) else step for step in value] if isinstance(value, list) else value

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
        self._check_conversation()
        needed: tuple[str, ...]
        if self.task is TaskKind.PAIRWISE:
            needed = ("question", "messages_1", "messages_2") if self.conversational else (
                "question", "response_1", "response_2")
        elif self.task is TaskKind.SCORE:
            # an image can itself be what is rated (text-to-image quality, ReFeR's AGIQA)
            needed = ("scale",) if self.image or self.messages else ("response", "scale")
        else:
            needed = ("question",)
        missing = [name for name in needed if getattr(self, name) in (None, "")]
        if missing:
            raise MissingFields(self.id, self.task, missing)
        if self.human and "turns" in self.human:
            self.human = {**self.human, "turns": self._turn_labels(self.human["turns"])}
        if self.human and self.task is TaskKind.PAIRWISE and "label" in self.human:
            label = pairwise_label(self.human["label"])
            if label is None:
                raise UnknownLabel(f"item {self.id!r}: human label {self.human['label']!r} must be '1', '2' or "
                                   "'tie' (or A/B, model_a/model_b, Assistant 1/2, tie in any case)")
            self.human = {**self.human, "label": label}
        return self

    def _turn_labels(self, labels: Any) -> dict[str, Any]:
        """``human["turns"]``: per-turn human labels of a conversation item, keyed by the turn ("2"), pairwise labels
        in their canonical spelling."""
        if not self.conversational or not isinstance(labels, dict):
            raise ValueError(f"item {self.id!r}: human 'turns' holds per-turn labels of a conversation item, as "
                             "{\"1\": 4, \"2\": 5}")
        out: dict[str, Any] = {}
        for key, value in labels.items():
            if not str(key).isdigit() or int(key) < 1:
                raise ValueError(f"item {self.id!r}: human turns: {key!r} is not a turn number (1, 2, ...)")
            if self.task is TaskKind.PAIRWISE and not isinstance(value, dict):
                label = pairwise_label(value)
                if label is None:
                    raise ValueError(f"item {self.id!r}: human label {value!r} of turn {key} must be '1', '2' or "
                                     "'tie' (or A/B, model_a/model_b, Assistant 1/2)")
                value = label
            out[str(int(key))] = value
        return out

    @property
    def reference_text(self) -> str | None:
        """The reference answer when it is text (None when there is none, or it is a reference trajectory)."""
        return self.reference if isinstance(self.reference, str) else None

    @property
    def reference_trajectory(self) -> list[Message] | None:
        """The reference trajectory when the reference is one (messages), else None."""
        return self.reference if isinstance(self.reference, list) else None

    @property
    def conversational(self) -> bool:
        """Whether the item is a conversation (it carries messages) rather than texts."""
        return bool(self.messages or self.messages_1 or self.messages_2)

    def _check_conversation(self) -> None:
        """The conversation fields fit the task and each other; ``question`` is derived when missing."""
        if not self.conversational:
            for name in ("steps", "steps_1", "steps_2", "turn"):
                if getattr(self, name) is not None:
                    raise ValueError(f"item {self.id!r}: {name!r} belongs to a conversation item "
                                     "(one with 'messages', or 'messages_1' and 'messages_2')")
            return
        texts = {"score": ("response",), "pairwise": ("response_1", "response_2")}.get(self.task.value, ())
        both = [name for name in texts if getattr(self, name) not in (None, "")]
        if both:
            conversation = "'messages'" if self.task is TaskKind.SCORE else "'messages_1'/'messages_2'"
            raise ValueError(f"item {self.id!r}: give {conversation} or {', '.join(map(repr, both))}, not both "
                             "(put the reply to judge in the conversation as its last assistant message)")
        if self.task is TaskKind.CHOICE:
            raise ValueError(f"item {self.id!r}: a choice item cannot be a conversation")
        sides: list[tuple[str, list[Message]]]
        if self.task is TaskKind.SCORE:
            if self.messages_1 or self.messages_2 or self.steps_1 or self.steps_2:
                raise ValueError(f"item {self.id!r}: 'messages_1'/'messages_2' (and their steps) belong to a "
                                 "pairwise item; a score item's conversation is 'messages'")
            check_messages(self.messages or [], item=self.id)
            sides = [("messages", self.messages or [])]
        else:
            if not (self.messages_1 and self.messages_2):
                raise ValueError(f"item {self.id!r}: a pairwise conversation item needs both 'messages_1' and "
                                 "'messages_2' (the two continuations of 'messages', or two whole trajectories)")
            if self.steps:
                raise ValueError(f"item {self.id!r}: a pairwise item's steps are 'steps_1' and 'steps_2'")
            prefix = self.messages or []
            if prefix:
                check_messages(prefix, item=self.id)
            for name in ("messages_1", "messages_2"):
                check_messages(getattr(self, name), item=self.id, field=name, prefix=prefix)
            sides = [(name, [*prefix, *getattr(self, name)]) for name in ("messages_1", "messages_2")]
        for name, messages in sides:
            turns = assistant_turns(messages)
            if self.turn is not None and self.turn > len(turns):
                raise ValueError(f"item {self.id!r}: turn {self.turn} asked, but {name} has {len(turns)} assistant "
                                 f"turn{'s' if len(turns) != 1 else ''}")
            if self.turn is not None and self.task is TaskKind.PAIRWISE and \
                    turns[self.turn - 1][1] <= len(self.messages or []):
                raise ValueError(f"item {self.id!r}: turn {self.turn} is in the shared prefix 'messages', the same "
                                 "for both assistants; the turn judged must be in 'messages_1' and 'messages_2'")
        if self.question in (None, ""):
            self.question = first_user_text(self.messages or self.messages_1 or [])

    def swapped(self) -> EvalItem:
        """The same pairwise item with the two answers in the other order (labels mapped too)."""
        if self.task is not TaskKind.PAIRWISE:
            raise ValueError(f"item {self.id!r}: only pairwise items can be swapped")
        human = dict(self.human or {})
        if "label" in human:
            human["label"] = SWAP_LABEL[str(human["label"])]
        if isinstance(human.get("votes"), list):  # several people's votes (MT-Bench), each in the answer order
            human["votes"] = [{**vote, "label": SWAP_LABEL.get(str(vote.get("label")), vote.get("label"))}
                              if isinstance(vote, dict) else vote for vote in human["votes"]]
        meta = dict(self.meta)
        if "model_1" in meta or "model_2" in meta:
            meta["model_1"], meta["model_2"] = self.meta.get("model_2"), self.meta.get("model_1")
        return self.model_copy(
            update={"response_1": self.response_2, "response_2": self.response_1, "human": human or None,
                    "meta": meta, "messages_1": self.messages_2, "messages_2": self.messages_1,
                    "steps_1": self.steps_2, "steps_2": self.steps_1}
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
    if isinstance(value, EvalItem):
        return value
    # every node of an item's graph reads the item's dict form (a copy of it at each step): validate it once, not at
    # every node (~0.3 ms a time). An equal dict is the same item; dicts compare in C, in microseconds.
    key = str(value.get("id"))
    held = _validated.get(key)
    if held is not None and held[0] == value:
        return held[1]
    item = EvalItem.model_validate(value)
    if len(_validated) >= _VALIDATED_KEPT:
        _validated.pop(next(iter(_validated)))  # the oldest: items in flight are the newest
    _validated[key] = (value, item)
    return item


_validated: dict[str, tuple[dict[str, Any], EvalItem]] = {}
_VALIDATED_KEPT = 1024
