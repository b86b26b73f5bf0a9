"""Agreement with humans, computed as the literature computes it: pure functions on arrays.

- Correlations (:func:`correlations`): Pearson, Spearman (average ranks for ties) and Kendall tau-b,
  all from scipy, exactly as UniEval's ``reproduce/correlation.py`` and G-Eval call them.
- Pooled (:func:`pooled`): one correlation over all items (Topical-Chat "turn-level" in ChatEval,
  G-Eval, UniEval, ReFeR).
- Grouped (:func:`grouped`): one correlation per group, averaged over groups; a group whose human or
  predicted scores are all equal has no correlation and is skipped and counted (SummEval
  summary-level in G-Eval/UniEval/DEBATE: group = document; DEBATE's Topical-Chat: group = context).
- Labels (:func:`accuracy`, :func:`cohen_kappa`, and :func:`kappa_from_codes` for resamples): the 3-way
  pairwise verdict of FairEval/ChatEval.
- Panels (:func:`error_correlation`, :func:`effective_number`): how alike the members' errors are, and how
  many independent judges a panel with that error correlation is worth (participation ratio).
- Uncertainty: :func:`bootstrap_ci` resamples units (documents, contexts, questions);
  :func:`paired_bootstrap`, :func:`permutation_test` and :func:`paired_t_test` compare two judges
  on the same items.

Inputs are plain sequences; missing verdicts must already be excluded (and counted) by the caller.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

STATISTICS = ("pearson", "spearman", "kendall")
Scores = Sequence[float] | np.ndarray


@dataclass(frozen=True)
class Correlation:
    """Pearson r, Spearman rho, Kendall tau-b of predicted vs human scores, over ``n`` items.

    For a grouped correlation ``n`` counts items in the groups used, ``groups`` the groups averaged
    and ``skipped`` the groups left out because their human or predicted scores were constant.
    """

    pearson: float
    spearman: float
    kendall: float
    n: int
    groups: int | None = None
    skipped: int = 0
    skipped_groups: tuple[str, ...] = ()

    def get(self, statistic: str) -> float:
        if statistic not in STATISTICS:
            raise KeyError(f"unknown statistic {statistic!r}; known: {', '.join(STATISTICS)}")
        return float(getattr(self, statistic))


def _constant(values: Scores) -> bool:
    return len(set(np.asarray(values, dtype=float).tolist())) <= 1


def correlations(predicted: Scores, human: Scores) -> Correlation:
    """The three correlations of two equally long score lists (NaN where undefined, e.g. constant input)."""
    pred = np.asarray(predicted, dtype=float)
    gold = np.asarray(human, dtype=float)
    if pred.shape != gold.shape:
        raise ValueError(f"predicted ({pred.size}) and human ({gold.size}) scores differ in length")
    if pred.size < 2 or _constant(pred) or _constant(gold):
        return Correlation(math.nan, math.nan, math.nan, int(pred.size))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        return Correlation(
            pearson=float(stats.pearsonr(pred, gold)[0]),
            spearman=float(stats.spearmanr(pred, gold)[0]),  # average ranks for ties
            kendall=float(stats.kendalltau(pred, gold)[0]),  # tau-b (scipy's default variant)
            n=int(pred.size),
        )


def correlation(statistic: str, predicted: Scores, human: Scores) -> float:
    """One of the three correlations (NaN where undefined); cheaper than :func:`correlations`."""
    pred = np.asarray(predicted, dtype=float)
    gold = np.asarray(human, dtype=float)
    if pred.size < 2 or _constant(pred) or _constant(gold):
        return math.nan
    function = {"pearson": stats.pearsonr, "spearman": stats.spearmanr, "kendall": stats.kendalltau}[statistic]
    return float(function(pred, gold)[0])


def pooled(predicted: Scores, human: Scores) -> Correlation:
    """One correlation over all items (Topical-Chat turn-level as in ChatEval, G-Eval, UniEval, ReFeR)."""
    return correlations(predicted, human)


def grouped(predicted: Scores, human: Scores, groups: Sequence[Hashable]) -> Correlation:
    """Per-group correlations averaged over groups (SummEval summary-level; DEBATE's per-context).

    As in UniEval's ``correlation_for_summ``: a group whose predicted or human scores take a single
    value is skipped (its correlation is undefined) and counted in ``skipped``. All three statistics
    use the same groups. NaN when no group is left.
    """
    pred = np.asarray(predicted, dtype=float)
    gold = np.asarray(human, dtype=float)
    if not (len(pred) == len(gold) == len(groups)):
        raise ValueError("predicted, human and groups must have the same length")
    members: dict[Hashable, list[int]] = {}
    for index, group in enumerate(groups):
        members.setdefault(group, []).append(index)
    found: list[Correlation] = []
    skipped: list[str] = []
    for group, rows in members.items():
        if len(rows) < 2 or _constant(pred[rows]) or _constant(gold[rows]):
            skipped.append(str(group))
            continue
        found.append(correlations(pred[rows], gold[rows]))
    if not found:
        return Correlation(math.nan, math.nan, math.nan, 0, 0, len(skipped), tuple(skipped))
    return Correlation(
        pearson=float(np.mean([c.pearson for c in found])),
        spearman=float(np.mean([c.spearman for c in found])),
        kendall=float(np.mean([c.kendall for c in found])),
        n=sum(c.n for c in found), groups=len(found), skipped=len(skipped), skipped_groups=tuple(skipped),
    )


def accuracy(predicted: Sequence[Hashable], human: Sequence[Hashable]) -> float:
    """Share of items whose predicted label equals the human label."""
    if len(predicted) != len(human):
        raise ValueError("predicted and human labels differ in length")
    if not predicted:
        return math.nan
    return sum(p == h for p, h in zip(predicted, human, strict=True)) / len(predicted)


def cohen_kappa(predicted: Sequence[Hashable], human: Sequence[Hashable],
                labels: Sequence[Hashable] | None = None) -> float:
    """Cohen's kappa: (p_o - p_e) / (1 - p_e), p_e from the two raters' marginal label frequencies.

    This is the unweighted kappa of FairEval's ``get_kappa`` (and sklearn's ``cohen_kappa_score``); it
    reproduces the values in the ChatEval development-run provenance note exactly. NaN when p_e = 1.
    """
    if len(predicted) != len(human):
        raise ValueError("predicted and human labels differ in length")
    n = len(predicted)
    if n == 0:
        return math.nan
    classes = list(labels) if labels is not None else sorted({*predicted, *human}, key=str)
    p_o = accuracy(predicted, human)
    p_e = sum((list(predicted).count(c) / n) * (list(human).count(c) / n) for c in classes)
    return math.nan if p_e == 1 else (p_o - p_e) / (1 - p_e)


def kappa_from_codes(predicted: np.ndarray, human: np.ndarray, classes: int) -> float:
    """:func:`cohen_kappa` of two integer arrays whose classes are the codes ``0 .. classes - 1`` (only they enter
    p_e, as ``labels`` do there; any other value has a higher code): the same number, ~50x faster, for the
    bootstrap's resamples. NaN when p_e = 1."""
    p_o = float(np.mean(predicted == human))
    p_e = sum(float(a) * float(b) for a, b in zip(np.bincount(predicted, minlength=classes)[:classes],
                                                  np.bincount(human, minlength=classes)[:classes],
                                                  strict=True)) / predicted.size ** 2
    return math.nan if p_e == 1 else (p_o - p_e) / (1 - p_e)


