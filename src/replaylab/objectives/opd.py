"""On-policy distillation objectives: a frozen teacher scores every student token.

`opd_full_rkl` minimises the exact full-vocabulary reverse KL KL(pi_S || pi_T) at every position of
the student's own rollouts, pi_S at the rollout temperature (the distribution that sampled them); it
needs the teacher's full distributions (a local teacher on a small vocabulary). `opd_sampled` is the sampled-token policy-gradient form (Thinking Machines'
on-policy distillation, slime, verl): the detached advantage log pi_T - log pi_old on the sampled
token, an importance ratio and a PPO clip; it works with a teacher server and any vocabulary.
"""

from __future__ import annotations

from replaylab.losses import opd_full_rkl_loss, opd_sampled_loss
from replaylab.models.batching import (
    collate,
    pad_per_token,
    response_logits,
    token_logprobs,
)
from replaylab.objectives.base import Objective, Scorers, register_objective
from replaylab.objectives.inputs import behaviour_weights, freshness_weights, old_logprobs
from replaylab.types import Sample


class TeacherScored(Objective):
    """OPD objectives: the frozen teacher scores every response token (cached on the sample)."""

    family = "opd"
    needs_teacher = True

    def score(self, samples: list[Sample], scorers: Scorers) -> int:
        before = scorers.teacher.tokens_scored
        scorers.teacher.score(samples, full=self.needs_full_teacher)
        return scorers.teacher.tokens_scored - before


@register_objective
class OPDFullReverseKL(TeacherScored):
    name = "opd_full_rkl"
    needs_full_teacher = True
    needs_proximal = False  # no ratio: the exact KL is taken under the current student itself

    def loss(self, model, samples, pad_id, reference=None, batch=None):
        device = next(model.parameters()).device
        batch = collate(samples, pad_id).to(device)
        width = batch.response_ids.shape[1]
        teacher = pad_per_token([s.teacher_full_logprobs.float() for s in samples], width).to(device)
        logits = response_logits(model, batch)
        weights = behaviour_weights(samples, width, None)  # loss weights only: no ratio to cap here
        weights = weights.to(device) if weights is not None else None
        # freshness compares log-probs at the rollout temperature, the one the behaviour log-probs have
        fresh, fresh_metrics = freshness_weights(samples, token_logprobs(logits, batch.response_ids, self.temperature),
                                                 batch.response_mask)
        if fresh is not None:
            weights = fresh if weights is None else weights * fresh
        # the student is the policy that samples, at the rollout temperature, as opd_sampled's log-probs are:
        # at T != 1 the two objectives then minimise one KL, KL(pi_S^T || pi_T), on the states pi_S^T visits
        student = logits / self.temperature if self.temperature != 1 else logits
        loss, metrics = opd_full_rkl_loss(student, teacher, batch.response_mask, aggregation=self.cfg.aggregation,
                                          token_ids=batch.response_ids, token_weight=weights)
        return loss, {**metrics, **fresh_metrics}


@register_objective
class OPDSampled(TeacherScored):
    name = "opd_sampled"
    reads = frozenset({"clip_low", "clip_high", "opd_coef", "is_cap"})

    def loss(self, model, samples, pad_id, reference=None, batch=None):
        device = next(model.parameters()).device
        batch = collate(samples, pad_id).to(device)
        width = batch.response_ids.shape[1]
        logp = token_logprobs(response_logits(model, batch), batch.response_ids, self.temperature)
        old = pad_per_token([old_logprobs(s) for s in samples], width).to(device)
        teacher = pad_per_token([s.teacher_logprobs for s in samples], width).to(device)
        weights = behaviour_weights(samples, width, self.cfg.is_cap)
        weights = weights.to(device) if weights is not None else None
        fresh, fresh_metrics = freshness_weights(samples, logp, batch.response_mask)
        if fresh is not None:
            weights = fresh.expand_as(logp) if weights is None else weights * fresh
        c = self.cfg
        loss, metrics = opd_sampled_loss(logp, old, teacher, batch.response_mask, coef=c.opd_coef, clip_low=c.clip_low,
                                         clip_high=c.clip_high, aggregation=c.aggregation, behaviour_weight=weights)
        return loss, {**metrics, **fresh_metrics}


__all__ = ["OPDFullReverseKL", "OPDSampled"]
