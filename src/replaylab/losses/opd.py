"""On-policy distillation (OPD) losses: minimise the per-token reverse KL ``KL(pi_S || pi_T)`` of
the student to a frozen teacher on student-generated prefixes (GKD, Agarwal et al. 2024; Thinking Machines' on-policy distillation, 2025).

Two estimators:

* ``opd_sampled_loss`` -- the sampled-token policy-gradient form (Thinking Machines /
  tinker-cookbook, slime ``--use-opd``, verl): a detached per-token advantage
  ``A_t = coef * (log pi_T(y_t) - log pi_old(y_t))`` times an importance weight. At
  ``theta = theta_old`` its expected gradient is exactly the gradient of the reverse KL, since
  ``E_y[A(y) grad log p(y)] = -grad KL`` when ``A = log pT - log pS`` (``E[grad log p] = 0``).
* ``opd_full_rkl_loss`` -- the exact full-vocabulary reverse KL at every position,
  ``sum_v pS(v) (log pS(v) - log pT(v))``, back-propagated through ``pS`` (GKD-style supervised
  form; the tiny world's default OPD objective).

Aggregation, in the one vocabulary of ``aggregation.py``: ``"dapo"`` = token-mean over the batch
(tinker divides by the token count), ``"grpo"`` = mean over each sequence's tokens, then over
sequences. Dr. GRPO's constant normaliser is a GRPO-family choice and is not offered here.
"""

from __future__ import annotations

import math

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
from replaylab.losses.registry import register_loss
from replaylab.losses.surrogate import clipped_surrogate

OPD_AGGREGATIONS: tuple[str, ...] = ("dapo", "grpo")


def _opd_aggregation(aggregation: str) -> str:
    if aggregation not in OPD_AGGREGATIONS:
        raise ValueError(f"unknown OPD aggregation {aggregation!r}; allowed: {', '.join(OPD_AGGREGATIONS)}")
    return aggregation


