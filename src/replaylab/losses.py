"""From samples to one objective value: the bridge between `Sample`s and `replaylab.objectives`.

It pads the per-sample tensors (teacher scores, behaviour and proximal log-probs, advantages),
applies each sample's off-policy treatment (see `replay.base`: `ratio_base`, `is_cap`) and calls
the registered objective. The trainer only knows `minibatch_loss`.
"""

from __future__ import annotations

import torch

from replaylab.batching import collate, pad_per_token, response_logits, token_logprobs
from replaylab.objectives import get_objective
from replaylab.objectives.importance import truncated_behaviour_weight
from replaylab.types import Sample

# The trainer's aggregation names (GRPO family) -> the OPD objectives' names.
OPD_AGGREGATION = {"dapo": "token", "grpo": "seq", "dr_grpo": "token"}


def old_logprobs(s: Sample) -> torch.Tensor:
    """Log-probs the PPO ratio is taken against: the proximal policy unless the strategy asked for
    the stored behaviour policy (RePO)."""
    if s.extras.get("ratio_base") == "behaviour":
        return s.behaviour_logprobs
    return s.extras.get("prox_logprobs", s.behaviour_logprobs)


def behaviour_weights(samples: list[Sample], width: int, default_cap: float | None) -> torch.Tensor | None:
    """Per-token loss multipliers: the truncated decoupled weight min(pi_prox / mu, cap) for samples
    that carry a cap (`is_cap`, or trainer.is_cap for non-fresh samples), times a per-sample
    `loss_weight` (e.g. RePO's lambda_off on replayed rows). None when every multiplier is 1."""
    caps = [s.extras.get("is_cap", default_cap if s.source != "fresh" else None) for s in samples]
    scales = [float(s.extras.get("loss_weight", 1.0)) for s in samples]
    if all(c is None for c in caps) and all(w == 1.0 for w in scales):
        return None
    rows = []
    for s, cap, scale in zip(samples, caps, scales):
        if cap is None:
            rows.append(torch.full((s.num_tokens,), scale))
        else:
            prox = s.extras.get("prox_logprobs", s.behaviour_logprobs)
            rows.append(truncated_behaviour_weight(prox, s.behaviour_logprobs, cap) * scale)
    return pad_per_token(rows, width, fill=0.0)


def minibatch_loss(
    model: torch.nn.Module,
    samples: list[Sample],
    cfg,  # TrainerConfig
    pad_id: int,
    temperature: float,
    max_response_tokens: int,
    ref_model: torch.nn.Module | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    device = next(model.parameters()).device
    batch = collate(samples, pad_id).to(device)
    L = batch.response_ids.shape[1]
    mask = batch.response_mask
    logits = response_logits(model, batch)
    objective = get_objective(cfg.objective)
    if cfg.objective == "opd_full_rkl":
        teacher_full = pad_per_token([s.teacher_full_logprobs.float() for s in samples], L).to(device)
        return objective(logits, teacher_full, mask, aggregation=OPD_AGGREGATION[cfg.aggregation],
                         token_ids=batch.response_ids)
    logp = token_logprobs(logits, batch.response_ids, temperature)
    old = pad_per_token([old_logprobs(s) for s in samples], L).to(device)
    weights = behaviour_weights(samples, L, cfg.is_cap)
    weights = weights.to(device) if weights is not None else None
    if cfg.objective == "opd_sampled":
        teacher = pad_per_token([s.teacher_logprobs for s in samples], L).to(device)
        return objective(logp, old, teacher, mask, coef=cfg.opd_coef, clip_low=cfg.clip_low,
                         clip_high=cfg.clip_high, behaviour_weight=weights,
                         aggregation=OPD_AGGREGATION[cfg.aggregation])
    adv = torch.tensor([s.extras["advantage"] for s in samples], dtype=torch.float32, device=device)
    ref = None
    if ref_model is not None and cfg.kl_coef > 0:
        with torch.no_grad():
            ref = token_logprobs(response_logits(ref_model, batch), batch.response_ids, temperature)
    return objective(logp, old, adv, mask, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                     aggregation=cfg.aggregation, norm_len=float(max_response_tokens), token_weights=weights,
                     ref_logprobs=ref, kl_coef=cfg.kl_coef, dual_clip=cfg.dual_clip)


def share_of_batch(samples: list[Sample], all_samples: list[Sample], aggregation: str) -> float:
    """The weight that makes a sum of per-group losses equal the loss of the whole batch:
    the group's share of tokens (token-mean) or of sequences (sequence-mean, Dr. GRPO)."""
    if aggregation == "dapo":
        return sum(s.num_tokens for s in samples) / max(1, sum(s.num_tokens for s in all_samples))
    return len(samples) / len(all_samples)
