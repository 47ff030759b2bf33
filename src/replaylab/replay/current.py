"""`current`: the baseline. Every iteration trains only on fresh current-policy rollouts."""

from __future__ import annotations

from dataclasses import dataclass

from replaylab.config_fields import knob
from replaylab.replay.base import ReplayStrategy, StrategyConfig, register_strategy


@dataclass
class CurrentConfig(StrategyConfig):
    name: str = knob("current", "fresh current-policy rollouts only (baseline)")


@register_strategy
class Current(ReplayStrategy):
    name = "current"
    Config = CurrentConfig
    replays = False
