"""GRPO: verifiable math rewards, group-relative advantages, a clipped surrogate.

Rewards come from the grader (cached on the sample, always the plain 0/1 verdict); the advantage
is computed per iteration within each group (or within labelled sub-groups: RePO's split
normalisation) from the reward plus DAPO's overlong length term when `trainer.overlong_cache` is
set, z-scored (population or sample standard deviation) or centred.
Aggregations: grpo (per-sequence mean), dapo (token mean), dr_grpo (constant normaliser
batch x max response tokens). Optional k3 KL to the initial policy and DAPO's dual clip.

Two loss-side options act on which rows count: `trainer.mask_truncated` leaves truncated rows out
of the loss (and out of every normaliser), after they took part in their group's advantages; rows
a strategy marks `OffPolicy.own_term` form a second term with its own normaliser, so the loss is
L = L_rest + sum over own-term rows normalised by their own count (RePO's L_on + lambda_off L_off,
lambda_off being the rows' `loss_weight`), and the KL term covers the other rows only.
"""

from __future__ import annotations

import torch

from replaylab.grading.result import ERROR, TIMEOUT, UNPARSEABLE_GOLD
from replaylab.losses import group_advantages, grpo_loss
from replaylab.losses.reward_shaping import overlong_penalty
from replaylab.models.batching import (
    collate,
    pad_per_token,
    response_logits,
    token_logprobs,
)
from replaylab.objectives.base import MEASURED_TOKENS, Objective, Scorers, register_objective
from replaylab.objectives.inputs import behaviour_weights, old_logprobs
from replaylab.types import Group, Sample, scored_statistics

UNGRADED = frozenset({TIMEOUT, ERROR, UNPARSEABLE_GOLD})  # grading statuses that are no verdict on the answer


def grade_rewards(samples: list[Sample], tokenizer, grader) -> None:
    """Binary verifiable reward from the math grader for samples that have none yet."""
    todo = [s for s in samples if s.reward is None]
    if not todo:
        return
    # A prefix continuation is graded on the whole answer it completes (prefix + suffix).
    texts = tokenizer.batch_decode([s.full_response_ids.tolist() for s in todo], skip_special_tokens=True)
    graded = grader.grade([(t, s.prompt.answer) for t, s in zip(texts, todo)], truncated=[s.truncated for s in todo])
    for s, res in zip(todo, graded):
        s.reward = 1.0 if res.correct else 0.0
        s.reward_status = res.status


def assign_advantages(groups: list[Group], mode: str, *, unbiased: bool = False, shaping=None) -> None:
    """Group-relative advantages on `Sample.advantage`. Samples of a group share a baseline unless
    the group carries `baseline_labels` (RePO's split normalisation). `shaping(sample)` is added to
    the reward first (the overlong term); `unbiased` divides by the sample standard deviation."""
    rewards, index, owners = [], [], []
    next_id = 0
    for g in groups:
        labels = g.baseline_labels or ["all"] * len(g.samples)
        ids = {lab: next_id + i for i, lab in enumerate(dict.fromkeys(labels))}
        next_id += len(ids)
        for s, lab in zip(g.samples, labels):
            reward = s.reward if s.reward is not None else 0.0
            rewards.append(reward + (shaping(s) if shaping else 0.0))
            index.append(ids[lab])
            owners.append(s)
    if not owners:
        return
    adv = group_advantages(torch.tensor(rewards), torch.tensor(index), mode=mode, unbiased=unbiased)
    for s, a in zip(owners, adv.tolist()):
        s.advantage = a


