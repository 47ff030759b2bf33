"""GRPO: verifiable math rewards, group-relative advantages, a clipped surrogate.

Rewards come from the grader (cached on the sample); advantages are computed per iteration within
each group (or within labelled sub-groups: RePO's split normalisation), z-scored or centred.
Aggregations: grpo (per-sequence mean), dapo (token mean), dr_grpo (constant normaliser
batch x max response tokens). Optional k3 KL to the initial policy and DAPO's dual clip.
"""

from __future__ import annotations

import torch

from replaylab.losses import group_advantages, grpo_loss
from replaylab.models.batching import (
    collate,
    pad_per_token,
    response_logits,
    token_logprobs,
)
from replaylab.objectives.base import Objective, Scorers, register_objective
from replaylab.objectives.inputs import behaviour_weights, old_logprobs
from replaylab.types import Group, Sample


def grade_rewards(samples: list[Sample], tokenizer, grader) -> None:
    """Binary verifiable reward from the math grader for samples that have none yet."""
    todo = [s for s in samples if s.reward is None]
    if not todo:
        return
    texts = tokenizer.batch_decode([s.response_ids.tolist() for s in todo], skip_special_tokens=True)
    for s, res in zip(todo, grader.grade([(t, s.prompt.answer) for t, s in zip(texts, todo)])):
        s.reward = 1.0 if res.correct else 0.0


def assign_advantages(groups: list[Group], mode: str) -> None:
    """Group-relative advantages on `Sample.advantage`. Samples of a group share a baseline unless
    the group carries `baseline_labels` (RePO's split normalisation)."""
    rewards, index, owners = [], [], []
    next_id = 0
    for g in groups:
        labels = g.baseline_labels or ["all"] * len(g.samples)
        ids = {lab: next_id + i for i, lab in enumerate(dict.fromkeys(labels))}
        next_id += len(ids)
        for s, lab in zip(g.samples, labels):
            rewards.append(s.reward if s.reward is not None else 0.0)
            index.append(ids[lab])
            owners.append(s)
    if not owners:
        return
    adv = group_advantages(torch.tensor(rewards), torch.tensor(index), mode=mode)
    for s, a in zip(owners, adv.tolist()):
        s.advantage = a


@register_objective
class GRPO(Objective):
    name = "grpo"
    family = "grpo"
    aggregations = ("dapo", "grpo", "dr_grpo")
    reads = frozenset({"clip_low", "clip_high", "dual_clip", "kl_coef", "advantage", "is_cap"})

    def needs_reference(self) -> bool:
        return self.cfg.kl_coef > 0

    def score(self, samples: list[Sample], scorers: Scorers) -> int:
        grade_rewards(samples, scorers.tokenizer, scorers.grader)
        return 0

    def prepare(self, groups: list[Group]) -> None:
        assign_advantages(groups, self.cfg.advantage)

    def loss(self, model, samples, pad_id, reference=None):
        c, device = self.cfg, next(model.parameters()).device
        batch = collate(samples, pad_id).to(device)
        width = batch.response_ids.shape[1]
        logp = token_logprobs(response_logits(model, batch), batch.response_ids, self.temperature)
        old = pad_per_token([old_logprobs(s) for s in samples], width).to(device)
        weights = behaviour_weights(samples, width, c.is_cap)
        adv = torch.tensor([s.advantage for s in samples], dtype=torch.float32, device=device)
        ref = None
        if reference is not None and c.kl_coef > 0:
            with torch.no_grad():
                ref = token_logprobs(response_logits(reference, batch), batch.response_ids, self.temperature)
        return grpo_loss(logp, old, adv, batch.response_mask, clip_low=c.clip_low, clip_high=c.clip_high,
                         aggregation=c.aggregation, norm_len=float(self.max_response_tokens),
                         token_weights=weights.to(device) if weights is not None else None,
                         ref_logprobs=ref, kl_coef=c.kl_coef, dual_clip=c.dual_clip)

    def batch_metrics(self, groups: list[Group]) -> dict[str, float]:
        samples = [s for g in groups for s in g.samples]
        return {"reward": sum(s.reward or 0.0 for s in samples) / len(samples),
                "zero_variance_groups": sum(g.reward_std == 0 for g in groups) / len(groups)}
