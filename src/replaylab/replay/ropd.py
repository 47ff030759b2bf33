"""`ropd`: current-policy OPD until the mean gradient stops changing, then initial-policy replay.

R-OPD (see docs/ropd_trigger.md): after `burn_in` updates, the gradients of every update's
gradient groups are pooled into windows of `window` updates, and each window's mean is compared
with the previous window's (`replay.gradient_trigger`: the change against its standard error from
minibatch noise). After `consecutive` hits in a row the strategy switches, taking effect from the
next iteration: every later iteration samples the next prompts of the data order from the frozen
initial policy. Replayed samples are trained with their student log-probs recomputed under the
current policy; `behaviour_weight_cap` turns on the truncated min(pi_prox / pi_0, c) weight (an
ablation; needs an objective with an importance ratio).

At each comparison the strategy row carries grad_mean, grad_variation (per-minibatch SD),
grad_change, grad_change_se, grad_change_ratio, hit, consecutive_hits, and switch_iteration once
it switches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from replaylab.config_fields import check, check_choice, knob
from replaylab.replay.base import (GradientReading, Plan, ReplayStrategy, StepContext, StrategyConfig, UpdateStats,
                                   register_strategy)
from replaylab.replay.gradient_trigger import Window, WindowSummary, compare
from replaylab.types import Group, OffPolicy


@dataclass
class ROPDConfig(StrategyConfig):
    name: str = knob("ropd", "R-OPD: gradient-triggered switch to initial-policy replay")
    statistic: str = knob("norm", "norm (per-gradient-group norms) | sketch (sketched gradient vectors, "
                                  "debiased change; needs trainer.sketch_dim > 0)")
    window: int = knob(8, "updates pooled per comparison window (C); a multiple of the updates per iteration. "
                          "8: large enough that a steady drift of 0.3 gradient-SD per update is detected "
                          "(docs/ropd_trigger.md), small enough for several comparisons in a 40-update phase")
    consecutive: int = knob(2, "consecutive hits that trigger the switch (R-OPD abstract: two)")
    tolerance: float = knob(1.0, "a hit is change <= tolerance x the change's standard error (1: 'within' "
                                 "minibatch-level variation, a hit has probability 0.68 under pure noise; 2: 0.95)")
    burn_in: int = knob(10, "updates before the first window (at least trainer.warmup_updates: no comparison "
                            "while the learning rate ramps; conf/strategy/ropd.yaml ties it to the warm-up)")
    behaviour_weight_cap: float | None = knob(None, "ablation: truncated behaviour weight min(pi_prox/pi_0, c) on "
                                                    "replayed samples (c = 2); None = recompute only")

    def __post_init__(self) -> None:
        check_choice(self.statistic, "strategy.statistic", ["norm", "sketch"])
        check(self.window >= 1, "strategy.window", f"must be >= 1 update, got {self.window}")
        check(self.consecutive >= 1, "strategy.consecutive", f"must be >= 1, got {self.consecutive}")
        check(self.tolerance > 0 and math.isfinite(self.tolerance), "strategy.tolerance",
              f"must be a positive number, got {self.tolerance}")
        check(self.burn_in >= 0, "strategy.burn_in", f"must be >= 0, got {self.burn_in}")
        check(self.behaviour_weight_cap is None or self.behaviour_weight_cap > 0, "strategy.behaviour_weight_cap",
              f"must be positive or null, got {self.behaviour_weight_cap}")


@register_strategy
class ROPD(ReplayStrategy):
    name = "ropd"
    Config = ROPDConfig
    needs_initial_policy = True
    reads_gradients = True
    trainers = ("opd",)

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        s, t = cfg.strategy, cfg.trainer
        check(s.behaviour_weight_cap is None or t.is_cap is None, "trainer.is_cap",
              f"{t.is_cap!r} has no effect: strategy.behaviour_weight_cap={s.behaviour_weight_cap} caps the replayed "
              "initial-policy rollouts instead")
        check(s.burn_in >= t.warmup_for(cfg.budget.max_updates), "strategy.burn_in",
              f"{s.burn_in} is shorter than the warm-up of {t.warmup_for(cfg.budget.max_updates)} updates: comparisons during the "
              "learning-rate warm-up measure the ramp, not learning")
        check(s.window % t.updates_per_iteration == 0, "strategy.window",
              f"{s.window} updates is not a whole number of iterations of {t.updates_per_iteration} updates "
              "(trainer.minibatches x trainer.resample_period); windows close at iteration boundaries")
        check(s.window * t.stat_groups >= 2, "strategy.window",
              "a window needs >= 2 gradients to measure their variation: raise strategy.window or trainer.stat_groups")
        if s.statistic == "sketch":
            check(t.sketch_dim > 0, "trainer.sketch_dim", "strategy.statistic=sketch needs a gradient sketch: set trainer.sketch_dim > 0")
        else:
            check(t.sketch_dim == 0, "trainer.sketch_dim",
                  f"{t.sketch_dim} has no effect with strategy.statistic=norm (only the sketch reading uses it): set it to 0")
        if s.behaviour_weight_cap is not None:
            check(t.objective != "opd_full_rkl", "strategy.behaviour_weight_cap",
                  "has no effect under trainer.objective=opd_full_rkl (the exact reverse KL has no importance "
                  "ratio to weight): use trainer=opd_sampled or leave it null")

    def __init__(self, cfg):
        super().__init__(cfg)
        self.replaying = False
        self.hits = 0
        self.window = Window()
        self.previous: WindowSummary | None = None
        self.switch_iteration: int | None = None  # first iteration trained on replay

    def plan(self, ctx: StepContext) -> Plan:
        prompts = ctx.stream.take(ctx.prompts_per_iteration)
        if self.replaying:
            return Plan(initial=prompts, metrics={"phase_replay": 1.0})
        return Plan(fresh=prompts, metrics={"phase_replay": 0.0})

    def compose(self, fresh: list[Group], initial: list[Group], plan: Plan, ctx: StepContext) -> list[Group]:
        if self.cfg.behaviour_weight_cap is not None:
            treatment = OffPolicy(is_cap=self.cfg.behaviour_weight_cap, cap_from_trainer=False)
            for g in initial:
                for s in g.samples:
                    s.off_policy = treatment
        return fresh + plan.reuse + initial

    def readings(self, stats: UpdateStats) -> list[torch.Tensor]:
        if self.cfg.statistic == "norm":
            return [torch.tensor([n], dtype=torch.float64) for n in stats.grad_norms]
        if not stats.grad_sketches:
            raise ValueError("strategy.statistic=sketch needs gradient sketches: set trainer.sketch_dim > 0")
        return list(stats.grad_sketches)

    def observe(self, groups: list[Group], stats: UpdateStats, ctx: StepContext) -> dict[str, float]:
        return self.step(self.readings(stats) if not self.replaying and ctx.update >= self.cfg.burn_in else [],
                         ctx.update, stats.update, stats.iteration)

    def follow_readings(self, readings: list[GradientReading]) -> list[dict[str, float]] | None:
        # Only the norm reading can be replayed: sketches are not recorded (they are d floats per group).
        if self.cfg.statistic != "norm":
            return None
        rows = []
        for k, r in enumerate(readings):
            if self.replaying:  # switched at an earlier iteration: this one already trained on replay
                return None
            norms = [torch.tensor([n], dtype=torch.float64) for n in r.grad_norms]
            rows.append({"phase_replay": 0.0, **self.step(norms, r.start_update, r.update, r.iteration)})
        return rows

    def step(self, readings: list[torch.Tensor], start_update: int, update: int, iteration: int) -> dict[str, float]:
        """The trigger after one iteration (updates start_update..update) that measured `readings`."""
        if self.replaying:
            return {"replaying": 1.0}
        if start_update < self.cfg.burn_in:  # this iteration's updates started inside the burn-in
            return {"replaying": 0.0}
        self.window.add(readings, update - start_update)
        if self.window.updates < self.cfg.window:
            return {"replaying": 0.0}
        current = self.window.close()
        self.window = Window()
        out = {"replaying": 0.0, "grad_mean": current.mean_size, "grad_variation": math.sqrt(current.variation),
               "window_gradients": float(current.count)}
        if self.previous is not None:
            c = compare(self.previous, current, self.cfg.tolerance)
            self.hits = self.hits + 1 if c.hit else 0
            out.update(grad_change=c.change, grad_change_se=c.se, grad_change_ratio=c.ratio, hit=float(c.hit),
                       consecutive_hits=float(self.hits))
            if self.hits >= self.cfg.consecutive:
                self.replaying = True
                self.switch_iteration = iteration + 1
                out["switch_iteration"] = float(self.switch_iteration)
                out["switch_update"] = float(update)
        self.previous = current
        return out

    def state_dict(self) -> dict:
        prev = self.previous
        return {"replaying": self.replaying, "hits": self.hits, "window": self.window.state_dict(),
                "previous": None if prev is None else {"mean": prev.mean, "variation": prev.variation, "count": prev.count},
                "switch_iteration": self.switch_iteration}

    def load_state_dict(self, state: dict) -> None:
        self.replaying, self.hits, self.switch_iteration = state["replaying"], state["hits"], state["switch_iteration"]
        self.window = Window.from_state(state["window"])
        prev = state["previous"]
        self.previous = None if prev is None else WindowSummary(prev["mean"], prev["variation"], prev["count"])
