"""How per-token losses of a padded batch are reduced to one scalar.

The three conventions differ only in how much weight each token gets, which matters as soon as
responses have different lengths:

* ``"grpo"`` -- sequence-mean-token-mean, the original GRPO objective (Shao et al. 2024,
  DeepSeekMath, eq. 3): average over the valid tokens of each sequence, then over the ``B``
  sequences. A token of a short response weighs more than one of a long response. A sequence with
  no valid token contributes 0 but still counts in ``B`` (TRL's convention).
* ``"dapo"`` -- token-mean, DAPO (Yu et al. 2025, "token-level policy gradient loss"): sum over all
  valid tokens of the batch divided by their number; every token weighs the same.
* ``"dr_grpo"`` -- Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-like training"): sum over all
  valid tokens divided by the constant ``B * norm_len`` (e.g. the max response budget), so that
  neither the response length nor the batch's token count rescales the gradient.
"""

from __future__ import annotations

from typing import Literal

from torch import Tensor

from replaylab.losses._masking import masked

Aggregation = Literal["grpo", "dapo", "dr_grpo"]
AGGREGATIONS: tuple[str, ...] = ("grpo", "dapo", "dr_grpo")


def aggregate(
    per_token: Tensor, mask: Tensor, mode: str, norm_len: float | None = None
) -> Tensor:
    """Reduce a ``(B, T)`` per-token loss to a scalar with one of ``AGGREGATIONS`` (see module doc).

    ``mask`` is a bool ``(B, T)`` tensor; ``norm_len`` is required (and only used) for ``"dr_grpo"``.
    """
    x = masked(per_token, mask)
    counts = mask.to(x.dtype)
    if mode == "grpo":
        return (x.sum(-1) / counts.sum(-1).clamp(min=1)).mean()
    if mode == "dapo":
        return x.sum() / counts.sum().clamp(min=1)
    if mode == "dr_grpo":
        if norm_len is None or norm_len <= 0:
            # No silent default (e.g. the padded width T): the point of Dr. GRPO is a normaliser
            # that does not depend on the batch, so the caller must name it.
            raise ValueError("aggregation 'dr_grpo' needs norm_len > 0 (e.g. the max response length)")
        return x.sum() / (x.shape[0] * float(norm_len))
    raise ValueError(f"unknown aggregation {mode!r}; allowed: {', '.join(AGGREGATIONS)}")
