"""From samples to the padded tensors a loss reads: old log-probs and off-policy weights.

Each sample carries its off-policy treatment (`types.OffPolicy`, set by the strategy that replays
it): the PPO ratio's anchor (the proximal policy, or the stored behaviour policy as RePO does),
the cap of a truncated decoupled weight min(pi_prox / mu, cap) (POPO), and a loss weight (RePO's
lambda_off).
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
