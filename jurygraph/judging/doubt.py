"""How unsure a panel is of its verdict: doubt signals, computed from a graph's state (or a results line), and the
conditions (``agreement<1``, ``flip``) that send an item to a stronger judge or to a person.

Every signal is about the **panel's** verdict (the one the protocol gave, before any escalation or review). A signal
that does not apply to a protocol is absent from the result, never 0:

``agreement``      pairwise and choice verdicts that combine two or more members: the share of the members with a
                   readable judgment whose label (pairwise: 1, 2 or tie; choice: the answer) is the most common one.
                   1 when they all agree; 2 of 3 agreeing is 0.667; a 1-1 split is 0.5. Under a calibration
                   (both answer orders, MEC samples) a member's label is that of its mean scores over its runs, in the
                   original answer order (as the panel diagnostics read members).
``spread``         score verdicts that combine two or more members: the highest member score minus the lowest.
``margin``         pairwise verdicts with both scores: ``|score_1 - score_2|`` of the verdict (0 = a tie on scores).
``sample_spread``  ReFeR Turbo's area chair and G-Eval / Analyze-Rate with n >= 2 readable samples: the standard
                   deviation (population) of the samples' ratings.
``flip``           pairwise verdicts judged in both answer orders (``--calibrate bpc``, FairEval's BPC, ChatEval's
                   default): True when the label of the runs in the original order differs from the label of the runs
                   in the swapped order (mapped back), each order's label from its mean scores.
``missing``        always: how many of the judges behind the verdict gave no readable judgment (a member missing in
                   any run counts once; ReFeR's missing peers plus its area chair if its verdict is missing; a protocol
                   with one judge: 1 when its verdict is missing).

Conditions are ``SIGNAL<VALUE``, ``SIGNAL>VALUE`` (also ``<=``, ``>=``), or a bare ``flip`` (True) or ``missing``
(more than 0). A condition on a signal the item does not have never holds.
"""

from __future__ import annotations

import math
import operator
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean, pstdev
from typing import Any

from jurygraph.judging.aggregation import aggregate
from jurygraph.judging.items import TaskKind
from jurygraph.judging.judgments import Judgment, map_back, pairwise_label

__all__ = ["SIGNALS", "Condition", "decided_by", "doubt_signals", "panel_verdict", "parse_conditions", "triggered"]


@dataclass(frozen=True)
class Signal:
    """A doubt signal: what its values are and which way is doubtful (for conditions and coverage curves)."""

    name: str
    kind: str  # "share", "number", "flag", "count"
    doubtful: str  # "<": low values are doubtful; ">": high values are
    meaning: str
    applies: str  # where the signal exists (an error message names it when a run would never have it; which
    # protocols give it is their specs' to say: ProtocolSpec.signals)


SIGNALS: dict[str, Signal] = {s.name: s for s in (
    Signal("agreement", "share", "<", "share of the panel's members with the majority label",
           "a panel of two or more members on pairwise or choice items"),
    Signal("spread", "number", ">", "highest minus lowest member score",
           "a panel of two or more members on score items"),
    Signal("margin", "number", "<", "|score_1 - score_2| of the pairwise verdict", "pairwise items"),
    Signal("sample_spread", "number", ">", "standard deviation of the n samples' ratings",
           "n >= 2 samples of one judge's rating on score items"),
    Signal("flip", "flag", ">", "the verdict changes with the answer order",
           "pairwise items judged in both answer orders (--calibrate bpc)"),
    Signal("missing", "count", ">", "judges without a readable judgment", "every protocol"),
)}

# what the judgments of a state are keyed by, besides a member's name: a calibration's "<run>/<agent>", one judge's
# samples or reviews "<agent> #<i>" (G-Eval, FairEval's evaluator), and ReFeR's area chair, which decides rather than
# votes (its name is graphs.refer.AREA_CHAIR, not imported here: a test keeps them equal)
_SAMPLE = re.compile(r" #\d+$")
AREA_CHAIR = "area_chair"
SWAPPED = "swapped_order"


# --- which verdict the signals are about ----------------------------------------------------------------------


def panel_verdict(values: Mapping[str, Any]) -> dict[str, Any]:
    """The panel's own verdict in a state or a results line: the verdict a review or an escalation replaced, else the
    verdict itself (empty when there is none yet)."""
    verdict = dict(values.get("verdict") or {})
    detail = verdict.get("detail") or {}
    if isinstance(detail.get("review"), Mapping) and detail["review"].get("panel_verdict"):
        return dict(detail["review"]["panel_verdict"])
    if isinstance(detail.get("escalation"), Mapping) and detail["escalation"].get("panel"):
        return dict(detail["escalation"]["panel"])
    return verdict


