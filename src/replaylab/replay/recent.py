"""`recent`: N current-policy updates, then replay of the rollouts of the last W updates.

The control of the R-OPD study: the same schedule as `fixed_schedule`, but the replay phase trains
on the current phase's *newest* rollouts instead of initial-policy ones, so a gain of
initial-policy replay cannot be explained by replay as such. The window is measured in optimizer
updates: with `current_updates` N and `window` W, the store holds the iterations sampled at policy
version >= N - W (at one update per iteration, the last W iterations; at 4, the last W/4), and
the replay phase cycles through them oldest first. Replayed samples keep their behaviour log-probs,
policy version and cached teacher scores; their student log-probs are recomputed under the current
policy, as for initial-policy replay.
"""

from __future__ import annotations

from dataclasses import dataclass

from replaylab.config_fields import check, knob
from replaylab.replay.base import Plan, ReplayStrategy, StepContext, StrategyConfig, UpdateStats, register_strategy
from replaylab.types import Group


@dataclass
class RecentConfig(StrategyConfig):
    name: str = knob("recent", "N current-policy updates, then replay of the rollouts of the last W updates")
    current_updates: int = knob(40, "updates on fresh rollouts before replay starts (matches fixed_schedule: 40)")
    window: int = knob(20, "updates whose rollouts are kept and replayed in turn: every replayed sample has policy "
                           "version >= current_updates - window (20: the 20 replay updates of the 40+20 schedule)")

    def __post_init__(self) -> None:
        check(self.current_updates >= 1, "strategy.current_updates", f"must be >= 1, got {self.current_updates}")
        check(self.window >= 1, "strategy.window", f"must be >= 1, got {self.window}")
        check(self.window <= self.current_updates, "strategy.window",
              f"{self.window} updates is longer than the current phase (strategy.current_updates={self.current_updates})")


@register_strategy
class Recent(ReplayStrategy):
    name = "recent"
    Config = RecentConfig
    prefix_state = True  # the rollouts of the current phase it stores to replay

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        per = cfg.trainer.updates_per_iteration
        for key in ("current_updates", "window"):
            value = getattr(cfg.strategy, key)
            check(value % per == 0, f"strategy.{key}",
                  f"{value} updates is not a whole number of iterations of {per} updates "
                  "(trainer.minibatches x trainer.resample_period)")
        check(cfg.budget.max_updates > cfg.strategy.current_updates, "budget.max_updates",
              f"{cfg.budget.max_updates} leaves no replay phase after strategy.current_updates={cfg.strategy.current_updates}")

    def __init__(self, cfg):
        super().__init__(cfg)
        self.store: list[tuple[int, list[Group]]] = []  # (policy version of the rollouts, their groups)
        self.replay_cursor = 0

    def current_prefix(self) -> tuple[int, dict[str, float]]:
        return self.cfg.current_updates, {}  # its strategy rows vary (window_iterations); it only lends

    def plan(self, ctx: StepContext) -> Plan:
        if ctx.update < self.cfg.current_updates or not self.store:
            return Plan(fresh=ctx.stream.take(ctx.prompts_per_iteration), metrics={"phase_replay": 0.0})
        _, batch = self.store[self.replay_cursor % len(self.store)]
        self.replay_cursor += 1
        reuse = [Group(g.prompt, [s.replayed() for s in g.samples]) for g in batch]
        return Plan(reuse=reuse, metrics={"phase_replay": 1.0, "replay_cursor": float(self.replay_cursor)})

    def observe(self, groups: list[Group], stats: UpdateStats, ctx: StepContext) -> dict[str, float]:
        if ctx.update < self.cfg.current_updates:
            fresh = [g for g in groups if all(s.source == "fresh" for s in g.samples)]
            self.store.append((ctx.update, fresh))
            # Keep what can still be inside the final window: the phase ends at >= current_updates.
            oldest = min(stats.update, self.cfg.current_updates) - self.cfg.window
            self.store = [(v, g) for v, g in self.store if v >= oldest]
        return {"window_iterations": float(len(self.store))}

    def state_dict(self) -> dict:
        return {"store": list(self.store), "replay_cursor": self.replay_cursor}

    def load_state_dict(self, state: dict) -> None:
        self.store = [tuple(x) for x in state["store"]]
        self.replay_cursor = state["replay_cursor"]
