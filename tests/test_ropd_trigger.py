"""R-OPD's trigger as a statistical test, fed synthetic gradient streams through the strategy's hooks.

Each stream is what the trainer hands `ROPD.observe` after every iteration: the norms (or sketches)
of each gradient group of each update. The properties are those of docs/ropd_trigger.md: under
pure noise the switch comes soon after burn-in and a comparison hits as often as the tolerance
implies; under a steady drift (a student still learning) it does not switch; pooling more
minibatches per window never makes it switch earlier. The earlier reading of the rule (change of a
mean of norms against the SD of one norm, every iteration) is run on the same streams to show
that these tests fail a rule without power.
"""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import pytest
import torch
from scipy import stats

from replaylab.replay.base import UpdateStats
from replaylab.replay.ropd import ROPD, ROPDConfig

STREAMS = 200
SD = 1.0  # minibatch-level SD of one gradient reading


def run_stream(seed, drift, *, groups=4, per_iteration=1, updates=120, statistic="norm", dim=16, strategy=ROPD, **cfg):
    """Feed one stream to `strategy` (ROPD, or the earlier reading below); returns (switch update or None,
    list of comparison rows)."""
    rng = torch.Generator().manual_seed(seed)
    s = strategy(ROPDConfig(statistic=statistic, **{"window": 8, "burn_in": 10, **cfg}))
    direction = torch.ones(dim) / dim ** 0.5
    comparisons = []
    for it, start in enumerate(range(0, updates, per_iteration)):
        norms, sketches = [], []
        for u in range(start, start + per_iteration):
            level = 5.0 + drift(u)
            if statistic == "norm":
                norms += (level + SD * torch.randn(groups, generator=rng, dtype=torch.float64)).tolist()
            else:  # isotropic noise of total SD `SD` around a drifting mean vector
                noise = torch.randn(groups, dim, generator=rng, dtype=torch.float64) * SD / dim ** 0.5
                sketches += list(level * direction.double() + noise)
                norms += [1.0] * groups
        out = s.observe([], UpdateStats(it, start + per_iteration, norms, sketches or None), SimpleNamespace(update=start))
        if "hit" in out:
            comparisons.append(out)
        if s.replaying:
            return start + per_iteration, comparisons
    return None, comparisons


def no_drift(u):
    return 0.0


def linear(u):
    return 0.3 * SD * u


def learning(u):  # a student whose gradient still moves, less and less (0.5 SD/update at first)
    return -25.0 * SD * (1 - torch.exp(torch.tensor(-u / 50.0)).item())


def test_noise_switches_soon_after_burn_in():
    points = [run_stream(seed, no_drift)[0] for seed in range(STREAMS)]
    assert all(p is not None for p in points)
    # burn-in 10, windows of 8: comparisons close at updates 26, 34, 42, ...; median within three
    comparisons = [(p - 10) // 8 - 1 for p in points]
    assert statistics.median(comparisons) <= 3
    assert min(points) == 34  # two windows to compare, then two consecutive hits


@pytest.mark.parametrize("tolerance", [1.0, 2.0])
def test_noise_hits_as_often_as_the_tolerance_implies(tolerance):
    hits = []
    for seed in range(STREAMS // 2):
        _, rows = run_stream(seed, no_drift, tolerance=tolerance, consecutive=10_000, updates=90)
        hits += [r["hit"] for r in rows]
    expected = stats.norm.cdf(tolerance) - stats.norm.cdf(-tolerance)  # P(|z| <= tolerance)
    assert len(hits) == 100 * 9  # windows close at updates 18, 26, ..., 90: 9 comparisons each
    assert abs(statistics.mean(hits) - expected) < 0.04, (statistics.mean(hits), expected)


@pytest.mark.parametrize("shape", [dict(groups=4, per_iteration=1), dict(groups=1, per_iteration=4)],
                         ids=["tiny-1x4-groups", "full-4-minibatches"])
@pytest.mark.parametrize("statistic", ["norm", "sketch"])
def test_a_steady_drift_does_not_switch(shape, statistic):
    switched = sum(run_stream(seed, linear, statistic=statistic, **shape)[0] is not None for seed in range(STREAMS))
    assert switched <= 0.05 * STREAMS


@pytest.mark.parametrize("drift", [no_drift, learning], ids=["noise", "learning"])
def test_more_minibatches_never_switch_earlier(drift):
    def switch_points(groups):
        points = [run_stream(seed, drift, groups=groups, updates=300)[0] for seed in range(STREAMS)]
        return [p if p is not None else 300 for p in points]

    single, double = switch_points(4), switch_points(8)
    diff = statistics.mean(double) - statistics.mean(single)
    se = (statistics.variance(single) / STREAMS + statistics.variance(double) / STREAMS) ** 0.5
    # noise: the same in expectation (600 streams each measured 46.3 vs 46.5 updates), so no more
    # than sampling error below; learning: a moving gradient is seen for longer (168 vs 185)
    assert diff >= -3 * se, (statistics.mean(single), statistics.mean(double), se)
    if drift is learning:
        assert diff > 3 * se


def test_sketch_noise_hit_rate_matches_its_chi_square_law():
    # Debiased vector reading: under noise a hit is chi2_d / d <= 1 + tolerance^2 (docs/ropd_trigger.md).
    hits = []
    for seed in range(STREAMS // 4):
        _, rows = run_stream(seed, no_drift, statistic="sketch", dim=4, groups=2, consecutive=10_000, updates=90)
        hits += [r["hit"] for r in rows]
    expected = stats.chi2.cdf(4 * 2.0, df=4)
    assert abs(statistics.mean(hits) - expected) < 0.06, (statistics.mean(hits), expected)


class EarlierReading(ROPD):
    """The rule the trigger replaced, through the same hooks and streams: after every iteration (no window),
    a hit when |mean of its norms - the previous iteration's mean| <= the SD of one norm; two hits in a row."""

    def step(self, readings, start_update, update, iteration):
        if self.replaying:
            return {"replaying": 1.0}
        if start_update < self.cfg.burn_in or len(readings) < 2:
            return {"replaying": 0.0}
        norms = [float(r) for r in readings]
        mean, sd = statistics.mean(norms), statistics.stdev(norms)
        out = {"replaying": 0.0}
        if self.previous is not None:
            hit = abs(mean - self.previous) <= sd
            self.hits = self.hits + 1 if hit else 0
            out["hit"] = float(hit)
            if self.hits >= self.cfg.consecutive:
                self.replaying = True
        self.previous = mean
        return out


def test_the_earlier_reading_fails_these_properties():
    # The tests above have power: the rule they replaced, fed the same streams through the same strategy hooks
    # (run_stream), fails their two predicates. It switches under a steady drift (the bound there is 5% of
    # streams), and sooner with more minibatches (the bound there is 3 standard errors).
    switched = sum(run_stream(seed, linear, strategy=EarlierReading, burn_in=2)[0] is not None for seed in range(STREAMS))
    assert switched > 0.5 * STREAMS
    four, eight = ([run_stream(seed, learning, groups=g, updates=300, strategy=EarlierReading, burn_in=2)[0] or 300
                    for seed in range(STREAMS)] for g in (4, 8))
    se = (statistics.variance(four) / STREAMS + statistics.variance(eight) / STREAMS) ** 0.5
    assert statistics.mean(eight) - statistics.mean(four) < -3 * se, (statistics.mean(four), statistics.mean(eight), se)