def decided_by(verdict: Mapping[str, Any] | None) -> str:
    """Who gave a verdict: ``"review"`` (a person), ``"escalation"`` (the stronger judge), ``"trajectory_match"`` (the
    tool-call match before the panel, :mod:`jurygraph.graphs.trajectory`) or ``"panel"``."""
    detail = (verdict or {}).get("detail") or {}
    if isinstance(detail.get("review"), Mapping):
        return "review"
    if isinstance(detail.get("escalation"), Mapping):
        return str(detail["escalation"].get("decided_by") or "panel")
    if isinstance(detail.get("trajectory_match"), Mapping) and detail["trajectory_match"].get("decided"):
        return "trajectory_match"
    return "panel"


# --- the signals ------------------------------------------------------------------------------------------------


def doubt_signals(values: Mapping[str, Any]) -> dict[str, Any]:
    """The doubt signals of the panel's verdict in ``values`` (a graph state or a results line; see the module's doc).
    Empty when there is no verdict yet."""
    verdict = panel_verdict(values)
    if not verdict:
        return {}
    detail = verdict.get("detail") or {}
    kind = TaskKind(verdict.get("kind") or (values.get("item") or {}).get("task") or values.get("task") or "score")
    found: dict[str, Any] = {}
    if is_debate(detail) or _inner_debate(values):
        found["missing"] = int(bool(verdict.get("missing")))
        return found
    if "peers" in detail and "missing_peers" in detail:  # ReFeR: the peers vote, the area chair decides
        judgments = values.get("judgments") or {}
        members = {peer: _member(judgments.get(peer)) for peer in detail["peers"]}
        found.update(_panel(members, kind))
        found["missing"] = int(detail.get("n_missing_peers") or 0) + int(bool(verdict.get("missing")))
        ratings = detail.get("ratings")
        if isinstance(ratings, list):
            found.update(_sample_spread(ratings))
    elif detail.get("estimator") == "samples" and isinstance(detail.get("scores"), list):  # G-Eval, Analyze-Rate
        found.update(_sample_spread(detail["scores"]))
        found["missing"] = int(bool(verdict.get("missing")))
    elif isinstance(detail.get("reviews"), Mapping):  # FairEval's own evaluator: one judge, k reviews per order
        found["missing"] = int(bool(verdict.get("missing")))
    else:
        members = _members(values.get("judgments") or {}, kind)
        found.update(_panel(members, kind))
        found["missing"] = sum(m.missing for m in members.values()) if members else int(bool(verdict.get("missing")))
    if kind is TaskKind.PAIRWISE:
        s1, s2 = verdict.get("score_1"), verdict.get("score_2")
        if s1 is not None and s2 is not None and not verdict.get("missing"):
            found["margin"] = round(abs(float(s1) - float(s2)), 6)
        flip = _flip(detail)
        if flip is not None:
            found["flip"] = flip
    return {name: found[name] for name in SIGNALS if name in found}


def is_debate(detail: Mapping[str, Any]) -> bool:
    """A DEBATE verdict: its detail holds the Scorer's score of every iteration and who decided."""
    return isinstance(detail.get("scores"), list) and "decided_by" in detail


def _inner_debate(values: Mapping[str, Any]) -> bool:
    """A calibration around DEBATE: its runs' own verdicts (kept in the state's ``runs``) are DEBATE's."""
    runs = values.get("runs") or {}
    return any(is_debate(((run or {}).get("verdict") or {}).get("detail") or {}) for run in runs.values())


@dataclass(frozen=True)
class Member:
    """A panel member's judgment of the item in the original answer order (None: nothing readable in any run) and
    whether it was missing anywhere (a calibrated member missing in one order still votes with the other)."""

    judgment: Judgment | None
    missing: bool


def _member(data: Mapping[str, Any] | None) -> Member:
    judgment = Judgment.model_validate(data) if data else None
    return Member(None if judgment is None or judgment.missing else judgment, judgment is None or judgment.missing)


def _members(judgments: Mapping[str, Any], kind: TaskKind) -> dict[str, Member]:
    """The panel's members: each agent's judgment, combined over a calibration's runs (mean scores, original order)."""
    runs_of: dict[str, list[Judgment]] = {}
    for key, data in judgments.items():
        run, _, agent = key.rpartition("/")
        if _SAMPLE.search(key) or agent == AREA_CHAIR:
            continue
        # a calibration's run, possibly inside a per-turn run ("turn_2/swapped_order")
        judgment = map_back(dict(data)) if run.rpartition("/")[2].startswith(SWAPPED) else dict(data)
        runs_of.setdefault(agent, []).append(Judgment.model_validate(judgment))
    found: dict[str, Member] = {}
    for agent, runs in runs_of.items():
        readable = [j for j in runs if not j.missing]
        if len(runs) == 1 or not readable:
            found[agent] = Member(readable[0] if readable else None, len(readable) < len(runs))
            continue
        verdict = aggregate(readable, kind, "mean")
        combined = Judgment(agent=agent, kind=kind, label=verdict.label, score=verdict.score, answer=verdict.answer,
                            score_1=verdict.score_1, score_2=verdict.score_2)
        found[agent] = Member(combined, len(readable) < len(runs))
    return found


def _label_of(judgment: Judgment) -> str | None:
    if judgment.kind is TaskKind.PAIRWISE:
        return judgment.label
    if judgment.kind is TaskKind.CHOICE:
        return judgment.answer
    return None


