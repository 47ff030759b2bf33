"""Clipped-surrogate policy-gradient loss for GRPO / DAPO / Dr. GRPO (GRPO, Shao et al. 2024; DAPO, Yu et al. 2025; Dr. GRPO, Liu et al. 2025).

Per token ``l_t = w_t * min(r_t A, clip(r_t, 1 - clip_low, 1 + clip_high) A)`` with
``r_t = exp(logp - old_logp)`` (surrogate.py), optional dual clip, optional detached decoupled-IS
weight ``w_t`` (importance.py; decoupled PPO, Hilton et al. 2022), plus ``kl_coef * k3`` to a reference
policy (kl.py). The loss minimised is ``aggregate(-l_t + kl_coef * k3_t)`` (aggregation.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

from replaylab.losses._masking import (
    bool_mask,
    check_shapes,
    compute_dtype,
    masked,
    masked_max,
    masked_mean,
    masked_min,
    to_floats,
)
from replaylab.losses.aggregation import aggregate
from replaylab.losses.importance import off_policyness, policy_ratio, weight_metrics
from replaylab.losses.kl import k3_kl
from replaylab.losses.registry import register_loss
from replaylab.losses.surrogate import clipped_surrogate


def _token_advantages(advantages: Tensor, mask: Tensor, dtype: torch.dtype) -> Tensor:
    """Broadcast per-sequence ``(B,)`` advantages to ``(B, T)``; accept per-token ``(B, T)``."""
    adv = advantages.detach().to(dtype)
    if adv.dim() == 1 and adv.shape[0] == mask.shape[0]:
        adv = adv.unsqueeze(-1).expand(mask.shape)
    elif adv.shape != mask.shape:
        raise ValueError(
            f"advantages must be (B,) or (B, T) = {tuple(mask.shape)}, got {tuple(adv.shape)}"
        )
    return masked(adv, mask)


@register_loss("grpo")
def grpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float | None = 0.2,
    clip_high: float | None = 0.2,
    aggregation: str = "dapo",
    norm_len: float | None = None,
    token_weights: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    kl_coef: float = 0.0,
    dual_clip: float | None = None,
    kl_token_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """GRPO-family loss (to minimise) and its metrics.

    Args:
        logprobs: ``(B, T)`` log pi_theta of the sampled tokens (carries the gradient).
        old_logprobs: ``(B, T)`` log pi_old (proximal policy; the clip is centred here). Detached.
        advantages: ``(B,)`` per-sequence or ``(B, T)`` per-token advantages. Detached.
        mask: ``(B, T)`` 1 on valid response tokens (EOS included).
        clip_low, clip_high: clip range ``[1 - clip_low, 1 + clip_high]``; None = that side open.
        aggregation: ``"grpo"`` (per-sequence token-mean, then mean over sequences; GRPO paper),
            ``"dapo"`` (token-mean over the batch; DAPO) or ``"dr_grpo"`` (token sum divided by
            ``B * norm_len``; Dr. GRPO). See aggregation.py.
        norm_len: the constant length normaliser of ``"dr_grpo"``.
        token_weights: ``(B, T)`` detached per-token weights multiplying the clipped term, e.g.
            ``truncated_behaviour_weight(old_logprobs, behaviour_logprobs, cap)``.
        ref_logprobs: ``(B, T)`` reference-policy log-probs for the k3 KL term (and its metric).
        kl_coef: beta of the KL term; non-zero needs ``ref_logprobs``. The KL term is not
            multiplied by ``token_weights`` (it regularises pi_theta itself, not a return).
        dual_clip: c > 1 floors the objective of ``A < 0`` tokens at ``c * A``; None disables.
        kl_token_weights: ``(B, T)`` detached weights of the KL term per token (RePO: the online
            rows' term normaliser, 0 on replayed rows); None = weight 1.

    Metrics: ``loss``, ``pg_loss``, ``clip_frac_low``, ``clip_frac_high``, ``clip_frac``,
    ``ratio_mean``, ``ratio_max``, ``ratio_min``, ``log_ratio_abs_mean`` (|log pi_theta -
    log pi_old|, off-policyness), ``adv_mean``, ``entropy_sampled`` (-mean log pi_theta, an
    entropy estimate valid for on-policy tokens), ``num_tokens``, ``num_seqs``; with
    ``dual_clip``: ``dual_clip_frac``; with ``ref_logprobs``: ``kl_ref`` (token-mean k3) and
    ``kl_loss`` (the aggregated, beta-weighted term); with ``token_weights``:
    ``token_weight_mean``, ``token_weight_max``, ``token_weight_min``.
    All token fractions and means are over valid tokens of the whole batch.
    """
    m = bool_mask(mask)
    check_shapes(
        m, logprobs=logprobs, old_logprobs=old_logprobs, token_weights=token_weights,
        ref_logprobs=ref_logprobs, kl_token_weights=kl_token_weights,
    )
    if kl_coef != 0.0 and ref_logprobs is None:
        raise ValueError("kl_coef != 0 needs ref_logprobs")
    dtype = compute_dtype(logprobs, old_logprobs, ref_logprobs)
    lp = masked(logprobs.to(dtype), m)
    old = masked(old_logprobs.detach().to(dtype), m)
    adv = _token_advantages(advantages, m, dtype)

    ratio = policy_ratio(lp, old)
    objective, clip = clipped_surrogate(ratio, adv, clip_low, clip_high, dual_clip)
    if token_weights is not None:
        weights = masked(token_weights.detach().to(dtype), m)
        objective = objective * weights
    pg_loss = aggregate(-objective, m, aggregation, norm_len)
    loss = pg_loss

    fm = m.to(dtype)
    metrics: dict = {"loss": None, "pg_loss": pg_loss}
    if ref_logprobs is not None:
        kl = k3_kl(lp, masked(ref_logprobs.detach().to(dtype), m))
        weighted_kl = kl if kl_token_weights is None else kl * masked(kl_token_weights.detach().to(dtype), m)
        kl_loss = kl_coef * aggregate(weighted_kl, m, aggregation, norm_len)
        loss = loss + kl_loss
        metrics.update(kl_ref=masked_mean(kl.detach(), m), kl_loss=kl_loss)
    metrics["loss"] = loss
    with torch.no_grad():
        r = ratio.detach()
        metrics.update(
            clip_frac_low=masked_mean(clip.low.to(dtype), m),
            clip_frac_high=masked_mean(clip.high.to(dtype), m),
            clip_frac=masked_mean((clip.low | clip.high).to(dtype), m),
            ratio_mean=masked_mean(r, m),
            ratio_max=masked_max(r, m),
            ratio_min=masked_min(r, m),
            log_ratio_abs_mean=off_policyness(lp, old, m),
            adv_mean=masked_mean(adv, m),
            entropy_sampled=-masked_mean(lp.detach(), m),
            num_tokens=fm.sum(),
            num_seqs=float(m.shape[0]),
        )
        if dual_clip is not None:
            metrics["dual_clip_frac"] = masked_mean(clip.dual.to(dtype), m)
        if token_weights is not None:
            metrics.update(weight_metrics(weights, m, prefix="token_weight"))
    return loss, to_floats(metrics)
