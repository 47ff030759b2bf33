"""Replay strategies: the protocol, the registry and one module per strategy."""

from replaylab.replay import current, fixed_schedule, initial, recent, ropd  # noqa: F401  (registers)
from replaylab.replay import prompt_replay, repo, popo, rlep  # noqa: F401
from replaylab.replay import depo, fifo, fopd, hdl, prefixrl, reopd  # noqa: F401
from replaylab.replay.base import (
    STRATEGIES,
    Plan,
    PromptStream,
    ReplayStrategy,
    StepContext,
    StrategyConfig,
    UpdateStats,
    build_strategy,
    register_strategy,
)

__all__ = [
    "STRATEGIES",
    "Plan",
    "PromptStream",
    "ReplayStrategy",
    "StepContext",
    "StrategyConfig",
    "UpdateStats",
    "build_strategy",
    "register_strategy",
]
