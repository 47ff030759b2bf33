"""`fixed_schedule`: N current-policy updates, then initial-policy replay (ALGORITHMS.md §2.2).

The R-OPD abstract's fixed baseline is 40 current-policy updates followed by 20 replay updates.
The phase is decided at the start of each iteration from the updates taken so far, so with several
updates per iteration the switch happens at the first iteration boundary at or after N updates.
Replay iterations sample the next prompts of the data order from the frozen initial policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from replaylab.config_fields import check, knob
from replaylab.replay.base import Plan, ReplayStrategy, StepContext, StrategyConfig, register_strategy


@dataclass
class FixedScheduleConfig(StrategyConfig):
    name: str = knob("fixed_schedule", "N current-policy updates, then initial-policy replay")
    current_updates: int = knob(40, "updates on fresh current-policy rollouts first (R-OPD abstract: 40)")
    replay_updates: int = knob(20, "updates on initial-policy rollouts after (R-OPD abstract: 20); informational: "
                                   "the run length is budget.max_updates, and replay continues until it")

    def __post_init__(self) -> None:
        check(self.current_updates >= 0, "strategy.current_updates", f"must be >= 0, got {self.current_updates}")
        check(self.replay_updates >= 0, "strategy.replay_updates", f"must be >= 0, got {self.replay_updates}")


@register_strategy
class FixedSchedule(ReplayStrategy):
    name = "fixed_schedule"
    Config = FixedScheduleConfig
    needs_initial_policy = True

    def plan(self, ctx: StepContext) -> Plan:
        prompts = ctx.stream.take(ctx.prompts_per_iteration)
        if ctx.update < self.cfg.current_updates:
            return Plan(fresh=prompts, metrics={"phase_replay": 0.0})
        return Plan(initial=prompts, metrics={"phase_replay": 1.0})
