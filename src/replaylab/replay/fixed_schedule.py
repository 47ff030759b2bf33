"""`fixed_schedule`: N current-policy updates, then initial-policy replay (R-OPD abstract).

The R-OPD abstract's fixed baseline is 40 current-policy updates followed by 20 replay updates.
The run is exactly `current_updates + replay_updates` long (`budget.max_updates` must say so), and
`current_updates` is a whole number of iterations, so the switch lands on N. Replay iterations
sample the next prompts of the data order from the frozen initial policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from replaylab.config_fields import check, knob
from replaylab.replay.base import Plan, ReplayStrategy, StepContext, StrategyConfig, register_strategy


@dataclass
class FixedScheduleConfig(StrategyConfig):
    name: str = knob("fixed_schedule", "N current-policy updates, then initial-policy replay")
    current_updates: int = knob(40, "updates on fresh current-policy rollouts first (R-OPD abstract: 40)")
    replay_updates: int = knob(20, "updates on initial-policy rollouts after (R-OPD abstract: 20); "
                                   "budget.max_updates must equal current_updates + replay_updates")

    def __post_init__(self) -> None:
        check(self.current_updates >= 0, "strategy.current_updates", f"must be >= 0, got {self.current_updates}")
        check(self.replay_updates >= 0, "strategy.replay_updates", f"must be >= 0, got {self.replay_updates}")


@register_strategy
class FixedSchedule(ReplayStrategy):
    name = "fixed_schedule"
    Config = FixedScheduleConfig
    needs_initial_policy = True

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        s, per = cfg.strategy, cfg.trainer.updates_per_iteration
        check(cfg.budget.max_updates == s.current_updates + s.replay_updates, "budget.max_updates",
              f"{cfg.budget.max_updates} != strategy.current_updates + strategy.replay_updates = "
              f"{s.current_updates} + {s.replay_updates}: set budget.max_updates={s.current_updates + s.replay_updates} "
              "or change the schedule")
        check(s.current_updates % per == 0, "strategy.current_updates",
              f"{s.current_updates} updates is not a whole number of iterations of {per} updates "
              "(trainer.minibatches x trainer.resample_period), so the switch could not land on it")

    def current_prefix(self) -> tuple[int, dict[str, float]]:
        return self.cfg.current_updates, {"phase_replay": 0.0}  # what plan() writes before the switch

    def plan(self, ctx: StepContext) -> Plan:
        prompts = ctx.stream.take(ctx.prompts_per_iteration)
        if ctx.update < self.cfg.current_updates:
            return Plan(fresh=prompts, metrics={"phase_replay": 0.0})
        return Plan(initial=prompts, metrics={"phase_replay": 1.0})
