"""`initial`: train only on initial-policy rollouts (R-OPD study baseline; docs/ropd_trigger.md).

Every iteration takes the next prompts of the data order and samples them from a frozen copy of
the initial policy; nothing is ever sampled from the current policy. Teacher scores and rewards are
cached on the samples; the student's log-probs are recomputed under the current policy at training
time (R-OPD: recomputed under the current student), which is what the trainer does for every sample it did not just generate.
"""

from __future__ import annotations

from dataclasses import dataclass

from replaylab.config_fields import knob
from replaylab.replay.base import Plan, ReplayStrategy, StepContext, StrategyConfig, register_strategy


@dataclass
class InitialConfig(StrategyConfig):
    name: str = knob("initial", "initial-policy rollouts only")


@register_strategy
class Initial(ReplayStrategy):
    name = "initial"
    Config = InitialConfig
    needs_initial_policy = True

    def plan(self, ctx: StepContext) -> Plan:
        return Plan(initial=ctx.stream.take(ctx.prompts_per_iteration))