def confusion(predicted: Sequence[Hashable], human: Sequence[Hashable],
              labels: Sequence[Hashable]) -> np.ndarray:
    """Counts: rows = human label, columns = predicted label, in the order of ``labels``."""
    index = {label: i for i, label in enumerate(labels)}
    matrix = np.zeros((len(labels), len(labels)), dtype=int)
    for p, h in zip(predicted, human, strict=True):
        matrix[index[h], index[p]] += 1
    return matrix


def score_distribution(scores: Sequence[float], low: int, high: int) -> dict[int, float]:
    """Percentage of scores at each integer point of the scale (DEBATE, Table 2).

    Fractional scores (human means over annotators, means over agents) are rounded half up to the
    nearest point and clipped to the scale: the paper does not say how it binned them.
    """
    points = list(range(int(low), int(high) + 1))
    if not scores:
        return {p: math.nan for p in points}
    binned = [min(max(math.floor(float(s) + 0.5), points[0]), points[-1]) for s in scores]
    return {p: 100.0 * binned.count(p) / len(binned) for p in points}


# --- panels ------------------------------------------------------------------------------------


def error_correlation(errors: np.ndarray) -> np.ndarray:
    """Pearson correlations between the rows of ``errors`` (one row per judge, one column per item).

    A judge whose errors do not vary on these items (it never errs, or errs the same way every time) has no
    correlation with anyone: its row and column are NaN, its diagonal 1."""
    values = np.asarray(errors, dtype=float)
    centred = values - values.mean(axis=1, keepdims=True)
    norms = np.sqrt((centred ** 2).sum(axis=1))
    varies = norms > 1e-12 * max(1.0, float(np.abs(values).max(initial=0.0)))
    matrix = np.full((values.shape[0], values.shape[0]), math.nan)
    if varies.any():
        unit = centred[varies] / norms[varies, None]
        matrix[np.ix_(varies, varies)] = np.clip(unit @ unit.T, -1.0, 1.0)
    np.fill_diagonal(matrix, 1.0)
    return matrix