@register_loss("opd_sampled")
def opd_sampled_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    teacher_logprobs: Tensor,
    mask: Tensor,
    *,
    coef: float = 1.0,
    clip_low: float | None = None,
    clip_high: float | None = None,
    is_cap: float | None = None,
    behaviour_weight: Tensor | None = None,
    aggregation: str = "dapo",
) -> tuple[Tensor, dict[str, float]]:
    """Sampled-token OPD loss ``aggregate(-b_t * w_t(theta) * A_t)`` (to minimise) and metrics.

    ``A_t = coef * (teacher_logprobs - old_logprobs)`` is detached. ``old_logprobs`` serves both
    the advantage and the ratio ``w_t = exp(logprobs - old_logprobs)``; it need NOT be the
    behaviour policy: for replayed initial-policy rollouts the recommended default (AsyncOPD, arXiv 2606.24143) passes the student log-prob recomputed under the current model at replay time,
    and no ``pi_theta / pi_0`` weight. The optional behaviour correction is a separate detached
    ``behaviour_weight`` ``b_t`` (e.g. ``truncated_behaviour_weight(old, behaviour, cap=2)``).

    Args:
        logprobs: ``(B, T)`` log pi_theta of the sampled tokens (carries the gradient).
        old_logprobs: ``(B, T)`` log pi_old for the ratio and the advantage. Detached.
        teacher_logprobs: ``(B, T)`` log pi_T of the sampled tokens. Detached.
        mask: ``(B, T)`` 1 on valid response tokens (EOS included).
        coef: scale of the advantage (tinker ``kl_penalty_coef``, slime ``--opd-kl-coef``).
        clip_low, clip_high: PPO clip of ``w_t`` (tinker's "ppo" loss); a None side is open.
            Both None (default) = plain importance weight (tinker's "importance_sampling").
        is_cap: with no clip, truncate the plain weight: ``min(w_t, is_cap)`` (gradient 0 above).
        behaviour_weight: ``(B, T)`` detached per-token multiplier ``b_t``; None = 1.
        aggregation: ``"dapo"`` or ``"grpo"`` (module docstring).

    Metrics: ``loss``, ``reverse_kl`` (mean over valid tokens of ``logprobs - teacher_logprobs``,
    the one-sample reverse-KL estimate under the current student), ``reverse_kl_old`` (same with
    ``old_logprobs``), ``adv_mean``, ``ratio_mean``, ``ratio_max``, ``ratio_min``,
    ``log_ratio_abs_mean``, ``entropy_sampled``, ``num_tokens``, ``num_seqs``; when clipped:
    ``clip_frac_low``, ``clip_frac_high``, ``clip_frac``; with ``is_cap``: ``ratio_truncated_frac``;
    with ``behaviour_weight``: ``behaviour_weight_mean``, ``_max``, ``_min``.
    """
    m = bool_mask(mask)
    check_shapes(
        m, logprobs=logprobs, old_logprobs=old_logprobs, teacher_logprobs=teacher_logprobs,
        behaviour_weight=behaviour_weight,
    )
    clipping = clip_low is not None or clip_high is not None
    if clipping and is_cap is not None:
        raise ValueError("is_cap truncates the plain IS weight; it cannot be combined with clipping")
    if is_cap is not None and is_cap <= 0:
        raise ValueError(f"is_cap must be > 0 or None, got {is_cap}")
    agg = _opd_aggregation(aggregation)
    dtype = compute_dtype(logprobs, old_logprobs, teacher_logprobs)
    lp = masked(logprobs.to(dtype), m)
    old = masked(old_logprobs.detach().to(dtype), m)
    teacher = masked(teacher_logprobs.detach().to(dtype), m)
    adv = coef * (teacher - old)

    ratio = policy_ratio(lp, old)
    if clipping:
        objective, clip = clipped_surrogate(ratio, adv, clip_low, clip_high)
    else:
        weight = ratio if is_cap is None else ratio.clamp(max=is_cap)
        objective = weight * adv
    if behaviour_weight is not None:
        bw = masked(behaviour_weight.detach().to(dtype), m)
        objective = objective * bw
    loss = aggregate(-objective, m, agg)

    with torch.no_grad():
        r = ratio.detach()
        metrics: dict = {
            "loss": loss,
            "reverse_kl": masked_mean(lp.detach() - teacher, m),
            "reverse_kl_old": masked_mean(old - teacher, m),
            "adv_mean": masked_mean(adv, m),
            "ratio_mean": masked_mean(r, m),
            "ratio_max": masked_max(r, m),
            "ratio_min": masked_min(r, m),
            "log_ratio_abs_mean": off_policyness(lp, old, m),
            "entropy_sampled": -masked_mean(lp.detach(), m),
            "num_tokens": m.to(dtype).sum(),
            "num_seqs": float(m.shape[0]),
        }
        if clipping:
            metrics.update(
                clip_frac_low=masked_mean(clip.low.to(dtype), m),
                clip_frac_high=masked_mean(clip.high.to(dtype), m),
                clip_frac=masked_mean((clip.low | clip.high).to(dtype), m),
            )
        if is_cap is not None:
            metrics["ratio_truncated_frac"] = masked_mean((r >= is_cap).to(dtype), m)
        if behaviour_weight is not None:
            metrics.update(weight_metrics(bw, m, prefix="behaviour_weight"))
    return loss, to_floats(metrics)


