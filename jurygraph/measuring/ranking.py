"""Ranking the systems of pairwise runs: Bradley–Terry strengths with bootstrap CIs, Elo as an option.

A *battle* is a pairwise item whose two answers name their systems (``meta.model_1`` / ``meta.model_2``;
FairEval's gpt35 and vicuna), with the judges' verdict: Assistant 1 wins, Assistant 2 wins, or a tie. When both
answer orders were judged (a calibrated run, or a run and its ``--reverse`` run, paired by
:func:`~jurygraph.measuring.position.paired_runs`) a win counts only if it survives the swap: the verdict in
each order (the majority of that order's samples) must name the same winner, otherwise the battle is a tie and
counted as *swap-inconsistent*. A battle whose verdict is missing is left out and counted.

Bradley–Terry: P(i beats j) = 1 / (1 + exp(s_j - s_i)). The strengths s maximise the likelihood of the battles,
a tie counting half a win each way (as Chatbot Arena's fit does), with a weak Gaussian prior (sd 10 on the
log-odds scale) that keeps an undefeated system's strength finite and does nothing else worth seeing; they are
centred (mean 0). scipy's L-BFGS-B minimises the negative log-likelihood with its exact gradient. CIs: percentile
bootstrap over battles (:func:`~jurygraph.measuring.metrics.bootstrap_cis`), refitting each resample.

Elo (an option): Chatbot Arena's online rating (K = 4, base 10, scale 400, from 1000), updated battle by battle
in the runs' order, so it depends on that order; Bradley–Terry does not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize, special, stats
from scipy.sparse import csgraph

from jurygraph.judging.aggregation import majority_label
from jurygraph.judging.judgments import PAIRWISE_LABELS
from jurygraph.measuring import metrics
from jurygraph.measuring.metaeval import latest_records
from jurygraph.measuring.metrics import Interval
from jurygraph.measuring.position import paired_runs
from jurygraph.measuring.tables import Table

PRIOR = 0.01  # precision of the Gaussian prior on each strength: sd 10 on the log-odds scale
ELO_K, ELO_BASE, ELO_SCALE, ELO_START = 4.0, 10.0, 400.0, 1000.0  # Chatbot Arena's online Elo


@dataclass(frozen=True)
class Battle:
    """One judged pair of answers: the bootstrap's unit."""

    key: str  # run / item id
    system_1: str
    system_2: str
    outcome: str  # the judges' verdict: "1", "2" or "tie"
    human: str | None = None  # the human label, when there is one
    both_orders: bool = False  # judged in both answer orders (the outcome survived the swap or is a tie)
    swap_inconsistent: bool = False  # a win in one order only: counted as a tie


@dataclass
class Battles:
    """The battles of some runs, and what was left out."""

    battles: list[Battle] = field(default_factory=list)
    missing: int = 0  # pairwise items whose verdict is missing (failed, unreadable)
    unnamed: int = 0  # pairwise items that do not name both systems
    same_system: int = 0  # items whose two answers come from one system: they say nothing about a ranking

    @property
    def swap_inconsistent(self) -> int:
        return sum(b.swap_inconsistent for b in self.battles)

    @property
    def both_orders(self) -> int:
        return sum(b.both_orders for b in self.battles)


def _label(record: Mapping[str, Any]) -> str | None:
    verdict = record.get("verdict") or {}
    if record.get("status", "ok") != "ok" or verdict.get("missing") or verdict.get("label") not in PAIRWISE_LABELS:
        return None
    return str(verdict["label"])


def _order_label(labels: Sequence[str]) -> str:
    """One answer order's verdict over its samples (MEC): the majority, a tie when none."""
    winner, _ = majority_label(labels)
    return winner or "tie"