def effective_number(correlation: np.ndarray) -> float:
    """The effective number of independent judges behind a k x k error correlation matrix R: the participation
    ratio of its eigenvalues, (sum λ)^2 / sum λ^2 = k^2 / sum_ij R_ij^2 (Gao et al. 2017, "A theory of
    multineuronal dimensionality, dynamics and measurement", bioRxiv 214262; Kish's effective sample size
    (sum w)^2 / sum w^2 with the eigenvalues as weights). k uncorrelated judges give k, k judges making the
    same errors give 1; with every pairwise correlation equal to ρ it is k / (1 + (k - 1) ρ^2).
    NaN when R has an undefined (NaN) entry."""
    matrix = np.asarray(correlation, dtype=float)
    if matrix.size == 0 or np.isnan(matrix).any():
        return math.nan
    eigenvalues = np.linalg.eigvalsh((matrix + matrix.T) / 2)
    return float(eigenvalues.sum() ** 2 / np.sum(eigenvalues ** 2))


# --- uncertainty -------------------------------------------------------------------------------

Statistic = Callable[[Sequence[int]], float]
"""A statistic of a resample, given as the list of unit indices drawn (with repetition)."""


@dataclass(frozen=True)
class Interval:
    """A percentile bootstrap interval of a statistic, with the estimate on the original sample."""

    estimate: float
    low: float
    high: float
    confidence: float
    resamples: int
    failed: int = 0  # resamples where the statistic was undefined (NaN), left out of the percentiles


def _draws(units: int, resamples: int, seed: int | None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, units, size=(resamples, units))


def bootstrap_ci(statistic: Statistic, units: int, *, resamples: int = 1000, confidence: float = 0.95,
                 seed: int | None = 0) -> Interval:
    """Percentile bootstrap CI of ``statistic`` resampling ``units`` (documents, contexts, questions)
    with replacement. Deterministic for a given ``seed``."""
    return bootstrap_cis(lambda draw: {"value": statistic(draw)}, units, resamples=resamples,
                         confidence=confidence, seed=seed)["value"]


