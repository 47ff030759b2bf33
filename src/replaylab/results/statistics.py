"""Intervals over replicates (data orders, seeds): Student-t quantiles from scipy.stats."""

from __future__ import annotations

import math
from typing import Sequence


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with df degrees of freedom."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    from scipy import (
        stats,  # here, not at the top: every `replaylab` subcommand imports the table module
    )

    return float(stats.t.ppf(p, df))


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float, float, int]:
    """(mean, sd, ci_low, ci_high, n): mean +- t_{(1+level)/2, n-1} sd / sqrt(n); no interval for n < 2."""
    n = len(values)
    if n == 0:
        return (math.nan,) * 4 + (0,)
    mean = sum(values) / n
    if n == 1:
        return mean, math.nan, math.nan, math.nan, 1
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile((1.0 + level) / 2.0, n - 1) * sd / math.sqrt(n)
    return mean, sd, mean - half, mean + half, n
