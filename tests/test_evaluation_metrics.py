"""Metrics against hand-computed values: pass@k against brute-force enumeration of k-subsets,
avg@k by hand, and bootstrap CIs that contain the mean and repeat for a seed."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from replaylab.evaluation.metrics import (
    avg_at_k,
    bootstrap_ci,
    mean_pass_at_k,
    mean_response_length,
    pass_at_k,
    per_problem_accuracy,
    stratified_bootstrap_ci,
    truncation_rate,
)


def _brute_pass_at_k(n: int, c: int, k: int) -> float:
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_matches_enumeration_over_subsets(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_is_stable_for_large_n():
    n, c, k = 1000, 3, 500
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)
    assert pass_at_k(2000, 0, 1000) == 0.0
    assert pass_at_k(2000, 1, 1) == pytest.approx(1 / 2000)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(4, 5, 1)


def test_avg_at_k_and_pass_at_1_by_hand():
    correct = [[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]]
    assert avg_at_k(correct) == pytest.approx((0.5 + 1 + 0) / 3)
    assert mean_pass_at_k(correct, 1) == pytest.approx(avg_at_k(correct))
    assert mean_pass_at_k(correct, 4) == pytest.approx(2 / 3)
    # pass@2 of [1,0,0,1]: 1 - C(2,2)/C(4,2) = 5/6
    assert mean_pass_at_k(correct, 2) == pytest.approx((5 / 6 + 1 + 0) / 3)
    # ragged: every problem weighs the same, whatever its sample count
    assert avg_at_k([[True], [False, True]]) == pytest.approx(0.75)
    np.testing.assert_allclose(per_problem_accuracy([[1, 1, 0], [0]]), [2 / 3, 0])
    assert math.isnan(avg_at_k([]))
    with pytest.raises(ValueError, match="problem 1 has no samples"):
        avg_at_k([[1], []])


def test_bootstrap_ci_contains_mean_and_is_seeded():
    rng = np.random.default_rng(7)
    values = rng.random(40)
    lo, hi = bootstrap_ci(values, seed=3)
    assert lo < values.mean() < hi
    assert (lo, hi) == bootstrap_ci(values, seed=3)
    assert (lo, hi) != bootstrap_ci(values, seed=4)
    # roughly mean +- 1.96 standard errors for 40 problems
    se = values.std(ddof=1) / np.sqrt(len(values))
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.25)
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)
    assert all(math.isnan(x) for x in bootstrap_ci([]))


def test_stratified_ci_of_suite_mean():
    a, b = np.linspace(0, 1, 30), np.full(20, 0.2)
    assert stratified_bootstrap_ci([a], seed=1) == bootstrap_ci(a, seed=1)
    lo, hi = stratified_bootstrap_ci([a, b], seed=1)
    assert lo < (a.mean() + b.mean()) / 2 < hi
    assert stratified_bootstrap_ci([a, [], b], seed=1) == (lo, hi)  # empty benchmarks are ignored



def test_bootstrap_widths_match_the_normal_theory_tightly_enough_to_tell_levels_and_strata_apart():
    """The widths above are checked loosely (40 values, 1000 resamples): a 90% interval passed for a 95% one,
    and pooling the benchmarks instead of resampling each passed the stratified test. With many resamples the
    percentile widths match 2 z se to a few percent, which tells both apart (90%: 0.84x; pooled here: 1.4x)."""
    from scipy import stats

    values = np.random.default_rng(11).random(400)
    se = values.std() / np.sqrt(len(values))  # the bootstrap's plug-in standard error (ddof 0)
    for confidence in (0.90, 0.95, 0.99):
        lo, hi = bootstrap_ci(values, n_resamples=20000, confidence=confidence, seed=2)
        assert hi - lo == pytest.approx(2 * stats.norm.ppf(0.5 + confidence / 2) * se, rel=0.04), confidence
    a, b = np.linspace(0, 1, 30), np.full(20, 0.2)
    lo, hi = stratified_bootstrap_ci([a, b], n_resamples=20000, seed=3)
    suite_se = np.sqrt((a.std() / np.sqrt(len(a))) ** 2 + (b.std() / np.sqrt(len(b))) ** 2) / 2
    assert hi - lo == pytest.approx(2 * 1.96 * suite_se, rel=0.04)
    pooled = np.concatenate([a, b])
    assert hi - lo < 0.8 * 2 * 1.96 * pooled.std() / np.sqrt(len(pooled))  # resampled within each benchmark


def test_length_and_truncation():
    assert mean_response_length([10, 20, 30]) == 20.0
    assert truncation_rate([True, False, False, False]) == 0.25
    assert math.isnan(truncation_rate([])) and math.isnan(mean_response_length([]))
