"""Metric functions on small arrays whose values are worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jurygraph.measuring import metrics


def test_correlations_use_average_ranks_and_tau_b() -> None:
    # ranks of x with ties averaged: 1, 2.5, 2.5, 4 -> rho = 4.5 / sqrt(4.5 * 5)
    # tau-b: 5 concordant, 0 discordant, 1 pair tied in x -> 5 / sqrt((6 - 1) * 6); tau-a would be 5/6
    found = metrics.correlations([1, 2, 2, 3], [1, 3, 2, 4])
    assert found.spearman == pytest.approx(4.5 / math.sqrt(22.5), abs=1e-12)
    assert found.kendall == pytest.approx(5 / math.sqrt(30), abs=1e-12)
    assert found.kendall != pytest.approx(5 / 6)
    assert found.pearson == pytest.approx(np.corrcoef([1, 2, 2, 3], [1, 3, 2, 4])[0, 1], abs=1e-12)
    assert found.n == 4
    for statistic in metrics.STATISTICS:
        assert metrics.correlation(statistic, [1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(found.get(statistic))


def test_correlation_of_constant_scores_is_undefined_not_zero() -> None:
    found = metrics.correlations([2, 2, 2], [1, 2, 3])
    assert math.isnan(found.pearson) and math.isnan(found.spearman) and math.isnan(found.kendall)


def test_correlations_reject_unequal_lengths() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        metrics.correlations([1, 2], [1, 2, 3])


def test_grouped_averages_per_group_and_skips_constant_groups() -> None:
    predicted = [1, 2, 3, 3, 2, 1, 5, 5, 5, 1, 2, 3]
    human = [1, 2, 3, 1, 2, 3, 1, 2, 3, 4, 4, 4]
    groups = ["a"] * 3 + ["b"] * 3 + ["c"] * 3 + ["d"] * 3
    found = metrics.grouped(predicted, human, groups)
    # a: +1, b: -1; c has constant predictions, d constant human scores: both skipped and counted
    assert found.spearman == pytest.approx(0.0)
    assert found.pearson == pytest.approx(0.0)
    assert (found.groups, found.skipped, found.skipped_groups, found.n) == (2, 2, ("c", "d"), 6)
    only_a = metrics.grouped(predicted[:3] + predicted[6:9], human[:3] + human[6:9], ["a"] * 3 + ["c"] * 3)
    assert only_a.kendall == pytest.approx(1.0)
    assert only_a.skipped == 1


def test_grouped_with_no_usable_group_is_nan() -> None:
    found = metrics.grouped([1, 1], [1, 2], ["x", "x"])
    assert math.isnan(found.spearman) and found.skipped == 1 and found.groups == 0


def test_accuracy_and_cohen_kappa_by_hand() -> None:
    predicted = ["1", "1", "2", "tie"]
    human = ["1", "2", "2", "2"]
    # p_o = 0.5; p_e = 0.5*0.25 + 0.25*0.75 + 0.25*0 = 0.3125; kappa = 0.1875 / 0.6875 = 3/11
    assert metrics.accuracy(predicted, human) == 0.5
    assert metrics.cohen_kappa(predicted, human, ["1", "2", "tie"]) == pytest.approx(3 / 11)
    assert metrics.cohen_kappa(human, human) == pytest.approx(1.0)
    assert math.isnan(metrics.cohen_kappa(["1", "1"], ["1", "1"]))  # p_e = 1: undefined


def test_kappa_from_codes_is_cohen_kappa_on_codes() -> None:
    # codes 0-2 are the classes "1", "2", "tie"; code 3 is a value outside them (it enters p_o, not p_e)
    assert metrics.kappa_from_codes(np.array([0, 0, 1, 2]), np.array([0, 1, 1, 1]), 3) == pytest.approx(3 / 11)
    assert math.isnan(metrics.kappa_from_codes(np.array([0, 0]), np.array([0, 0]), 3))
    rng = np.random.default_rng(3)
    values = ["1", "2", "tie", "other"]
    for _ in range(20):
        predicted, human = rng.integers(0, 4, size=15), rng.integers(0, 4, size=15)
        named = [[values[k] for k in codes] for codes in (predicted, human)]
        assert metrics.kappa_from_codes(predicted, human, 3) == pytest.approx(metrics.cohen_kappa(*named, values[:3]))


def test_confusion_rows_are_human_columns_predicted() -> None:
    matrix = metrics.confusion(["1", "1", "2", "tie"], ["1", "2", "2", "2"], ["1", "2", "tie"])
    assert matrix.tolist() == [[1, 0, 0], [1, 1, 1], [0, 0, 0]]


def test_score_distribution_rounds_half_up_and_clips() -> None:
    found = metrics.score_distribution([1.0, 1.4999, 1.5, 2.6667, 3.0, 3.2], 1, 3)
    assert found == {1: pytest.approx(100 * 2 / 6), 2: pytest.approx(100 * 1 / 6), 3: pytest.approx(100 * 3 / 6)}


def test_bootstrap_is_seeded_and_brackets_the_estimate() -> None:
    values = np.array([0.1, 0.4, 0.35, 0.8, 0.55, 0.6, 0.2, 0.9])

    def mean(draw: list[int]) -> float:
        return float(values[draw].mean())
    first = metrics.bootstrap_ci(mean, len(values), resamples=300, seed=7)
    again = metrics.bootstrap_ci(mean, len(values), resamples=300, seed=7)
    other = metrics.bootstrap_ci(mean, len(values), resamples=300, seed=8)
    assert first == again
    assert (first.low, first.high) != (other.low, other.high)
    assert first.estimate == pytest.approx(values.mean())
    assert first.low < first.estimate < first.high
    assert first.low > 0.1 and first.high < 0.9


def test_paired_tests_separate_a_good_judge_from_noise() -> None:
    rng = np.random.default_rng(0)
    human = rng.integers(1, 6, size=120).astype(float)
    good = human + rng.normal(0, 0.3, size=120)
    noise = rng.normal(3, 1, size=120)
    units = list(range(120))

    def spearman(pred: np.ndarray, draw: list[int]) -> float:
        return metrics.correlations(pred[list(draw)], human[list(draw)]).spearman

    boot = metrics.paired_bootstrap(lambda d: spearman(good, d), lambda d: spearman(noise, d), 120,
                                    resamples=200, seed=1)
    assert boot.difference > 0.5 and boot.low > 0 and boot.p_value < 0.01
    perm = metrics.permutation_test(spearman, good, noise, units, resamples=200, seed=1)
    assert perm.p_value == pytest.approx(1 / 201)
    same = metrics.permutation_test(spearman, good, good, units, resamples=50, seed=1)
    assert same.difference == 0 and same.p_value == 1.0
    t = metrics.paired_t_test(np.abs(good - human), np.abs(noise - human))
    assert t.difference < 0 and t.p_value < 1e-6 and t.detail["df"] == 119


def test_paired_t_test_needs_paired_lists() -> None:
    with pytest.raises(ValueError, match="equally long"):
        metrics.paired_t_test([1.0, 2.0], [1.0])