def collect(names: Sequence[str], records: Sequence[Sequence[Mapping[str, Any]]],
            manifests: Sequence[Mapping[str, Any] | None],
            systems: Sequence[Mapping[str, tuple[str, str]]]) -> Battles:
    """The battles of the runs: ``systems[k]`` names each item's two systems in run ``k``. A ``--reverse`` run
    paired with its forward run adds the swapped order to the forward run's battles, not battles of its own."""
    both: dict[int, Mapping[str, list[tuple[str, str]]]] = {}
    partners: set[int] = set()
    for indices, _, pairs in paired_runs(names, records, manifests):
        both[indices[0]] = pairs
        partners.update(indices[1:])
    found = Battles()
    for k, run in enumerate(records):
        if k in partners:
            continue
        for record in latest_records(run):
            if record.get("task") != "pairwise":
                continue
            item = str(record.get("id"))
            pair = systems[k].get(item)
            if pair is None:
                found.unnamed += 1
                continue
            if pair[0] == pair[1]:
                found.same_system += 1
                continue
            label = _label(record)
            if label is None:
                found.missing += 1
                continue
            human = (record.get("human") or {}).get("label")
            orders = both.get(k, {}).get(item)
            if orders:
                first = _order_label([o for o, _ in orders])
                second = _order_label([s for _, s in orders])
                consistent = first == second
                found.battles.append(Battle(f"{names[k]}/{item}", pair[0], pair[1], first if consistent else "tie",
                                            None if human is None else str(human), True, not consistent))
            else:
                found.battles.append(Battle(f"{names[k]}/{item}", pair[0], pair[1], label,
                                            None if human is None else str(human)))
    return found


# --- Bradley–Terry ----------------------------------------------------------------------------------------


def _scores(outcome: str) -> tuple[float, float]:
    """What each side earns from a battle: a win 1, a tie half each way."""
    return {"1": (1.0, 0.0), "2": (0.0, 1.0)}.get(outcome, (0.5, 0.5))


