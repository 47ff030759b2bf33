"""The PPO clipped surrogate shared by GRPO and the clipped OPD variant.

``l_t = min(r_t A_t, clip(r_t, 1 - clip_low, 1 + clip_high) A_t)`` (PPO, Schulman et al. 2017;
asymmetric "clip-higher" bounds from DAPO, Yu et al. 2025), optionally with the dual clip of
Ye et al. 2020 ("Mastering complex control in MOBA games"): for ``A_t < 0`` the objective is
floored at ``c * A_t``, so a token whose ratio has exploded (``r_t > c``) cannot contribute an
unbounded negative term -- the usual failure mode with stale replayed samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class ClipStats:
    """Bool ``(B, T)`` masks of where each clip is active (its gradient is zero there)."""

    low: Tensor  # r < 1 - clip_low and A < 0
    high: Tensor  # r > 1 + clip_high and A > 0
    dual: Tensor  # A < 0 and r > dual_clip


def clipped_surrogate(
    ratio: Tensor,
    advantages: Tensor,
    clip_low: float | None,
    clip_high: float | None,
    dual_clip: float | None = None,
) -> tuple[Tensor, ClipStats]:
    """Per-token surrogate to MAXIMISE and where each clip is active.

    ``clip_low`` / ``clip_high`` = None leaves that side unbounded (both None: the plain
    importance-weighted objective ``r_t A_t``). ``dual_clip`` = None disables the dual clip;
    otherwise it must exceed 1 (at ``c <= 1`` it would also cut tokens inside the trust region).
    """
    if clip_low is not None and not 0.0 <= clip_low < 1.0:
        raise ValueError(f"clip_low must be in [0, 1) or None, got {clip_low}")
    if clip_high is not None and clip_high < 0.0:
        raise ValueError(f"clip_high must be >= 0 or None, got {clip_high}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 or None, got {dual_clip}")
    lower = 1.0 - clip_low if clip_low is not None else 0.0
    upper = 1.0 + clip_high if clip_high is not None else float("inf")
    unclipped = ratio * advantages
    clipped = ratio.clamp(min=lower, max=upper) * advantages
    objective = torch.minimum(unclipped, clipped)
    neg = advantages < 0
    with torch.no_grad():
        low = (ratio < lower) & neg
        high = (ratio > upper) & (advantages > 0)
        dual = neg & (ratio > dual_clip) if dual_clip is not None else torch.zeros_like(neg)
    if dual_clip is not None:
        objective = torch.where(neg, torch.maximum(objective, dual_clip * advantages), objective)
    return objective, ClipStats(low=low, high=high, dual=dual)
