"""Group-relative advantages for GRPO-style objectives (one scalar per response).

Each response's reward is compared with the other responses to the same prompt (its *group*):

* ``"zscore"`` -- GRPO (Shao et al. 2024): ``(r - mean_g) / (std_g + eps)``.
* ``"center"`` -- Dr. GRPO (Liu et al. 2025) / open-instruct: ``r - mean_g`` (no std division,
  which Dr. GRPO argues biases updates towards too-easy and too-hard prompts).

``std_g`` is the *population* standard deviation (ddof = 0) by default: the group is the whole
set being normalised, not a sample from which a wider population's spread is estimated, so
ddof = 0 is what makes a z-scored group have unit RMS; it also stays defined for a group of one
(std 0, advantage 0: a lone response carries no relative signal). TRL and verl call
``torch.std`` (ddof = 1), which multiplies every advantage of a size-G group by sqrt((G-1)/G);
pass ``unbiased=True`` to reproduce them (RePO builds on TRL). Groups of one then also get std 0.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

AdvantageMode = Literal["zscore", "center"]


def group_advantages(
    rewards: Tensor,
    group_index: Tensor,
    mode: AdvantageMode = "zscore",
    eps: float = 1e-4,
    *,
    unbiased: bool = False,
) -> Tensor:
    """Per-response advantages ``(N,)`` from rewards ``(N,)`` and group ids ``(N,)``.

    ``group_index`` holds any integer ids (not necessarily contiguous or sorted); responses with
    the same id form one group. The computation is vectorised with ``index_add_`` over compact
    group ids, so its cost does not grow with a python loop over groups. The result is detached
    from any graph (advantages are constants of the loss).
    """
    if rewards.dim() != 1 or group_index.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_index must both be (N,), got {tuple(rewards.shape)} and "
            f"{tuple(group_index.shape)}"
        )
    if mode not in ("zscore", "center"):
        raise ValueError(f"unknown advantage mode {mode!r}; allowed: zscore, center")
    r = rewards.detach()
    r = r.to(torch.float64 if r.dtype == torch.float64 else torch.float32)
    if r.numel() == 0:
        return r
    # Compact ids 0..G-1 so the per-group buffers have exactly G entries.
    _, gid = torch.unique(group_index, return_inverse=True)
    num_groups = int(gid.max()) + 1
    count = torch.zeros(num_groups, dtype=r.dtype, device=r.device).index_add_(0, gid, torch.ones_like(r))
    total = torch.zeros_like(count).index_add_(0, gid, r)
    centred = r - (total / count)[gid]
    if mode == "center":
        return centred
    # Two-pass variance (sum of squared deviations from the mean) instead of E[r^2] - E[r]^2,
    # which cancels catastrophically when rewards are large and nearly equal.
    sq = torch.zeros_like(count).index_add_(0, gid, centred.square())
    dof = (count - 1).clamp(min=1) if unbiased else count
    std = (sq / dof).sqrt()
    return centred / (std[gid] + eps)
