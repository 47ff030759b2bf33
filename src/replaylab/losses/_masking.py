"""Mask and dtype helpers shared by every objective.

Every objective works on padded ``(B, T)`` tensors where ``mask`` is 1 on valid response tokens
(EOS included). Padded positions may hold anything: zeros, ``-inf`` log-probs from a sampler,
NaN from a cast. ``masked`` uses ``torch.where`` rather than ``x * mask`` because ``NaN * 0`` and
``inf * 0`` are NaN, and because the backward of ``where`` routes *zeros* (not products) to the
unselected side, so garbage at padded positions reaches neither the loss nor the gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor


def bool_mask(mask: Tensor) -> Tensor:
    """The mask as a bool tensor (float masks are 1/0 by convention; any non-zero is valid)."""
    return mask if mask.dtype == torch.bool else mask != 0


def compute_dtype(*tensors: Tensor | None) -> torch.dtype:
    """float64 if any input is float64, else float32: half-precision inputs are upcast because
    exp/log-ratio arithmetic in bf16 loses the small differences the clip tests look at."""
    if any(t is not None and t.dtype == torch.float64 for t in tensors):
        return torch.float64
    return torch.float32


def masked(x: Tensor, mask: Tensor, fill: float = 0.0) -> Tensor:
    """``x`` on valid positions and ``fill`` elsewhere, NaN/inf-safe in value and gradient."""
    return torch.where(mask, x, torch.full((), fill, dtype=x.dtype, device=x.device))


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over valid positions (0 when there are none)."""
    return masked(x, mask).sum() / mask.sum().clamp(min=1)


def masked_max(x: Tensor, mask: Tensor) -> Tensor:
    """Max of ``x`` over valid positions (0 when there are none)."""
    if not bool(mask.any()):
        return x.new_zeros(())
    return masked(x, mask, float("-inf")).max()


def masked_min(x: Tensor, mask: Tensor) -> Tensor:
    """Min of ``x`` over valid positions (0 when there are none)."""
    if not bool(mask.any()):
        return x.new_zeros(())
    return masked(x, mask, float("inf")).min()


def check_shapes(mask: Tensor, **tensors: Tensor | None) -> None:
    """Raise a ValueError naming the first ``(B, T)`` input whose shape differs from ``mask``."""
    if mask.dim() != 2:
        raise ValueError(f"mask must be (B, T), got shape {tuple(mask.shape)}")
    for name, t in tensors.items():
        if t is not None and t.shape != mask.shape:
            raise ValueError(
                f"{name} must have the mask's shape {tuple(mask.shape)}, got {tuple(t.shape)}"
            )


def to_floats(metrics: dict[str, Tensor | float | int]) -> dict[str, float]:
    """Detach tensor metrics to python floats with one device sync instead of one per key."""
    keys = [k for k, v in metrics.items() if isinstance(v, Tensor)]
    out = {k: float(v) for k, v in metrics.items() if not isinstance(v, Tensor)}
    if keys:
        values = torch.stack([metrics[k].detach().double().reshape(()) for k in keys]).tolist()
        out.update(zip(keys, values))
    return {k: out[k] for k in metrics}  # keep the caller's key order