@register_objective
class GRPO(Objective):
    name = "grpo"
    family = "grpo"
    aggregations = ("dapo", "grpo", "dr_grpo")
    reads = frozenset({"clip_low", "clip_high", "dual_clip", "kl_coef", "advantage", "advantage_std", "is_cap",
                       "overlong_cache", "overlong_factor", "mask_truncated", "dynamic_sampling",
                       "dynamic_sampling_max_rounds"})

    def needs_reference(self) -> bool:
        return self.cfg.kl_coef > 0

    def score(self, samples: list[Sample], scorers: Scorers) -> int:
        grade_rewards(samples, scorers.tokenizer, scorers.grader)
        return 0

    def length_term(self, s: Sample) -> float:
        return overlong_penalty(s.full_response_ids.numel(), self.max_response_tokens, self.cfg.overlong_cache, self.cfg.overlong_factor)

    def prepare(self, groups: list[Group]) -> None:
        assign_advantages(groups, self.cfg.advantage, unbiased=self.cfg.advantage_std == "sample",
                          shaping=self.length_term if self.cfg.overlong_cache else None)

    def informative(self, group: Group) -> bool:
        """Dynamic sampling keeps a group only if its verifiable rewards differ (DAPO filters on
        accuracy, not on the shaped reward)."""
        return group.reward_std > 0

    # ------------------------------------------------------------ which rows count, and how much
    def trained(self, samples: list[Sample]) -> list[Sample]:
        """The rows that enter the loss: all, or the untruncated ones with trainer.mask_truncated."""
        return [s for s in samples if not s.truncated] if self.cfg.mask_truncated else list(samples)

    def _count(self, samples: list[Sample]) -> int:
        return sum(s.num_tokens for s in samples) if self.cfg.aggregation == "dapo" else len(samples)

    def share(self, part: list[Sample], batch: list[Sample]) -> float:
        return self._count(self.trained(part)) / max(1, self._count(self.trained(batch)))

    def term_weights(self, rows: list[Sample], batch: list[Sample]) -> tuple[list[float], list[float]] | None:
        """Per-row multipliers of the surrogate and of the KL term that turn the one aggregation the
        loss computes into L_rest + L_own, each normalised over its own rows of the minibatch (see
        the module doc); None when no row of the batch has a term of its own."""
        kept = self.trained(batch)
        own = [s for s in kept if s.off_policy.own_term]
        if not own:
            return None
        total, own_count = self._count(kept), self._count(own)
        rest_count = total - own_count
        surrogate = [total / own_count if s.off_policy.own_term else total / max(1, rest_count) for s in rows]
        kl = [0.0 if s.off_policy.own_term else w for s, w in zip(rows, surrogate)]
        return surrogate, kl

    # Rows whose advantage is exactly 0 are left out of the forward/backward when that is exact (see
    # `inert`); a test sets this False to compare against the forward over every row.
    skip_inert = True

    def inert(self, rows: list[Sample]) -> list[Sample]:
        """The rows whose gradient is exactly zero: advantage 0 (a zero-variance group's z-scored or
        centred advantage is 0.0 exactly) and no KL term. Their surrogate min(r A, clip(r) A) is 0
        with a zero gradient whatever the ratio, IS weight, own-term weight or dual clip, and they
        only enter the loss through its normaliser, which `loss` keeps. On the tiny GRPO recipe 44%
        of the groups have zero variance, so their forward/backward was most of a wasted update.
        Under DDP/FSDP2 too: every slice still runs one forward (a one-row zero loss when all its rows are
        inert), and ranks agree on the metric names before reducing them (training.update_metrics), so the
        rows are those of one process."""
        if not self.skip_inert or self.cfg.kl_coef > 0:
            return []
        return [s for s in rows if s.advantage == 0.0]

    def loss(self, model, samples, pad_id, reference=None, batch=None):
        c, device = self.cfg, next(model.parameters()).device
        rows = self.trained(samples)
        inert = {id(s) for s in self.inert(rows)}
        active = [s for s in rows if id(s) not in inert]
        if not active:
            # Every row of this slice is masked out or inert: a zero loss that still runs a (one-row)
            # forward, so that under DDP every parameter takes part in the backward. Only the counts
            # are reported: the trainer averages the other metrics over the slices that have them.
            logits = response_logits(model, collate((rows or samples)[:1], pad_id).to(device))
            counts = {"loss": 0.0, "pg_loss": 0.0, "num_seqs": float(len(rows)),
                      "num_tokens": float(sum(s.num_tokens for s in rows))} if rows else {}
            return logits.sum() * 0.0, counts
        if inert:
            # The loss over `rows` is the loss over `active` times their share of the normaliser
            # (tokens for dapo, sequences for grpo and dr_grpo): the inert rows add 0 to its numerator.
            loss, metrics = self.loss(model, active, pad_id, reference, batch if batch is not None else samples)
            scale = self._count(active) / self._count(rows)
            metrics = {k: v * scale if k in ("loss", "pg_loss") else v for k, v in metrics.items()}
            # the counts stay those of every trained row; ratio, clip, advantage and entropy metrics
            # are means over the rows with a gradient (the inert rows had no forward), so the slice's
            # token means count with the tokens they were measured on (training.update_metrics)
            metrics[MEASURED_TOKENS] = metrics["num_tokens"]
            metrics.update(num_seqs=float(len(rows)), num_tokens=float(sum(s.num_tokens for s in rows)))
            return loss * scale, metrics
        batch_rows = collate(rows, pad_id).to(device)
        width = batch_rows.response_ids.shape[1]
        logp = token_logprobs(response_logits(model, batch_rows), batch_rows.response_ids, self.temperature)
        old = pad_per_token([old_logprobs(s) for s in rows], width).to(device)
        weights = behaviour_weights(rows, width, c.is_cap)
        kl_weights = None
        terms = self.term_weights(rows, batch if batch is not None else samples)
        if terms is not None:
            surrogate, kl = (torch.tensor(w, dtype=torch.float32).unsqueeze(-1).expand(len(rows), width) for w in terms)
            weights = surrogate if weights is None else weights * surrogate
            kl_weights = kl.to(device)
        adv = torch.tensor([s.advantage for s in rows], dtype=torch.float32, device=device)
        ref = None
        if reference is not None and c.kl_coef > 0:
            with torch.no_grad():
                ref = token_logprobs(response_logits(reference, batch_rows), batch_rows.response_ids, self.temperature)
        return grpo_loss(logp, old, adv, batch_rows.response_mask, clip_low=c.clip_low, clip_high=c.clip_high,
                         aggregation=c.aggregation, norm_len=float(self.max_response_tokens),
                         token_weights=weights.to(device) if weights is not None else None,
                         ref_logprobs=ref, kl_coef=c.kl_coef, dual_clip=c.dual_clip, kl_token_weights=kl_weights)

    def batch_metrics(self, groups: list[Group], dropped: list[Group] = ()) -> dict[str, float]:
        samples = [s for g in groups for s in g.samples]
        # zero variance and |advantage| over every group scored: dynamic sampling's filter drops the zero-variance
        # ones before training, which read 0 by construction over the trained groups (Prompt Replay's metric is of
        # the prompts scored); without dynamic sampling the two sets are one
        zero_variance, abs_advantage = scored_statistics([*groups, *dropped])
        out = {"reward": sum(s.reward or 0.0 for s in samples) / len(samples),
               "zero_variance_groups": zero_variance,
               # no gradient at all: every advantage 0. Under RePO's split normalisation a group whose fresh and
               # replayed rows are each uniform (8 right, 8 wrong) has reward variance and no gradient
               "inert_groups": sum(all(s.advantage == 0.0 for s in g.samples) for g in groups) / len(groups),
               "abs_advantage": abs_advantage,
               # rewards of 0 that are no verdict: a grading timeout or error, or a gold the grader cannot parse
               # (a training set whose golds all fail reads like a model that solves nothing: reward 0)
               "ungraded_rewards": sum(s.reward_status in UNGRADED for s in samples) / len(samples)}
        if self.cfg.overlong_cache:
            out["overlong_penalty"] = sum(self.length_term(s) for s in samples) / len(samples)
        return out
