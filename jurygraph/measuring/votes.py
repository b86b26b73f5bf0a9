"""Agreement with several people's votes on one item, as MT-Bench measures it (Zheng et al. 2023, Table 2).

Items may carry each person's vote beside the majority label (``human.votes``: ``{"judge", "label"}``, the label
``"1"``, ``"2"`` or ``"tie"``; the MT-Bench loader fills them). Two agreements, each under MT-Bench's two setups:

- between humans: every pair of votes on the same item, the share of pairs that agree (FastChat's
  ``compute_agreement.py``: pairs pooled over the items, not averaged per item);
- the panel against humans: the panel's verdict against each vote on its item, the share that agree.

``with ties`` (MT-Bench's S1) counts every pair, a tie agreeing with a tie; ``without ties`` (S2) leaves out every
pair in which either side is a tie. The rate of the panel against humans sits beside the rate between humans: a
panel that agrees with people as often as they agree with one another is as good as one more person.

Every vote counts by default: the MT-Bench paper calls all of its 3K votes expert votes. FastChat's script counts
only the judges named ``expert_*`` as humans (its ``author_*`` votes are a class of their own); ``judges="expert"``
(``jurygraph metaeval --vote-judges expert``) counts as it does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

SETUPS = ("with ties", "without ties")  # MT-Bench's S1 and S2


@dataclass
class Agreement:
    """How many compared pairs agreed, of how many."""

    agree: int = 0
    total: int = 0

    @property
    def rate(self) -> float:
        return self.agree / self.total if self.total else math.nan

    def add(self, a: str, b: str) -> None:
        self.total += 1
        self.agree += a == b


@dataclass
class VoteAgreement:
    """A run's agreement with the human votes of its items, and the humans' with one another (see the module)."""

    items: int = 0  # items with votes
    judges: str | None = None  # only the votes of judges whose name starts with this (None: every vote)
    votes: int = 0
    panel_missing: int = 0  # items with votes but no readable panel verdict: left out of the panel's agreement
    humans: dict[str, Agreement] = field(default_factory=lambda: {s: Agreement() for s in SETUPS})
    panel: dict[str, Agreement] = field(default_factory=lambda: {s: Agreement() for s in SETUPS})


def vote_labels(human: Mapping[str, Any] | None, judges: str | None = None) -> list[str]:
    """The labels of the votes in a record's ``human`` (none when it holds no votes); ``judges``: only the votes of
    judges whose name starts with it (``expert``: MT-Bench's experts, as FastChat's ``compute_agreement.py``
    counts them)."""
    votes = (human or {}).get("votes")
    if not isinstance(votes, list):
        return []
    if judges is not None:
        votes = [vote for vote in votes if isinstance(vote, Mapping) and str(vote.get("judge", "")).startswith(judges)]
    labels = [vote.get("label") if isinstance(vote, Mapping) else vote for vote in votes]
    return [str(label) for label in labels if label is not None]


def _compare(into: dict[str, Agreement], a: str, b: str) -> None:
    into["with ties"].add(a, b)
    if "tie" not in (a, b):
        into["without ties"].add(a, b)


def vote_agreement(records: Iterable[Mapping[str, Any]], kind: str = "pairwise",
                   judges: str | None = None) -> VoteAgreement | None:
    """The vote agreements of a run's records of ``kind`` (one record per item: the latest), None when no item
    carries a vote; ``judges``: count only the votes of judges whose name starts with it."""
    found = VoteAgreement(judges=judges)
    for record in records:
        if record.get("task") != kind:
            continue
        labels = vote_labels(record.get("human"), judges)
        if not labels:
            continue
        found.items += 1
        found.votes += len(labels)
        for a, b in combinations(labels, 2):
            _compare(found.humans, a, b)
        verdict = record.get("verdict") or {}
        label = verdict.get("label") if record.get("status", "ok") == "ok" and not verdict.get("missing") else None
        if label is None:
            found.panel_missing += 1
            continue
        for vote in labels:
            _compare(found.panel, str(label), vote)
    return found if found.items else None


def votes_json(found: VoteAgreement) -> dict[str, Any]:
    def side(agreements: dict[str, Agreement]) -> dict[str, Any]:
        return {setup.replace(" ", "_"): {"agree": a.agree, "pairs": a.total,
                                          "rate": None if math.isnan(a.rate) else round(a.rate, 6)}
                for setup, a in agreements.items()}

    return {"items": found.items, "votes": found.votes, "judges": found.judges, "panel_missing": found.panel_missing,
            "humans": side(found.humans), "panel": side(found.panel)}
