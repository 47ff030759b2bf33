"""Benchmark metrics as pure functions of per-sample outcomes (numpy only).

`correct` is one sequence of booleans per problem (the samples of that problem; lengths may differ).
- avg@k: mean over problems of the per-problem mean accuracy, so every problem weighs the same
  whatever its number of samples (DeepSeek-R1's "pass@1 over k samples").
- pass@k: the unbiased estimator of Chen et al. (2021), 1 - C(n-c, k) / C(n, k), computed as a
  product so it neither overflows nor loses precision for large n (lighteval's form). Taking the
  first k samples instead (as RePO does) is biased for k < n.
- bootstrap CI: percentile interval of the mean over problems resampled with replacement, seeded so
  a table rebuilt from the same samples prints the same interval. The stratified variant resamples
  within each benchmark, for the CI of a suite mean of per-benchmark accuracies.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Outcomes = Sequence[Sequence[bool]]


def per_problem_accuracy(correct: Outcomes) -> np.ndarray:
    """Fraction of correct samples for each problem; every problem needs at least one sample."""
    out = np.empty(len(correct), dtype=np.float64)
    for i, c in enumerate(correct):
        if len(c) == 0:
            raise ValueError(f"problem {i} has no samples")
        out[i] = np.mean(np.asarray(c, dtype=np.float64))
    return out


def avg_at_k(correct: Outcomes) -> float:
    """Mean over problems of the mean over samples; nan for no problems."""
    return float(per_problem_accuracy(correct).mean()) if len(correct) else float("nan")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased probability that at least one of k samples drawn without replacement from n (of
    which c are correct) is correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def mean_pass_at_k(correct: Outcomes, k: int) -> float:
    """pass@k averaged over problems; nan for no problems."""
    if not len(correct):
        return float("nan")
    return float(np.mean([pass_at_k(len(c), int(np.sum(c)), k) for c in correct]))


def bootstrap_ci(
    values: Sequence[float], n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of `values` (one per problem); (nan, nan) if empty."""
    return stratified_bootstrap_ci([values], n_resamples, confidence, seed)


def stratified_bootstrap_ci(
    groups: Sequence[Sequence[float]], n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean over groups of each group's mean (the suite mean of
    per-benchmark accuracies); each group's values are resampled within that group. Empty groups
    are ignored; (nan, nan) when all are empty."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    arrays = [np.asarray(g, dtype=np.float64) for g in groups if len(g)]
    if not arrays:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = np.zeros(n_resamples, dtype=np.float64)
    for a in arrays:
        idx = rng.integers(0, len(a), size=(n_resamples, len(a)))
        means += a[idx].mean(axis=1)
    means /= len(arrays)
    alpha = (1.0 - confidence) / 2
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def mean_response_length(num_tokens: Sequence[int]) -> float:
    """Mean generated tokens per response; nan for no responses."""
    return float(np.mean(num_tokens)) if len(num_tokens) else float("nan")


def truncation_rate(truncated: Sequence[bool]) -> float:
    """Fraction of responses that hit the token budget before EOS; nan for no responses."""
    return float(np.mean(np.asarray(truncated, dtype=np.float64))) if len(truncated) else float("nan")