def _panel(members: Mapping[str, Member], kind: TaskKind) -> dict[str, Any]:
    """``agreement`` (labels) or ``spread`` (scores) of two or more members with readable judgments."""
    readable = [m.judgment for m in members.values() if m.judgment is not None]
    if kind is TaskKind.SCORE:
        scores = [float(j.score) for j in readable if j.score is not None]
        return {"spread": round(max(scores) - min(scores), 6)} if len(scores) >= 2 else {}
    labels = [label for j in readable if (label := _label_of(j)) is not None]
    if len(labels) < 2:
        return {}
    top = Counter(labels).most_common(1)[0][1]
    return {"agreement": round(top / len(labels), 6)}


def _sample_spread(ratings: Iterable[Any]) -> dict[str, Any]:
    readable = [float(r) for r in ratings if isinstance(r, int | float) and not isinstance(r, bool)
                and not math.isnan(float(r))]
    return {"sample_spread": round(pstdev(readable), 6)} if len(readable) >= 2 else {}


def _flip(detail: Mapping[str, Any]) -> bool | None:
    """Whether the runs in the original order and those in the swapped order (mapped back) give different labels."""
    entries = detail.get("runs") if isinstance(detail.get("runs"), Mapping) else detail.get("reviews")
    if not isinstance(entries, Mapping) or not detail.get("calibration"):
        return None
    orders: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for name, run in entries.items():
        if not isinstance(run, Mapping) or run.get("missing"):
            continue
        s1, s2 = run.get("score_1"), run.get("score_2")
        if s1 is not None and s2 is not None:
            orders[str(name).startswith(SWAPPED)].append((float(s1), float(s2)))
    if not orders[False] or not orders[True]:
        return None
    labels = [pairwise_label(fmean(a for a, _ in pairs), fmean(b for _, b in pairs)) for pairs in orders.values()]
    return labels[0] != labels[1]


# --- conditions -----------------------------------------------------------------------------------------------

_OPS: dict[str, Callable[[Any, Any], bool]] = {"<=": operator.le, ">=": operator.ge, "<": operator.lt,
                                               ">": operator.gt}
_CONDITION = re.compile(r"^\s*(?P<name>[A-Za-z_]+)\s*(?:(?P<op><=|>=|<|>)\s*(?P<value>\S+))?\s*$")


@dataclass(frozen=True)
class Condition:
    """``SIGNAL<VALUE`` and its kin: does an item's signal make it doubtful?"""

    signal: str
    op: str | None = None  # None: a flag is True, a count is above 0
    value: float | None = None

    @property
    def text(self) -> str:
        if self.op is None:
            return self.signal
        return f"{self.signal}{self.op}{self.value:g}"

    def holds(self, signals: Mapping[str, Any]) -> bool:
        """True when the signal is present and doubtful by this condition (an absent signal never holds)."""
        found = signals.get(self.signal)
        if found is None:
            return False
        if self.op is None:
            return bool(found) if isinstance(found, bool) else float(found) > 0
        return _OPS[self.op](float(found), self.value)


def parse_conditions(texts: str | Iterable[str]) -> list[Condition]:
    """Conditions from ``agreement<1``, ``margin<=0.5``, ``flip``, ``missing`` (also comma-separated); a ValueError
    naming the text for an unknown signal, a comparison a flag cannot take, or a number that is not one."""
    parts = [texts] if isinstance(texts, str) else list(texts)
    found = []
    for text in (piece for part in parts for piece in str(part).split(",") if piece.strip()):
        match = _CONDITION.match(text)
        name = match["name"] if match else None
        if match is None or name not in SIGNALS:
            raise ValueError(f"doubt condition {text.strip()!r}: write SIGNAL<VALUE, SIGNAL>VALUE, 'flip' or "
                             f"'missing'; signals: {', '.join(SIGNALS)}")
        signal = SIGNALS[name]
        if match["op"] is None:
            if signal.kind not in ("flag", "count"):
                raise ValueError(f"doubt condition {text.strip()!r}: {name} needs a comparison, e.g. {name}"
                                 f"{signal.doubtful}{1 if signal.kind == 'share' else 0.5}")
            found.append(Condition(name))
            continue
        if signal.kind == "flag":
            raise ValueError(f"doubt condition {text.strip()!r}: {name} is yes or no; write just '{name}'")
        try:
            value = float(match["value"])
        except ValueError:
            raise ValueError(f"doubt condition {text.strip()!r}: {match['value']!r} is not a number") from None
        if math.isnan(value):
            raise ValueError(f"doubt condition {text.strip()!r}: the threshold is not a number")
        found.append(Condition(name, match["op"], value))
    if not found:
        raise ValueError("no doubt condition given (e.g. agreement<1, margin<1, flip, missing)")
    return found


def triggered(conditions: Sequence[Condition], signals: Mapping[str, Any]) -> list[str]:
    """The conditions (as text) that hold for these signals."""
    return [c.text for c in conditions if c.holds(signals)]