@register_loss("opd_full_rkl")
def opd_full_rkl_loss(
    student_logits: Tensor,
    teacher_logprobs_full: Tensor,
    mask: Tensor,
    *,
    aggregation: str = "dapo",
    token_ids: Tensor | None = None,
    token_weight: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Exact full-vocabulary reverse-KL OPD loss (to minimise) and metrics.

    Per valid position ``KL_t = sum_v pS(v) (log pS(v) - log pT(v))`` with ``pS`` the softmax of
    ``student_logits`` (differentiated) and ``log pT`` the detached, already-normalised teacher
    log-probs. ``log_softmax`` is taken once and ``pS`` derived from it (no second softmax pass).
    Teacher log-probs are floored at ``log(finfo.tiny)`` (about -87 nats in float32): a teacher
    that puts exactly zero mass (``-inf``) on a token the student can emit would otherwise give
    ``inf`` / NaN (``0 * inf``) instead of a large finite penalty.

    Args:
        student_logits: ``(B, T, V)`` student logits at the positions predicting each response
            token (the temperature the loss should see already applied, normally T = 1).
        teacher_logprobs_full: ``(B, T, V)`` teacher log-probabilities. Detached.
        mask: ``(B, T)`` 1 on valid response tokens (EOS included).
        aggregation: ``"dapo"`` or ``"grpo"`` (module docstring).
        token_ids: optional ``(B, T)`` sampled tokens, for the sampled-token metrics.
        token_weight: optional ``(B, T)`` detached multiplier of each ``KL_t`` in the loss (a replayed
            sample's loss weight, f-OPD's freshness); the normaliser is unchanged; None = 1.

    Metrics: ``loss``, ``reverse_kl_exact`` (token-mean of ``KL_t``), ``reverse_kl`` (token-mean
    of ``log pS(y_t) - log pT(y_t)`` when ``token_ids`` is given -- the same estimate the sampled
    estimator logs -- else equal to ``reverse_kl_exact``, its on-policy expectation),
    ``entropy`` (exact student entropy, token-mean), ``num_tokens``, ``num_seqs``; with
    ``token_ids``: ``teacher_top1_mismatch`` (share of sampled tokens that are not the teacher's
    argmax).
    """
    m = bool_mask(mask)
    if student_logits.dim() != 3 or teacher_logprobs_full.shape != student_logits.shape:
        raise ValueError(
            "student_logits and teacher_logprobs_full must both be (B, T, V), got "
            f"{tuple(student_logits.shape)} and {tuple(teacher_logprobs_full.shape)}"
        )
    check_shapes(m, student_logits_bt=student_logits[..., 0], token_ids=token_ids)
    agg = _opd_aggregation(aggregation)
    dtype = compute_dtype(student_logits, teacher_logprobs_full)
    m3 = m.unsqueeze(-1)
    # Padded positions become uniform logits / zero teacher log-probs: finite, and the where()
    # keeps their gradient at exactly zero even if the raw logits there are NaN.
    logq = torch.log_softmax(masked(student_logits.to(dtype), m3), dim=-1)
    floor = math.log(torch.finfo(dtype).tiny)
    logt = masked(teacher_logprobs_full.detach().to(dtype), m3).clamp(min=floor)
    q = logq.exp()
    kl = (q * (logq - logt)).sum(-1)
    loss = aggregate(kl if token_weight is None else kl * token_weight.detach().to(dtype), m, agg)

    with torch.no_grad():
        kl_exact = masked_mean(kl.detach(), m)
        metrics: dict = {
            "loss": loss,
            "reverse_kl_exact": kl_exact,
            "reverse_kl": kl_exact,
            "entropy": masked_mean(-(q * logq).sum(-1), m),
            "num_tokens": m.to(dtype).sum(),
            "num_seqs": float(m.shape[0]),
        }
        if token_ids is not None:
            ids = masked(token_ids.long(), m).unsqueeze(-1)  # padded ids may be -100 etc.
            sampled = logq.gather(-1, ids).squeeze(-1) - logt.gather(-1, ids).squeeze(-1)
            metrics["reverse_kl"] = masked_mean(sampled, m)
            mismatch = (ids.squeeze(-1) != logt.argmax(-1)).to(dtype)
            metrics["teacher_top1_mismatch"] = masked_mean(mismatch, m)
    return loss, to_floats(metrics)
