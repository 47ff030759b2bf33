"""`fopd`: freshness-aware OPD over a buffer of stale samples (f-OPD, Chen, Zhang, Wu, arXiv
2605.17862; ALGORITHMS.md §9, whose concrete form is ours: the paper gives the idea, not the formula).

The buffer is `fifo`'s (each iteration samples ceil(`generation_ratio` x P) new prompts and trains
on P = `trainer.prompts_per_iteration` drawn uniformly from the newest `buffer_batches` x P), standing in for
an asynchronous rollout queue whose samples lag the learner. Each trained sample is weighted by its
freshness, how far the policy has moved on its own tokens:

    freshness = "logprob":  f_i = exp(-alpha * mean_t |log pi_theta(y_t) - log mu(y_t)|)
    freshness = "age":      f_i = exp(-alpha * age), age in iterations (updates since generated
                            / updates per iteration: a sample of the previous iteration is 1 old)

pi_theta is the policy the loss is taken under (the log-probs come from the loss's own forward,
detached: no extra pass), mu the stored behaviour policy; fresh samples start at f = 1 (with an in-process engine; vLLM's
log-probs differ from the trainer's by its kernels, so f is a little below 1 there). The loss
weight of a sample is f_i; a sample with f_i < `f_min` gets weight 0 ("logprob": it stays in the
loss's normaliser, as a clipped row does) or is left out of the batch ("age": known before the
forward). The teacher's scores are cached with the sample, so a replayed sample costs no teacher
tokens (the supervision drift f-OPD names is not corrected: the teacher scored the same tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from replaylab.config_fields import check, check_choice, knob
from replaylab.replay.base import Plan, StepContext, UpdateStats, register_strategy
from replaylab.replay.fifo import FIFO, FIFOConfig
from replaylab.types import Group


@dataclass
class FOPDConfig(FIFOConfig):
    name: str = knob("fopd", "OPD from a buffer of stale samples, each weighted by its freshness (f-OPD, arXiv 2605.17862)")
    freshness: str = knob("logprob", "logprob: exp(-alpha x mean token |log pi_theta - log mu|) | age: exp(-alpha x iterations since generated)")
    alpha: float = knob(10.0, "freshness decay (per nat of mean log-prob drift, or per iteration of age); chosen, not from the paper")
    f_min: float = knob(0.25, "samples fresher than this are trained; below it their weight is 0 (chosen)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self.freshness, "strategy.freshness", ["logprob", "age"])
        check(self.alpha > 0, "strategy.alpha", f"must be > 0, got {self.alpha}")
        check(0 <= self.f_min < 1, "strategy.f_min", f"must be in [0, 1), got {self.f_min}")


@register_strategy
class FOPD(FIFO):
    name = "fopd"
    Config = FOPDConfig
    trainers = ("opd",)

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        s = cfg.strategy
        check(s.freshness != "age" or math.exp(-s.alpha) >= s.f_min, "strategy.f_min",
              f"{s.f_min} cuts every sample older than this iteration (age 1 weighs exp(-alpha={s.alpha}) = "
              f"{math.exp(-s.alpha):.3f}): replay would do nothing")

    def compose(self, fresh: list[Group], initial: list[Group], plan: Plan, ctx: StepContext) -> list[Group]:
        out = []
        self.age_cut = 0
        for g in super().compose(fresh, initial, plan, ctx):
            kept = []
            for s in g.samples:
                if self.cfg.freshness == "logprob":
                    s.off_policy = replace(s.off_policy, freshness_alpha=self.cfg.alpha, freshness_min=self.cfg.f_min)
                    kept.append(s)
                    continue
                f = math.exp(-self.cfg.alpha * (ctx.update - s.policy_version) / ctx.updates_per_iteration)
                if f >= self.cfg.f_min:
                    s.off_policy = replace(s.off_policy, loss_weight=f)
                    kept.append(s)
                else:
                    self.age_cut += 1
            if kept:
                out.append(Group(g.prompt, kept, None))
        if not out:  # every drawn sample too stale: train on this iteration's own (f = 1)
            out = fresh
        return out

    def observe(self, groups: list[Group], stats: UpdateStats, ctx: StepContext) -> dict[str, float]:
        metrics = super().observe(groups, stats, ctx)
        if self.cfg.freshness == "age":
            samples = [s for g in groups for s in g.samples]
            metrics["freshness_mean"] = sum(s.off_policy.loss_weight for s in samples) / len(samples)
            metrics["age_cut_samples"] = float(self.age_cut)
        return metrics
