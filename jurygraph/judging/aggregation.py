"""Combining several judgments into a verdict: mean or majority vote. Missing judgments are left out
and counted, never guessed; when none is readable the verdict itself is missing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from statistics import fmean
from typing import Any, Literal

from jurygraph.judging.items import TaskKind
from jurygraph.judging.judgments import Judgment, Verdict, pairwise_label

# "average" is ChatEval's word (its CLI option), "mean" the verdict's method name: the same rule
AggregateMethod = Literal["mean", "average", "majority"]
AGGREGATE_METHODS: tuple[str, ...] = ("average", "majority")
# an unreadable judgment: "missing" (jurygraph: left out and counted) or "code" (ChatEval's released code: the
# same prompt asked up to CODE_ATTEMPTS times, then its scoring turns a pairwise item into a tie)
UnreadableRule = Literal["missing", "code"]
UNREADABLE_RULES: tuple[str, ...] = ("missing", "code")
CODE_ATTEMPTS = 3  # agentverse's BaseAgent.max_retry


def majority_label(labels: Iterable[str]) -> tuple[str | None, dict[str, int]]:
    """The most frequent label; equal top counts between different labels give 'tie' (pairwise) or None."""
    votes = Counter(labels)
    if not votes:
        return None, {}
    ranked = votes.most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return None, dict(votes)
    return ranked[0][0], dict(votes)


def aggregate(judgments: Iterable[Judgment], kind: TaskKind, method: AggregateMethod | str | None = None) -> Verdict:
    """The verdict of several judges, without forced consensus (ChatEval §2).

    Scores: the mean. Choices: the majority vote. Pairwise, by default (``None``, ``"mean"`` or
    ``"average"``): each assistant's mean score over the judges, the label from the two means, equal means a
    tie. That is ChatEval's "average" and its scoring script, which sums each assistant's scores over the
    referees (equal sums: a tie; sums and means order the same). ``"majority"`` instead votes each judge's
    label (8-7 and 6-9 vote 1 and 2: a tie, although the means are 7.0 and 8.0). Judgments that carry a
    label but no scores (e.g. direct-choice answers) can only be voted: they get the majority vote,
    marked ``detail.no_scores``.
    """
    if method not in (None, "mean", "average", "majority"):
        raise ValueError(f"unknown aggregation {method!r}; choose one of {', '.join(AGGREGATE_METHODS)}")
    all_judgments = list(judgments)
    readable = [j for j in all_judgments if not j.missing]
    n_missing = len(all_judgments) - len(readable)
    base: dict[str, Any] = {"kind": kind, "n_judgments": len(readable), "n_missing": n_missing}
    if not readable:
        return Verdict(method=method or "none", missing=True, **base)
    if kind is TaskKind.SCORE:
        return Verdict(method="mean", score=fmean(j.score for j in readable if j.score is not None), **base)
    if kind is TaskKind.CHOICE:
        answer, votes = majority_label(j.answer for j in readable if j.answer is not None)
        return Verdict(method="majority", answer=answer, votes=votes,
                       detail={} if answer else {"no_majority": True}, **base)
    scored = all(j.score_1 is not None and j.score_2 is not None for j in readable)
    s1 = fmean(j.score_1 for j in readable if j.score_1 is not None) if scored else None
    s2 = fmean(j.score_2 for j in readable if j.score_2 is not None) if scored else None
    if method != "majority" and s1 is not None and s2 is not None:
        return Verdict(method="mean", label=pairwise_label(s1, s2), score_1=s1, score_2=s2, **base)
    winner, votes = majority_label(j.label for j in readable if j.label is not None)
    label = pairwise_label(1, 0) if winner == "1" else pairwise_label(0, 1) if winner == "2" else "tie"
    return Verdict(method="majority", label=label, score_1=s1, score_2=s2, votes=votes,
                   detail={} if scored else {"no_scores": True}, **base)


def tie_on_unreadable(judgments: Iterable[Judgment], kind: TaskKind) -> Verdict | None:
    """ChatEval's released scoring (``calc_score_calibration``'s ``try``/``except``: "tie") when a pairwise
    item has an unreadable judgment: the item is a tie, whatever the others said. None when every judgment
    is readable, or for score and choice items (the code has no such rule for them)."""
    all_judgments = list(judgments)
    unreadable = [j.agent for j in all_judgments if j.missing]
    if kind is not TaskKind.PAIRWISE or not unreadable:
        return None
    return Verdict(kind=kind, method="unreadable judgment: tie (released code)", label="tie",
                   n_judgments=len(all_judgments) - len(unreadable), n_missing=len(unreadable),
                   detail={"unreadable_tie": unreadable})


def consensus(judgments: Iterable[Judgment], tolerance: float = 0.0) -> bool:
    """Does a panel agree (jurygraph's early stop, not in the papers)? Pairwise: every judge names the same
    winner (or all say tie); scores: the highest and lowest score differ by at most ``tolerance``; choices:
    the same answer. A missing judgment, or no judgment at all, is never agreement."""
    readable = list(judgments)
    if not readable or any(j.missing for j in readable):
        return False
    if readable[0].kind is TaskKind.SCORE:
        scores = [j.score for j in readable]
        return None not in scores and max(scores) - min(scores) <= tolerance  # type: ignore[type-var,operator]
    values = {j.label if j.kind is TaskKind.PAIRWISE else j.answer for j in readable}
    return len(values) == 1 and None not in values
