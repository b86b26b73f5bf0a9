"""Reasoning tasks (ReFeR Appendix N.3: AQuA, CSQA, BBH date understanding, GSM8k): options, answer
normalisation, agreement among peers, and whether an answer matches a gold one (``item.human["answer"]``).
The accuracy report of a run is :mod:`jurygraph.measuring.reasoning`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from jurygraph.judging.aggregation import majority_label

_OPTION_LINE = re.compile(r"^\s*\(([A-Z])\)\s*(.+?)\s*$", re.MULTILINE)


def format_options(options: Mapping[str, str]) -> str:
    """Options as the datasets print them: one 'A) text' per line."""
    return "\n".join(f"{letter}) {text}" for letter, text in options.items())


def options_from_question(question: str) -> dict[str, str]:
    """The '(A) text' lines a question carries itself (BBH writes its options into the question)."""
    return {m.group(1): m.group(2) for m in _OPTION_LINE.finditer(question)}


def normalize_answer(value: Any) -> str:
    """One spelling per answer: option letters upper-case; numbers without '$', ',', GSM8k's '####' or '.0'."""
    text = str(value).strip()
    text = text.rpartition("####")[2].strip() if "####" in text else text
    number = text.replace(",", "").replace("$", "").strip()
    try:
        x = float(number)
    except ValueError:
        letter = re.fullmatch(r"\(?([A-Za-z])\)?\.?", text)
        return letter.group(1).upper() if letter else text
    return str(int(x)) if x.is_integer() else f"{x:g}"


def is_correct(answer: Any, gold: Any) -> bool:
    return normalize_answer(answer) == normalize_answer(gold)


def agreement(answers: Iterable[Any]) -> tuple[str | None, float | None]:
    """The majority answer and the share of answers that agree with it (None, None without answers;
    a tie for first place has no majority, and its share is that of the tied answers)."""
    majority, votes = majority_label(normalize_answer(a) for a in answers)
    if not votes:
        return None, None
    return majority, max(votes.values()) / sum(votes.values())
