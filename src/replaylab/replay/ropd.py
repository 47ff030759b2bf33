"""`ropd`: current-policy OPD until the mean gradient stops changing, then initial-policy replay.

ALGORITHMS.md §2.2-2.4. After every current-policy iteration k the trainer hands over the gradient
of each minibatch (or gradient group, when an iteration has a single update). The trigger compares
the iteration's mean gradient with the previous comparison's:

  norm reading (default, §2.4 A):   mean_k = mean_m ||g_km||,  variation_k = std_m ||g_km|| (ddof 1)
                                     change_k = |mean_k - mean_prev|
  sketch reading (§2.4 B):           mean_k = mean_m sketch(g_km) (a vector), change_k = ||mean_k - mean_prev||
                                     variation_k = sqrt(sum_m ||sketch(g_km) - mean_k||^2 / (M - 1))

A comparison "hits" when change_k <= tolerance * variation_k (within minibatch-level variation);
after `consecutive` hits in a row the strategy switches, taking effect from the next iteration:
every later iteration samples the next prompts of the data order from the frozen initial policy.
Replayed samples are trained with their student log-probs recomputed under the current policy
(§2.3); `behaviour_weight_cap` turns on the truncated min(pi_prox / pi_0, c) weight (ablation).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from replaylab.config_fields import check, check_choice, knob
from replaylab.replay.base import Plan, ReplayStrategy, StepContext, StrategyConfig, UpdateStats, register_strategy
from replaylab.types import Group


@dataclass
class ROPDConfig(StrategyConfig):
    name: str = knob("ropd", "R-OPD: gradient-triggered switch to initial-policy replay")
    statistic: str = knob("norm", "norm (per-minibatch gradient norms, §2.4 A; ours as default) | sketch "
                                  "(sketched gradient vectors, §2.4 B; needs trainer.sketch_dim > 0)")
    consecutive: int = knob(2, "consecutive hits that trigger the switch (R-OPD abstract: two)")
    tolerance: float = knob(1.0, "a hit is change <= tolerance x variation (abstract: 'within' = 1.0)")
    burn_in: int = knob(2, "current-policy iterations before the first statistic is recorded (ours, §2.4: "
                           "skips the learning-rate warm-up transient)")
    behaviour_weight_cap: float | None = knob(None, "ablation: truncated behaviour weight min(pi_prox/pi_0, c) on "
                                                    "replayed samples (§2.3: c = 2); None = recompute only")

    def __post_init__(self) -> None:
        check_choice(self.statistic, "strategy.statistic", ["norm", "sketch"])
        check(self.consecutive >= 1, "strategy.consecutive", f"must be >= 1, got {self.consecutive}")
        check(self.tolerance > 0, "strategy.tolerance", f"must be > 0, got {self.tolerance}")
        check(self.burn_in >= 0, "strategy.burn_in", f"must be >= 0, got {self.burn_in}")


@register_strategy
class ROPD(ReplayStrategy):
    name = "ropd"
    Config = ROPDConfig
    needs_initial_policy = True
    trainers = ("opd",)

    def __init__(self, cfg):
        super().__init__(cfg)
        self.replaying = False
        self.hits = 0
        self.prev: torch.Tensor | float | None = None
        self.switch_iteration: int | None = None  # first iteration trained on replay
        self.current_iterations = 0

    def plan(self, ctx: StepContext) -> Plan:
        prompts = ctx.stream.take(ctx.prompts_per_iteration)
        if self.replaying:
            return Plan(initial=prompts, metrics={"phase_replay": 1.0})
        return Plan(fresh=prompts, metrics={"phase_replay": 0.0})

    def compose(self, fresh: list[Group], plan: Plan, ctx: StepContext) -> list[Group]:
        if self.cfg.behaviour_weight_cap is not None:
            for g in plan.reuse:
                for s in g.samples:
                    s.extras["is_cap"] = self.cfg.behaviour_weight_cap
        return fresh + plan.reuse

    def statistic(self, stats: UpdateStats) -> tuple[torch.Tensor | float, float]:
        """(mean, variation) of one iteration's minibatch gradients."""
        if self.cfg.statistic == "norm":
            norms = torch.tensor(stats.grad_norms, dtype=torch.float64)
            return float(norms.mean()), float(norms.std(unbiased=True))
        if not stats.grad_sketches:
            raise ValueError("strategy.statistic=sketch needs gradient sketches: set trainer.sketch_dim > 0")
        g = torch.stack([s.double() for s in stats.grad_sketches])
        mean = g.mean(0)
        variation = float(((g - mean).pow(2).sum(1).sum() / (len(g) - 1)).sqrt())
        return mean, variation

    def observe(self, groups: list[Group], stats: UpdateStats, ctx: StepContext) -> dict[str, float]:
        if self.replaying:
            return {"replaying": 1.0}
        self.current_iterations += 1
        if self.current_iterations <= self.cfg.burn_in:
            return {"replaying": 0.0}
        if len(stats.grad_norms) < 2:
            raise ValueError("R-OPD needs >= 2 minibatch gradients per iteration: set trainer.minibatches >= 2 "
                             "or trainer.stat_groups >= 2")
        mean, variation = self.statistic(stats)
        out = {"replaying": 0.0, "grad_variation": variation}
        out["grad_mean"] = float(mean) if isinstance(mean, float) else float(mean.norm())
        if self.prev is not None:
            change = abs(mean - self.prev) if isinstance(mean, float) else float((mean - self.prev).norm())
            hit = change <= self.cfg.tolerance * variation
            self.hits = self.hits + 1 if hit else 0
            out.update(grad_change=change, hit=float(hit), consecutive_hits=float(self.hits))
            if self.hits >= self.cfg.consecutive:
                self.replaying = True
                self.switch_iteration = stats.iteration + 1
                out["switch_iteration"] = float(self.switch_iteration)
        self.prev = mean
        return out

    def state_dict(self) -> dict:
        return {"replaying": self.replaying, "hits": self.hits, "prev": self.prev,
                "switch_iteration": self.switch_iteration, "current_iterations": self.current_iterations}

    def load_state_dict(self, state: dict) -> None:
        self.replaying, self.hits, self.prev = state["replaying"], state["hits"], state["prev"]
        self.switch_iteration, self.current_iterations = state["switch_iteration"], state["current_iterations"]
