"""From samples to the padded tensors a loss reads: old log-probs and off-policy weights.

Each sample carries its off-policy treatment (`types.OffPolicy`, set by the strategy that replays
it): the PPO ratio's anchor (the proximal policy, or the stored behaviour policy as RePO does),
the cap of a truncated decoupled weight min(pi_prox / mu, cap) (POPO), a loss weight (RePO's
lambda_off), and f-OPD's freshness weight, which needs the log-probs the loss is being taken under
(`freshness_weights`).
"""

from __future__ import annotations

import torch

from replaylab.losses.importance import truncated_behaviour_weight
from replaylab.models.batching import pad_per_token
from replaylab.types import Sample


def old_logprobs(s: Sample) -> torch.Tensor:
    """Log-probs the PPO ratio is taken against: the proximal policy unless the strategy asked for
    the stored behaviour policy."""
    if s.off_policy.ratio_base == "behaviour":
        return s.behaviour_logprobs
    return s.proximal_logprobs if s.proximal_logprobs is not None else s.behaviour_logprobs


def sample_cap(s: Sample, trainer_cap: float | None) -> float | None:
    """The behaviour-weight cap of a sample: the strategy's, else trainer.is_cap for replayed samples."""
    if not s.off_policy.cap_from_trainer:
        return s.off_policy.is_cap
    return trainer_cap if s.source != "fresh" else None


def behaviour_weights(samples: list[Sample], width: int, trainer_cap: float | None) -> torch.Tensor | None:
    """Per-token loss multipliers (cap and loss weight); None when every multiplier is 1."""
    caps = [sample_cap(s, trainer_cap) for s in samples]
    scales = [float(s.off_policy.loss_weight) for s in samples]
    if all(c is None for c in caps) and all(w == 1.0 for w in scales):
        return None
    rows = []
    for s, cap, scale in zip(samples, caps, scales):
        if cap is None:
            rows.append(torch.full((s.num_tokens,), scale))
        else:
            prox = s.proximal_logprobs if s.proximal_logprobs is not None else s.behaviour_logprobs
            rows.append(truncated_behaviour_weight(prox, s.behaviour_logprobs, cap) * scale)
    return pad_per_token(rows, width, fill=0.0)


def freshness_weights(samples: list[Sample], current_logp: torch.Tensor, mask: torch.Tensor
                      ) -> tuple[torch.Tensor | None, dict[str, float]]:
    """f-OPD's per-sample freshness f_i = exp(-alpha * mean_t |log pi_theta(y_t) - log mu(y_t)|)
    (ALGORITHMS.md §9), 0 below the sample's `freshness_min`; 1 for samples without a
    `freshness_alpha`. `current_logp` (B, L) are the sampled tokens' log-probs under the policy the
    loss is taken under (detached here). Returns ((B, 1) weights or None, metrics)."""
    if all(s.off_policy.freshness_alpha is None for s in samples):
        return None, {}
    mu = pad_per_token([s.behaviour_logprobs for s in samples], current_logp.shape[1]).to(current_logp.device)
    m = mask.to(current_logp.dtype)
    drift = ((current_logp.detach() - mu).abs() * m).sum(-1) / m.sum(-1).clamp(min=1)
    alpha = torch.tensor([s.off_policy.freshness_alpha or 0.0 for s in samples], device=drift.device)
    floor = torch.tensor([s.off_policy.freshness_min for s in samples], device=drift.device)
    f = torch.exp(-alpha * drift)
    weight = torch.where(f >= floor, f, torch.zeros_like(f))
    scored = [i for i, s in enumerate(samples) if s.off_policy.freshness_alpha is not None]
    metrics = {"freshness_mean": float(f[scored].mean()), "freshness_cut_frac": float((f[scored] < floor[scored]).float().mean()),
               "policy_drift_mean": float(drift[scored].mean())}
    return weight.unsqueeze(-1), metrics
