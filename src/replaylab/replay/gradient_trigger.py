"""R-OPD's switch rule as a statistical test: has the mean gradient stopped changing beyond noise?

The R-OPD abstract switches to initial-policy replay "when changes in mean gradients fall within
minibatch-level variation for two consecutive comparisons". Read as a test with power (see
docs/ropd_trigger.md), gradients are pooled over *windows* of C optimizer updates, and the change of
two consecutive window means is compared with the noise that minibatch sampling alone puts on it:

    x_{k,m}  = ||g_{k,m}|| (norm reading) or sketch(g_{k,m}) (sketch reading), m = 1..M_k
    mean_k   = (1/M_k) sum_m x_{k,m}
    V_k      = (1/(M_k - 1)) sum_m ||x_{k,m} - mean_k||^2        per-minibatch variation
    se_k     = sqrt(V_k / M_k + V_{k-1} / M_{k-1})                standard error of the change
    change_k = ||mean_k - mean_{k-1}||                            norm reading
             = sqrt(max(0, ||mean_k - mean_{k-1}||^2 - se_k^2))   sketch reading (debiased: under
                                                                  no drift E||.||^2 = se_k^2)
    ratio_k  = change_k / se_k;   hit_k = ratio_k <= tolerance

Under pure noise the norm reading's ratio is |z| for a standard normal z, so a comparison hits with
probability P(|z| <= tolerance) (0.68 at 1, 0.95 at 2) whatever M_k is; a drift of d per update
gives ratio ~ d C / se, which grows with M_k, so more minibatches make the rule *harder* to
satisfy while the gradient still moves, never easier. The sketch reading's null hit rate is
P(chi2_d / d <= 1 + tolerance^2) for d effective sketch dimensions (higher than the norm
reading's): it tests "the drift between windows is below tolerance standard errors".

Windows are accumulated as running sums (count, sum of x, sum of ||x||^2), so the state is small
and checkpointable; values are float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class WindowSummary:
    """One closed window: mean (float, or a vector for the sketch reading), variation V, count M."""

    mean: torch.Tensor  # (d,) float64; d = 1 for the norm reading
    variation: float  # V: per-minibatch variance (trace for vectors), ddof 1
    count: int  # M: gradients pooled in the window

    @property
    def mean_size(self) -> float:
        return float(self.mean.norm()) if self.mean.numel() > 1 else float(self.mean.abs().sum())


class Window:
    """Running sums of the gradient readings of one window."""

    def __init__(self) -> None:
        self.count = 0
        self.updates = 0
        self.total: torch.Tensor | None = None
        self.squares = 0.0

    def add(self, readings: list[torch.Tensor], updates: int) -> None:
        for x in readings:
            x = x.detach().double().reshape(-1)
            self.total = x.clone() if self.total is None else self.total + x
            self.squares += float(x.pow(2).sum())
            self.count += 1
        self.updates += updates

    def close(self) -> WindowSummary:
        if self.count < 2:
            raise ValueError(f"a gradient window needs >= 2 readings to estimate its variation, got {self.count}")
        mean = self.total / self.count
        variation = max(0.0, (self.squares - self.count * float(mean.pow(2).sum())) / (self.count - 1))
        return WindowSummary(mean, variation, self.count)

    def state_dict(self) -> dict:
        return {"count": self.count, "updates": self.updates, "total": self.total, "squares": self.squares}

    @classmethod
    def from_state(cls, state: dict) -> "Window":
        w = cls()
        w.count, w.updates, w.total, w.squares = state["count"], state["updates"], state["total"], state["squares"]
        return w


@dataclass
class Comparison:
    """The test of one window against the previous one."""

    change: float  # change of the window means (debiased for vectors)
    se: float  # standard error of that change from minibatch noise alone
    ratio: float  # change / se
    hit: bool  # ratio <= tolerance: the change is within minibatch-level variation


def compare(previous: WindowSummary, current: WindowSummary, tolerance: float) -> Comparison:
    se = math.sqrt(current.variation / current.count + previous.variation / previous.count)
    raw = float((current.mean - previous.mean).pow(2).sum())
    vector = current.mean.numel() > 1
    change = math.sqrt(max(0.0, raw - se * se)) if vector else math.sqrt(raw)
    if se > 0:
        ratio = change / se
    else:  # identical readings in both windows: no noise; any change at all is a real one
        ratio = 0.0 if change == 0 else math.inf
    return Comparison(change, se, ratio, ratio <= tolerance)