def bootstrap_cis(statistics: Callable[[Sequence[int]], Mapping[str, float]], units: int, *,
                  resamples: int = 1000, confidence: float = 0.95, seed: int | None = 0) -> dict[str, Interval]:
    """:func:`bootstrap_ci` for several statistics computed from the same resamples (one pass)."""
    estimates = statistics(list(range(units)))
    drawn: dict[str, list[float]] = {name: [] for name in estimates}
    for draw in _draws(units, resamples, seed):
        for name, value in statistics(draw.tolist()).items():
            drawn[name].append(value)
    tail = (1 - confidence) / 2 * 100
    out: dict[str, Interval] = {}
    for name, estimate in estimates.items():
        values = np.asarray(drawn[name], dtype=float)
        ok = values[~np.isnan(values)]
        if ok.size == 0:
            out[name] = Interval(estimate, math.nan, math.nan, confidence, resamples, resamples)
            continue
        low, high = np.percentile(ok, [tail, 100 - tail])
        out[name] = Interval(estimate, float(low), float(high), confidence, resamples, int(values.size - ok.size))
    return out


@dataclass(frozen=True)
class PairedTest:
    """A comparison of judges A and B on the same units: observed difference A - B, its CI and p-value."""

    method: str
    difference: float
    p_value: float
    low: float = math.nan
    high: float = math.nan
    resamples: int = 0
    detail: dict[str, Any] = field(default_factory=dict)


def paired_bootstrap(statistic_a: Statistic, statistic_b: Statistic, units: int, *, resamples: int = 1000,
                     confidence: float = 0.95, seed: int | None = 0) -> PairedTest:
    """Paired bootstrap of the difference statistic(A) - statistic(B): both judges are scored on the
    SAME resample of units. p-value: two-sided, twice the smaller share of differences on either side
    of 0 (the bootstrap distribution's own test of "no difference")."""
    everything = list(range(units))
    observed = statistic_a(everything) - statistic_b(everything)
    diffs = np.array([statistic_a(d) - statistic_b(d) for d in (draw.tolist() for draw in
                                                                 _draws(units, resamples, seed))])
    diffs = diffs[~np.isnan(diffs)]
    if diffs.size == 0:
        return PairedTest("paired bootstrap", observed, math.nan, resamples=resamples)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(diffs, [tail, 100 - tail])
    p = min(1.0, 2 * min(float(np.mean(diffs <= 0)), float(np.mean(diffs >= 0))))
    return PairedTest("paired bootstrap", float(observed), p, float(low), float(high), int(diffs.size))


def permutation_test(statistic: Callable[[np.ndarray, Sequence[int]], float], predictions_a: np.ndarray,
                     predictions_b: np.ndarray, unit_of_item: Sequence[int], *, resamples: int = 1000,
                     seed: int | None = 0) -> PairedTest:
    """Paired permutation test: under "A and B are exchangeable", each unit's predictions of A and B
    are swapped with probability 1/2. ``statistic(predictions, all_units)`` scores one judge's
    predictions. p = (#|d*| >= |d| + 1) / (resamples + 1)."""
    a = np.asarray(predictions_a, dtype=float)
    b = np.asarray(predictions_b, dtype=float)
    units = np.asarray(unit_of_item)
    every = list(range(int(units.max()) + 1)) if units.size else []
    observed = statistic(a, every) - statistic(b, every)
    rng = np.random.default_rng(seed)
    extreme = 0
    for _ in range(resamples):
        swap = rng.random(len(every)) < 0.5
        mask = swap[units]
        d = statistic(np.where(mask, b, a), every) - statistic(np.where(mask, a, b), every)
        extreme += bool(abs(d) >= abs(observed) - 1e-12)
    return PairedTest("permutation", float(observed), (extreme + 1) / (resamples + 1), resamples=resamples)


def paired_t_test(errors_a: Scores, errors_b: Scores) -> PairedTest:
    """Paired t-test (ReFeR, Appendix M) on per-item quantities of two judges, e.g. each judge's
    absolute error against the human score on the same items. ``difference`` = mean(A - B)."""
    a = np.asarray(errors_a, dtype=float)
    b = np.asarray(errors_b, dtype=float)
    if a.shape != b.shape or a.size < 2:
        raise ValueError("a paired t-test needs two equally long lists of at least 2 values")
    result = stats.ttest_rel(a, b)
    return PairedTest("paired t-test", float(np.mean(a - b)), float(result.pvalue),
                      detail={"t": float(result.statistic), "df": int(a.size - 1)})
