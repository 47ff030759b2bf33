"""`current`: the baseline. Every iteration trains only on fresh current-policy rollouts."""

from __future__ import annotations

from dataclasses import dataclass

from replaylab.config_fields import knob
from replaylab.replay.base import WHOLE_RUN, ReplayStrategy, StrategyConfig, register_strategy


@dataclass
class CurrentConfig(StrategyConfig):
    name: str = knob("current", "fresh current-policy rollouts only (baseline)")


@register_strategy
class Current(ReplayStrategy):
    name = "current"
    Config = CurrentConfig
    replays = False

    def current_prefix(self) -> tuple[int, dict[str, float]]:
        return WHOLE_RUN, {}
