"""`recent`: N current-policy updates, then replay a fixed set of recent current-policy rollouts.

The control of the R-OPD study (ALGORITHMS.md §2): the same schedule as `fixed_schedule`, but the
replay phase trains on the last `window` iterations' own rollouts (cycled oldest first) instead of
initial-policy ones, so a gain of initial-policy replay cannot be explained by replay as such.
Replayed samples keep their behaviour log-probs, policy version and cached teacher scores; their
student log-probs are recomputed under the current policy, as for initial-policy replay (§2.3).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from replaylab.config_fields import check, knob
from replaylab.replay.base import Plan, ReplayStrategy, StepContext, StrategyConfig, UpdateStats, register_strategy
from replaylab.types import Group


@dataclass
class RecentConfig(StrategyConfig):
    name: str = knob("recent", "N current-policy updates, then replay of the most recent rollouts")
    current_updates: int = knob(40, "updates on fresh rollouts before replay starts (matches fixed_schedule: 40)")
    window: int = knob(20, "iterations of recent rollouts kept and replayed in turn (ours: as many as the "
                           "20 replay updates of the 40+20 schedule at one update per iteration)")

    def __post_init__(self) -> None:
        check(self.current_updates >= 1, "strategy.current_updates", f"must be >= 1, got {self.current_updates}")
        check(self.window >= 1, "strategy.window", f"must be >= 1, got {self.window}")


@register_strategy
class Recent(ReplayStrategy):
    name = "recent"
    Config = RecentConfig

    def __init__(self, cfg):
        super().__init__(cfg)
        self.window: deque[list[Group]] = deque(maxlen=cfg.window)
        self.replay_cursor = 0

    def plan(self, ctx: StepContext) -> Plan:
        if ctx.update < self.cfg.current_updates or not self.window:
            return Plan(fresh=ctx.stream.take(ctx.prompts_per_iteration), metrics={"phase_replay": 0.0})
        batch = self.window[self.replay_cursor % len(self.window)]
        self.replay_cursor += 1
        reuse = [Group(g.prompt, [s.replayed() for s in g.samples]) for g in batch]
        return Plan(reuse=reuse, metrics={"phase_replay": 1.0, "replay_cursor": float(self.replay_cursor)})

    def observe(self, groups: list[Group], stats: UpdateStats, ctx: StepContext) -> dict[str, float]:
        if ctx.update < self.cfg.current_updates:
            fresh = [g for g in groups if all(s.source == "fresh" for s in g.samples)]
            self.window.append(fresh)
        return {"window_iterations": float(len(self.window))}

    def state_dict(self) -> dict:
        return {"window": list(self.window), "replay_cursor": self.replay_cursor}

    def load_state_dict(self, state: dict) -> None:
        self.window = deque(state["window"], maxlen=self.cfg.window)
        self.replay_cursor = state["replay_cursor"]
