"""Loss functions on padded ``(B, T)`` tensors, independent of samples and of the trainer.

Conventions: ``mask`` (B, T) is 1 on valid response tokens (EOS included); log-prob tensors
gather the sampled token; every loss is to be minimised and returns ``(loss, metrics)`` with
``metrics`` a ``dict[str, float]``. Padded positions may hold garbage (NaN, -inf): it reaches
neither the loss nor the gradient.

Registry names: ``grpo`` (grpo.py), ``opd_sampled`` and ``opd_full_rkl`` (opd.py).
"""

from replaylab.losses.advantages import group_advantages
from replaylab.losses.aggregation import AGGREGATIONS, aggregate
from replaylab.losses.grpo import grpo_loss
from replaylab.losses.importance import (
    off_policyness,
    policy_ratio,
    truncated_behaviour_weight,
    weight_metrics,
)
from replaylab.losses.kl import k3_kl
from replaylab.losses.opd import OPD_AGGREGATIONS, opd_full_rkl_loss, opd_sampled_loss
from replaylab.losses.registry import LOSSES, get_loss, register_loss
from replaylab.losses.surrogate import clipped_surrogate

__all__ = [
    "AGGREGATIONS",
    "LOSSES",
    "OPD_AGGREGATIONS",
    "aggregate",
    "clipped_surrogate",
    "get_loss",
    "grpo_loss",
    "group_advantages",
    "k3_kl",
    "off_policyness",
    "opd_full_rkl_loss",
    "opd_sampled_loss",
    "policy_ratio",
    "register_loss",
    "truncated_behaviour_weight",
    "weight_metrics",
]
