"""Loss functions ("objectives") on padded ``(B, T)`` tensors, independent of the trainer.

Conventions: ``mask`` (B, T) is 1 on valid response tokens (EOS included); log-prob tensors
gather the sampled token; every loss is to be minimised and returns ``(loss, metrics)`` with
``metrics`` a ``dict[str, float]``. Padded positions may hold garbage (NaN, -inf): it reaches
neither the loss nor the gradient.

Registry names: ``grpo`` (grpo.py), ``opd_sampled`` and ``opd_full_rkl`` (opd.py).
"""

from replaylab.objectives.advantages import group_advantages
from replaylab.objectives.aggregation import AGGREGATIONS, aggregate
from replaylab.objectives.grpo import grpo_loss
from replaylab.objectives.importance import (
    off_policyness,
    policy_ratio,
    truncated_behaviour_weight,
    weight_metrics,
)
from replaylab.objectives.kl import k3_kl
from replaylab.objectives.opd import OPD_AGGREGATIONS, opd_full_rkl_loss, opd_sampled_loss
from replaylab.objectives.registry import OBJECTIVES, get_objective, register_objective
from replaylab.objectives.surrogate import clipped_surrogate

__all__ = [
    "AGGREGATIONS",
    "OBJECTIVES",
    "OPD_AGGREGATIONS",
    "aggregate",
    "clipped_surrogate",
    "get_objective",
    "grpo_loss",
    "group_advantages",
    "k3_kl",
    "off_policyness",
    "opd_full_rkl_loss",
    "opd_sampled_loss",
    "policy_ratio",
    "register_objective",
    "truncated_behaviour_weight",
    "weight_metrics",
]
