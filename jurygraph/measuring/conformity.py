"""Conformity: when a protocol records a judgment per round, how often does a member move toward the others
between rounds, and do its moves go toward the human label or away from it?

Rounds come from the records (``results.jsonl``):

- a protocol whose panel reads its rounds its own way (``Panel.rounds`` in its spec), e.g. DEBATE: the Scorer's
  score of every iteration (``verdict.detail.scores``): one member, revising after each critique; the Critic
  gives no score, so there are no "others" to move toward, only the human label;
- ChatEval when judgments are asked every round (``--stop-when consensus``, ``--devil``): each referee's
  judgment of each round (``verdict.detail.round_judgments``; under a calibration, per run in
  ``verdict.detail.runs``, mapped to the original answer order).

A judgment is a number: a score, or a pairwise label on the scale Assistant 1 = +1, tie = 0, Assistant 2 = -1
(so 1 -> tie is a move toward 2). Choice answers are not ordered: there, the distance to the others is the share
of others with another answer, and to the human label 0 (right) or 1 (wrong). For a member m between rounds
r and r + 1 (both readable): it *moves* when its judgment changes; the move is *toward the others* when its
distance to the others' round-r judgments (their mean; what everyone has heard by round r + 1) shrinks, and
*away* when it grows; likewise toward or away from the human label.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from statistics import fmean
from typing import Any

from jurygraph.judging.panel import PanelMembers
from jurygraph.measuring.members import in_original_order

ORDINAL = {"1": 1.0, "tie": 0.0, "2": -1.0}  # a pairwise label as a number, Assistant 1 high

Value = float | str
Episode = dict[str, dict[int, Value | None]]  # member -> round -> its judgment (None: unreadable)


@dataclass
class Moves:
    """One member's moves between consecutive rounds (``member == "all"``: every member's, summed)."""

    member: str
    transitions: int = 0  # consecutive rounds with a readable judgment in both
    moves: int = 0  # ... in which the judgment changed
    with_others: int = 0  # transitions where others judged the earlier round
    toward_others: int = 0
    away_from_others: int = 0
    labelled_moves: int = 0  # moves on items with a human label
    toward_human: int = 0
    away_from_human: int = 0

    def add(self, other: Moves) -> None:
        for name in ("transitions", "moves", "with_others", "toward_others", "away_from_others", "labelled_moves",
                     "toward_human", "away_from_human"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def conformity(self) -> float:
        """Share of a member's transitions (where there were others) in which it moved toward the others."""
        return self.toward_others / self.with_others if self.with_others else float("nan")


def value_of(judgment: Mapping[str, Any] | None, task: str) -> Value | None:
    """A judgment as a number (scores, pairwise labels) or an answer (choices); None when unreadable."""
    if not judgment or judgment.get("missing"):
        return None
    if task == "pairwise":
        return ORDINAL.get(str(judgment.get("label")))
    if task == "choice":
        return None if judgment.get("answer") is None else str(judgment["answer"])
    return None if judgment.get("score") is None else float(judgment["score"])


def human_value(record: Mapping[str, Any]) -> Value | None:
    human = record.get("human") or {}
    task = str(record.get("task", "score"))
    if task == "pairwise":
        return ORDINAL.get(str(human.get("label")))
    if task == "choice":
        return None if human.get("answer") is None else str(human["answer"])
    value = human.get(record.get("aspect") or "score")
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _rounds(entries: Iterable[Mapping[str, Any]], run: str | None, task: str) -> Episode:
    episode: Episode = {}
    for entry in entries:
        judgment = in_original_order(run, entry)
        episode.setdefault(str(entry.get("agent")), {})[int(entry.get("round") or 0)] = value_of(judgment, task)
    return episode


def episodes(record: Mapping[str, Any], panel: PanelMembers | None = None) -> list[Episode]:
    """The record's judgments per round, one episode per answer order (or MEC sample) judged; ``panel``: the run's
    protocol's, when it reads its rounds its own way."""
    if record.get("status", "ok") != "ok":
        return []
    if panel is not None and panel.rounds is not None:
        return panel.rounds(record)
    detail = (record.get("verdict") or {}).get("detail") or {}
    task = str(record.get("task", "score"))
    if detail.get("round_judgments"):
        return [_rounds(detail["round_judgments"], None, task)]
    runs = detail.get("runs") or {}
    return [_rounds(run["round_judgments"], name, task) for name, run in runs.items()
            if isinstance(run, Mapping) and run.get("round_judgments")]


def _distance(value: Value, others: Sequence[Value]) -> float:
    if isinstance(value, str):
        return sum(o != value for o in others) / len(others)
    return abs(value - fmean(float(o) for o in others))


def _human_distance(value: Value, human: Value) -> float:
    return float(value != human) if isinstance(value, str) else abs(value - float(human))


def conformity(records: Iterable[Mapping[str, Any]], panel: PanelMembers | None = None) -> list[Moves] | None:
    """Each member's moves between rounds, then the sum (``"all"``); None when no record has rounds. ``panel``: the
    run's protocol's (its spec's)."""
    found: dict[str, Moves] = {}
    any_rounds = False
    for record in records:
        human = human_value(record)
        for episode in episodes(record, panel):
            any_rounds = True
            for member, rounds in episode.items():
                moves = found.setdefault(member, Moves(member))
                order = sorted(rounds)
                for before, after in pairwise(order):
                    old, new = rounds[before], rounds[after]
                    if old is None or new is None:
                        continue
                    moves.transitions += 1
                    others = [v for name, r in episode.items() if name != member
                              for v in [r.get(before)] if v is not None]
                    moved = new != old
                    if others:
                        moves.with_others += 1
                        if moved:
                            change = _distance(new, others) - _distance(old, others)
                            moves.toward_others += change < 0
                            moves.away_from_others += change > 0
                    if moved:
                        moves.moves += 1
                        if human is not None:
                            moves.labelled_moves += 1
                            change = _human_distance(new, human) - _human_distance(old, human)
                            moves.toward_human += change < 0
                            moves.away_from_human += change > 0
    if not any_rounds:
        return None
    total = Moves("all")
    for moves in found.values():
        total.add(moves)
    return [*found.values(), total]