def fit_strengths(wins: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """Bradley–Terry strengths (centred log-odds) from ``wins[i, j]``: what i earned against j (ties: half)."""
    k = wins.shape[0]

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        diff = theta[:, None] - theta[None, :]
        earned = wins * special.expit(-diff)  # each win's share of the gradient: 1 - P(i beats j)
        value = -float(np.sum(wins * special.log_expit(diff))) + PRIOR / 2 * float(theta @ theta)
        return value, -(earned.sum(axis=1) - earned.sum(axis=0)) + PRIOR * theta

    found = optimize.minimize(objective, np.zeros(k) if start is None else start, jac=True, method="L-BFGS-B",
                              options={"gtol": 1e-9, "maxiter": 1000})
    theta: np.ndarray = found.x - found.x.mean()
    return theta


@dataclass
class Standing:
    """One system's place: its strength with its CI, and its record."""

    name: str
    strength: float
    interval: Interval | None
    wins: int = 0
    losses: int = 0
    ties: int = 0


@dataclass
class Ranking:
    """Systems in rank order (strongest first), from ``battles`` outcomes."""

    standings: list[Standing]
    battles: int
    groups: list[list[str]] = field(default_factory=list)  # more than one: strengths rest on the prior

    def strengths(self) -> dict[str, float]:
        return {s.name: s.strength for s in self.standings}


def bradley_terry(battles: Sequence[Battle], *, human: bool = False, resamples: int = 1000,
                  confidence: float = 0.95, seed: int | None = 0) -> Ranking:
    """The Bradley–Terry ranking of the judges' outcomes (``human``: of the human labels, on the battles that
    have one), with percentile bootstrap CIs over battles."""
    chosen = [(b, outcome) for b in battles for outcome in [b.human if human else b.outcome]
              if outcome is not None and outcome in PAIRWISE_LABELS]
    systems = sorted({s for b, _ in chosen for s in (b.system_1, b.system_2)})
    index = {name: i for i, name in enumerate(systems)}
    first = np.array([index[b.system_1] for b, _ in chosen], dtype=int)
    second = np.array([index[b.system_2] for b, _ in chosen], dtype=int)
    earned = np.asarray([_scores(outcome) for _, outcome in chosen], dtype=np.float64).reshape(-1, 2)

    def table(draw: Sequence[int]) -> np.ndarray:
        wins = np.zeros((len(systems), len(systems)))
        rows = np.asarray(draw, dtype=int)
        np.add.at(wins, (first[rows], second[rows]), earned[rows, 0])
        np.add.at(wins, (second[rows], first[rows]), earned[rows, 1])
        return wins

    wins = table(range(len(chosen)))  # every battle: the fit, and the components below
    theta = fit_strengths(wins) if systems else np.zeros(0)
    intervals: dict[str, Interval] = {}
    if resamples and len(chosen) >= 2:
        def strengths_of(draw: Sequence[int]) -> dict[str, float]:
            present = np.zeros(len(systems), dtype=bool)
            present[first[list(draw)]] = present[second[list(draw)]] = True
            fitted = fit_strengths(table(draw), start=theta)
            # a system absent from a resample has no strength there, only the prior's 0
            return {name: float(fitted[i]) if present[i] else math.nan for i, name in enumerate(systems)}

        intervals = metrics.bootstrap_cis(strengths_of, len(chosen), resamples=resamples, confidence=confidence,
                                          seed=seed)
    standings = {name: Standing(name, float(theta[i]), intervals.get(name)) for i, name in enumerate(systems)}
    for battle, outcome in chosen:
        one, two = standings[battle.system_1], standings[battle.system_2]
        if outcome == "tie":
            one.ties += 1
            two.ties += 1
        else:
            winner, loser = (one, two) if outcome == "1" else (two, one)
            winner.wins += 1
            loser.losses += 1
    ranked = sorted(standings.values(), key=lambda s: (-s.strength, s.name))
    return Ranking(ranked, len(chosen), components(systems, wins) if systems else [])


def components(systems: Sequence[str], wins: np.ndarray) -> list[list[str]]:
    """The groups of systems linked both ways by wins (strongly connected components of "i earned against j").
    The maximum-likelihood strengths are finite only when there is one group (Ford 1957): otherwise a group
    that never lost to another is infinitely stronger, and the prior alone holds the distance."""
    count, labels = csgraph.connected_components(wins > 0, directed=True, connection="strong")
    return [[name for name, label in zip(systems, labels, strict=True) if label == group] for group in range(count)]


def elo(battles: Sequence[Battle], *, k: float = ELO_K) -> dict[str, float]:
    """Online Elo ratings after the battles, in their order (Chatbot Arena's parameters by default)."""
    ratings: dict[str, float] = {}
    for battle in battles:
        one = ratings.setdefault(battle.system_1, ELO_START)
        two = ratings.setdefault(battle.system_2, ELO_START)
        expected = 1 / (1 + ELO_BASE ** ((two - one) / ELO_SCALE))
        score, _ = _scores(battle.outcome)
        ratings[battle.system_1] = one + k * (score - expected)
        ratings[battle.system_2] = two - k * (score - expected)
    return ratings


def kendall_tau(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[float, float, int]:
    """Kendall tau-b between two rankings' strengths over the systems both rank: (tau, p-value, systems)."""
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        return math.nan, math.nan, len(common)
    found = stats.kendalltau([a[s] for s in common], [b[s] for s in common])
    return float(found.statistic), float(found.pvalue), len(common)


# --- tables and JSON --------------------------------------------------------------------------------------


def _f(value: float, digits: int = 2) -> str:
    # round first, then add 0.0: a strength of -1e-17 is shown as +0.00, not -0.00
    return "–" if math.isnan(value) else f"{round(value, digits) + 0.0:+.{digits}f}"


def _ci(interval: Interval | None) -> str:
    if interval is None or math.isnan(interval.low):
        return "–"
    return f"[{_f(interval.low)}, {_f(interval.high)}]"


def ranking_table(judges: Ranking, found: Battles, runs: Sequence[str], human: Ranking | None = None) -> Table:
    """The judges' ranking (and the humans' beside it) with each system's record."""
    human_place = {s.name: (k, s) for k, s in enumerate(human.standings, 1)} if human else {}
    rows = []
    for place, standing in enumerate(judges.standings, 1):
        row = [str(place), standing.name, _f(standing.strength), _ci(standing.interval), str(standing.wins),
               str(standing.losses), str(standing.ties)]
        if human is not None:
            theirs = human_place.get(standing.name)
            row += [str(theirs[0]), _f(theirs[1].strength), _ci(theirs[1].interval)] if theirs else ["–", "–", "–"]
        rows.append(row)
    columns = ["Rank", "System", "Strength", "95% CI", "W", "L", "T"]
    if human is not None:
        columns += ["Human rank", "Human strength", "95% CI"]
    if judges.standings and judges.standings[0].interval is not None:
        level = judges.standings[0].interval.confidence
        columns = [f"{level:.0%} CI" if c == "95% CI" else c for c in columns]
    notes = ["strength: Bradley–Terry log-odds, mean 0: P(A beats B) = 1 / (1 + exp(strength B - strength A)); "
             "a tie counts half a win each way",
             f"{len(found.battles)} battles from {', '.join(runs)}; judged in both answer orders: {found.both_orders}"
             f" (wins that did not survive the swap, counted as ties: {found.swap_inconsistent}); in one order "
             f"only: {len(found.battles) - found.both_orders}"]
    if len(judges.groups) > 1:
        notes.append("no chain of wins leads from every system to every other (groups: "
                     + " | ".join(", ".join(g) for g in judges.groups) + "): the likelihood alone would put the "
                     "groups infinitely far apart; the prior (sd 10) holds the distance, only their order means "
                     "something")
    left = [f"{n} {what}" for n, what in ((found.missing, "with a missing verdict"),
                                          (found.unnamed, "naming no systems"),
                                          (found.same_system, "with one system on both sides")) if n]
    if left:
        notes.append("left out: " + ", ".join(left))
    if human is not None:
        tau, p, n = kendall_tau(judges.strengths(), human.strengths())
        notes.append(f"Kendall τ between the judges' and the human ranking: {_f(tau, 3)} over {n} systems"
                     + ("" if math.isnan(p) else f" (p = {p:.3g})")
                     + f"; the human ranking rests on the {human.battles} battles with a human label")
    return Table("Bradley–Terry ranking of the systems", columns, rows, notes=notes)


def elo_table(ratings: Mapping[str, float], k: float) -> Table:
    ranked = sorted(ratings.items(), key=lambda pair: (-pair[1], pair[0]))
    return Table("Elo ratings (online, in the runs' order)", ["Rank", "System", "Elo"],
                 [[str(place), name, f"{rating:.1f}"] for place, (name, rating) in enumerate(ranked, 1)],
                 notes=[f"K = {k:g}, base {ELO_BASE:g}, scale {ELO_SCALE:g}, start {ELO_START:g} (Chatbot Arena's); "
                        "Elo depends on the battles' order, Bradley–Terry does not"])


def _num(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def standings_json(ranking: Ranking) -> list[dict[str, Any]]:
    return [{"name": s.name, "strength": _num(s.strength),
             "ci": None if s.interval is None else [_num(s.interval.low), _num(s.interval.high)],
             "wins": s.wins, "losses": s.losses, "ties": s.ties} for s in ranking.standings]


def ranking_json(judges: Ranking, found: Battles, runs: Sequence[str], human: Ranking | None = None,
                 ratings: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The rank as one JSON object: ``systems`` (name, strength, ci, wins, losses, ties) in rank order."""
    data: dict[str, Any] = {
        "runs": list(runs), "model": "bradley-terry", "scale": "log-odds, mean 0",
        "systems": standings_json(judges),
        "battles": len(found.battles), "both_orders": found.both_orders,
        "swap_inconsistent": found.swap_inconsistent, "missing": found.missing, "unnamed": found.unnamed,
        "same_system": found.same_system,
        "separated": judges.groups if len(judges.groups) > 1 else [],
        "human": None,
    }
    if human is not None:
        tau, p, n = kendall_tau(judges.strengths(), human.strengths())
        data["human"] = {"systems": standings_json(human), "battles": human.battles,
                         "kendall_tau": _num(tau), "p_value": _num(p), "systems_compared": n}
    if ratings is not None:
        data["elo"] = [{"name": name, "rating": rating}
                       for name, rating in sorted(ratings.items(), key=lambda pair: (-pair[1], pair[0]))]
    return data
