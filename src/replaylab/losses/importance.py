"""Importance-sampling utilities for decoupled off-policy corrections.

Three policies can be involved in one token's loss (decoupled PPO,
Hilton et al. 2021):

* ``mu`` (behaviour) -- the policy that generated the token (older than the current step for a
  replayed sample);
* ``pi_prox`` / ``pi_old`` (proximal) -- the parameters at the start of the current optimisation
  step; the PPO trust region is centred here;
* ``pi_theta`` -- the parameters being optimised.

The trust-region ratio ``pi_theta / pi_prox`` (``policy_ratio``) carries the gradient; the
off-policy correction ``pi_prox / mu`` (``truncated_behaviour_weight``) is a detached,
truncated constant that multiplies the clipped term. Keeping them apart is what lets a stale
sample keep a meaningful clip: the clip stays centred on ``pi_prox`` instead of on ``mu``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from replaylab.losses._masking import bool_mask, masked, masked_max, masked_mean, masked_min
from replaylab.losses.kl import MAX_LOG_RATIO


def _log_ratio(logp: Tensor, logp_ref: Tensor, mask: Tensor | None) -> Tensor:
    d = logp - logp_ref
    if mask is not None:
        d = masked(d, bool_mask(mask))  # padded positions -> ratio exactly 1
    return d.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


def policy_ratio(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor | None = None) -> Tensor:
    """Token ratio ``exp(logprobs - old_logprobs)``, differentiable in ``logprobs`` only.

    ``old_logprobs`` is detached (it is a constant of the step). The log-ratio is clamped to
    ``+-MAX_LOG_RATIO`` (kl.py) to avoid overflow; with ``mask`` given, padded positions are 1.
    """
    return _log_ratio(logprobs, old_logprobs.detach(), mask).exp()


def truncated_behaviour_weight(
    logp_prox: Tensor, logp_behaviour: Tensor, cap: float | None, mask: Tensor | None = None
) -> Tensor:
    """Detached off-policy weight ``min(exp(logp_prox - logp_behaviour), cap)`` (``cap=None``:
    no truncation). Equals 1 on fresh samples (``mu == pi_prox``). Truncation (as in V-trace /
    IMPALA and truncated IS) bounds the variance a very stale token can inject, at the price of
    a bias towards ``pi_prox``. Padded positions (``mask`` given) are 0.
    """
    if cap is not None and cap <= 0:
        raise ValueError(f"cap must be > 0 or None, got {cap}")
    with torch.no_grad():
        w = _log_ratio(logp_prox.detach(), logp_behaviour.detach(), mask).exp()
        if cap is not None:
            w = w.clamp(max=cap)
        if mask is not None:
            w = masked(w, bool_mask(mask))
    return w


def weight_metrics(
    weights: Tensor, mask: Tensor, *, prefix: str, cap: float | None = None
) -> dict[str, Tensor]:
    """``{prefix}_mean``, ``{prefix}_max``, ``{prefix}_min`` of per-token weights over valid
    tokens, plus ``{prefix}_truncated_frac`` (share of tokens at the cap) when ``cap`` is given."""
    m = bool_mask(mask)
    with torch.no_grad():
        w = weights.detach()
        out = {
            f"{prefix}_mean": masked_mean(w, m),
            f"{prefix}_max": masked_max(w, m),
            f"{prefix}_min": masked_min(w, m),
        }
        if cap is not None:
            out[f"{prefix}_truncated_frac"] = masked_mean((w >= cap).to(w.dtype), m)
    return out


def off_policyness(logp: Tensor, logp_other: Tensor, mask: Tensor) -> Tensor:
    """Mean over valid tokens of ``|logp - logp_other|``: how far two policies are apart on the
    tokens actually trained on (0 for fresh on-policy tokens at the first minibatch)."""
    m = bool_mask(mask)
    with torch.no_grad():
        return masked_mean((masked(logp.detach(), m) - masked(logp_other.detach(), m)).abs(), m)
