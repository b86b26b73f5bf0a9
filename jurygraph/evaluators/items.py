"""What a harness hands an evaluator (``inputs``, ``outputs``, ``reference_outputs``) as a jurygraph item.

- ``inputs``: the question or context. A string is the pairwise item's ``question`` or the score item's ``source``;
  a mapping gives ``question``, ``source``, ``context`` and ``reference`` by those keys, and its other keys, as text,
  fill the first of ``question``/``source`` (as above) or ``context`` left empty.
- ``outputs``: a score item's response (a string, a mapping with ``response``, a mapping of one key, or a chat
  message); a pairwise item's two responses (``{"response_1": ..., "response_2": ...}`` or a list of two).
- ``reference_outputs``: the human label when there is one: a number (score) or ``1``/``2``/``tie`` (pairwise), or a
  mapping holding it under one of :func:`label_keys`. Without one of those keys there is no label; a label that
  cannot be read is an error naming it.

The item's id is a hash of everything it holds, so the same evaluation asked again (a re-run of an experiment, a
second harness) is the same item of the run directory: answered from it, never paid twice.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from jurygraph.judging.items import EvalItem, Scale, TaskKind, pairwise_label

TEXT_FIELDS = ("question", "source", "context", "reference")
RESPONSE_KEYS = ("response", "output", "answer", "content", "text")


class EvaluationInputError(ValueError):
    """What the harness passed cannot be judged: the message names the argument and what it needs."""


def label_keys(task: TaskKind, aspect: str | None) -> tuple[str, ...]:
    """The keys of ``reference_outputs`` read as the human label, in this order."""
    if task is TaskKind.PAIRWISE:
        return ("label", "preference", "winner")
    return tuple(dict.fromkeys([*([aspect] if aspect else []), "score", "label"]))


def harness_item(task: TaskKind, inputs: Any, outputs: Any, reference_outputs: Any, *, aspect: str | None = None,
                 scale: Scale | None = None, dataset: str | None = None) -> EvalItem:
    """The item a harness's evaluation describes, its id a hash of its content (see the module's doc)."""
    fields = _input_fields(task, inputs)
    if task is TaskKind.PAIRWISE:
        fields["response_1"], fields["response_2"] = _two_responses(outputs)
    else:
        fields["response"] = response_text(outputs, "outputs")
    human = human_label(task, reference_outputs, aspect)
    data: dict[str, Any] = {"task": task.value, "dataset": dataset, "aspect": aspect, "human": human,
                            "scale": scale.model_dump() if scale is not None and task is TaskKind.SCORE else None,
                            **fields}
    data = {key: value for key, value in data.items() if value is not None}
    if task is TaskKind.PAIRWISE and not data.get("question"):
        raise EvaluationInputError("inputs: a pairwise evaluation needs the question (or prompt) the two responses "
                                   "answer: give inputs as a string or a mapping with 'question'")
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    try:
        return EvalItem.model_validate({"id": f"e-{digest[:16]}", **data})
    except ValueError as err:
        raise EvaluationInputError(f"the evaluation cannot be judged: {err}") from None


def _input_fields(task: TaskKind, inputs: Any) -> dict[str, str]:
    primary = "question" if task is TaskKind.PAIRWISE else "source"
    if inputs is None:
        return {}
    if not isinstance(inputs, Mapping):
        return {primary: as_text(inputs)}
    fields = {key: as_text(inputs[key]) for key in TEXT_FIELDS if inputs.get(key) not in (None, "")}
    rest = {str(key): value for key, value in inputs.items() if key not in TEXT_FIELDS and value not in (None, "")}
    if rest:
        target = primary if primary not in fields else "context" if "context" not in fields else None
        if target is None:
            raise EvaluationInputError(f"inputs: {', '.join(sorted(rest))} have nowhere to go ({primary} and context "
                                       "are given); put them in one of the text fields: "
                                       f"{', '.join(TEXT_FIELDS)}")
        fields[target] = as_text(next(iter(rest.values()))) if len(rest) == 1 else \
            "\n".join(f"{key}: {as_text(value)}" for key, value in rest.items())
    return fields


def as_text(value: Any) -> str:
    """A value shown to the judges: text as it is, chat messages as ``role: content`` lines, anything else as JSON."""
    if isinstance(value, str):
        return value
    message = _message_text(value)
    if message is not None:
        return message
    if isinstance(value, Sequence) and value and all(_message_text(m) is not None for m in value):
        return "\n".join(f"{_role(m)}: {_message_text(m)}" for m in value)
    return json.dumps(value, ensure_ascii=False, default=str)


def _message_text(value: Any) -> str | None:
    """The text of a chat message (a LangChain message or an OpenAI-style ``{"role", "content"}``), else None."""
    text = getattr(value, "text", None)
    if isinstance(text, str) and hasattr(value, "type"):
        return text
    if isinstance(value, Mapping) and "role" in value and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _role(message: Any) -> str:
    return str(message.get("role") if isinstance(message, Mapping) else getattr(message, "type", "message"))


def response_text(value: Any, where: str) -> str:
    """One response as text; ``where`` names the argument in the error when there is none."""
    if isinstance(value, str):
        return value
    message = _message_text(value)
    if message is not None:
        return message
    if isinstance(value, Mapping):
        for key in RESPONSE_KEYS:
            if isinstance(value.get(key), str):
                return str(value[key])
        if len(value) == 1:
            return as_text(next(iter(value.values())))
        raise EvaluationInputError(f"{where}: give the response as a string or a mapping with 'response'; got keys "
                                   f"{', '.join(map(str, value)) or 'none'}")
    if value is None:
        raise EvaluationInputError(f"{where}: no response to judge (got None)")
    return as_text(value)


def _two_responses(outputs: Any) -> tuple[str, str]:
    if isinstance(outputs, Mapping) and "response_1" in outputs and "response_2" in outputs:
        return response_text(outputs["response_1"], "outputs.response_1"), \
            response_text(outputs["response_2"], "outputs.response_2")
    if isinstance(outputs, Sequence) and not isinstance(outputs, str) and len(outputs) == 2:
        return response_text(outputs[0], "outputs[0]"), response_text(outputs[1], "outputs[1]")
    shown = f"keys {', '.join(map(str, outputs))}" if isinstance(outputs, Mapping) else type(outputs).__name__
    raise EvaluationInputError("outputs: a pairwise evaluation compares two responses: give "
                               f"{{'response_1': ..., 'response_2': ...}} or a list of two; got {shown}")


def human_label(task: TaskKind, reference: Any, aspect: str | None) -> dict[str, Any] | None:
    """The item's ``human`` field from ``reference_outputs`` (None when it holds no label)."""
    if reference is None or reference == "" or (isinstance(reference, Mapping) and not reference):
        return None
    where = "reference_outputs"
    if isinstance(reference, Mapping):
        key = next((k for k in label_keys(task, aspect) if reference.get(k) not in (None, "")), None)
        if key is None:
            return None
        where, reference = f"reference_outputs[{key!r}]", reference[key]
    if task is TaskKind.PAIRWISE:
        label = pairwise_label(reference)
        if label is None:
            raise EvaluationInputError(f"{where}: {reference!r} is not a pairwise label ('1', '2' or 'tie'; also A/B, "
                                       "model_a/model_b, response_1/response_2)")
        return {"label": label}
    try:
        value = float(reference)
    except (TypeError, ValueError):
        raise EvaluationInputError(f"{where}: {reference!r} is not a score (a number)") from None
    if math.isnan(value) or isinstance(reference, bool):
        raise EvaluationInputError(f"{where}: {reference!r} is not a score (a number)")
    return {aspect or "score": value}
