"""`prompt_replay`: re-ask prompts whose last pass rate was near 0.5 (Baroian & Berger, arXiv 2603.21177).

Prompt Replay (Baroian & Berger, arXiv 2603.21177; code `baroian/GRPO_prompt_replay`) reuses
*prompts only*, never trajectories: a replayed prompt takes an ordinary rollout slot and gets G
fresh rollouts from the current policy, so every sample stays on-policy. Per-prompt state
(last pass rate, last step, reuse count, next ready step) feeds a min-heap keyed by |p - 0.5|,
where the per-prompt GRPO signal p(1 - p) is largest.

Choices where our synchronous loop differs from the asynchronous open-instruct code:
* "in flight" prompts do not exist across iterations here; within one iteration a prompt is never
  replayed twice, and never replayed when the same iteration's fresh draw already contains it
  (set aside, stays queued);
* the heap uses lazy deletion: each prompt has at most one live entry (the one pushed at its last
  scoring); older entries are skipped when popped. This subsumes the code's "reuse snapshot is
  stale -> re-push with fresh priority" rule without duplicating entries;
* with `trainer.dynamic_sampling` the groups the filter drops (every answer right or every one wrong, or
  a refill round's surplus) are recorded like trained ones (`observe_filtered`): every scoring replaces
  the prompt's pass rate, so a prompt is not replayed from one a later scoring superseded;
* the optional zero-pass curriculum, pass-rate-dependent cooldown and `no_resampling_pass_rate`
  (which reorders the data for baseline and replay alike) are not implemented.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from replaylab.config_fields import check, defaults_of, knob
from replaylab.replay.base import Plan, ReplayStrategy, StepContext, StrategyConfig, UpdateStats, register_strategy
from replaylab.types import Group, scored_statistics


@dataclass
class PromptReplayConfig(StrategyConfig):
    name: str = knob("prompt_replay", "re-ask prompts with pass rate near 0.5 (fresh rollouts; Baroian & Berger, arXiv 2603.21177)")
    replay_fraction: float = knob(0.5, "paper code default: share of each iteration's prompts that may be replays; "
                                       "at most 0.5 (the code clamps larger values); budget = min(floor(P f), floor(P/2))")
    cooldown: int = knob(5, "paper code default: iterations between a prompt's scoring and its next replay")
    cooldown_jitter: float = knob(0.2, "paper: relative +-jitter of the ready step, drawn from the strategy RNG")
    max_reuse: int = knob(5, "paper iterator/1.5B-script default (the argparse default is 20): replays per prompt, "
                             "0 = unlimited")
    min_pass_rate: float = knob(0.24, "paper code default: lowest pass rate (inclusive, and > 0) that enters the heap")
    max_pass_rate: float = knob(0.70, "paper code default: highest pass rate (inclusive) that enters the heap")

    def __post_init__(self) -> None:
        p = "strategy."
        # the code clamps f to 0.5, so a larger value would run as 0.5: a sweep over it would compare equal runs
        check(0 < self.replay_fraction <= 0.5, p + "replay_fraction",
              f"must be in (0, 0.5] (the paper's code clamps it to 0.5), got {self.replay_fraction}")
        check(self.cooldown >= 0, p + "cooldown", f"must be >= 0, got {self.cooldown}")
        check(0 <= self.cooldown_jitter < 1, p + "cooldown_jitter", f"must be in [0, 1), got {self.cooldown_jitter}")
        check(self.max_reuse >= 0, p + "max_reuse", f"must be >= 0, got {self.max_reuse}")
        check(0 <= self.min_pass_rate <= self.max_pass_rate <= 1, p + "min_pass_rate",
              f"need 0 <= min_pass_rate <= max_pass_rate <= 1, got {self.min_pass_rate}, {self.max_pass_rate}")


def replay_slots(prompts_per_iteration: int, fraction: float) -> int:
    """b = floor(P f): f <= 0.5 (the config refuses more, as the code clamps it), so b <= floor(P/2)."""
    return math.floor(prompts_per_iteration * fraction)


@register_strategy
class PromptReplay(ReplayStrategy):
    name = "prompt_replay"
    Config = PromptReplayConfig
    trainers = ("grpo",)
    replays = False  # re-asked prompts get fresh rollouts

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        P, f = cfg.trainer.prompts_per_iteration, cfg.strategy.replay_fraction
        check(replay_slots(P, f) >= 1, "strategy.replay_fraction",
              f"{f} leaves no replay slot at trainer.prompts_per_iteration={P} (floor(P f) = 0): the run would be "
              "current-policy GRPO and every other strategy.* setting would do nothing")
        # the ready step is round(cooldown * U(1 - jitter, 1 + jitter)): it moves only where cooldown * jitter > 0.5
        cooldown, jitter = cfg.strategy.cooldown, cfg.strategy.cooldown_jitter
        default = defaults_of(cfg.strategy)["cooldown_jitter"]
        check(jitter == default or cooldown * max(jitter, default) > 0.5, "strategy.cooldown_jitter",
              f"{jitter} has no effect with strategy.cooldown={cooldown}: round(cooldown x (1 +- jitter)) is the "
              "cooldown itself while cooldown x jitter <= 0.5")

    def __init__(self, cfg: PromptReplayConfig):
        super().__init__(cfg)
        # uid -> {"prompt", "pass_rate", "last_step", "reuse", "ready", "queued" (live heap entry or None)}
        self.prompts: dict[str, dict] = {}
        self.heap: list[tuple[float, float, int, str]] = []  # (|p - 0.5|, p, reuse snapshot, uid)
        self.replayed_now: list[str] = []  # uids replayed in the current iteration (plan -> observe)
        self.dropped_now: list[Group] = []  # the groups dynamic sampling dropped this iteration (observe_filtered)

    def budget(self, prompts_per_iteration: int) -> int:
        return replay_slots(prompts_per_iteration, self.cfg.replay_fraction)

    def plan(self, ctx: StepContext) -> Plan:
        P, cfg = ctx.prompts_per_iteration, self.cfg
        chosen: list[str] = []
        aside = []
        while len(chosen) < self.budget(P) and self.heap:
            entry = heapq.heappop(self.heap)
            st = self.prompts[entry[3]]
            if entry != st["queued"] or entry[3] in chosen:
                continue  # superseded by a later scoring (or already issued): lazy deletion
            # The fresh draw is at most P - (replays so far) - 1 prompts once this one is issued.
            fresh_uids = {p.uid for p in ctx.stream.peek(P - len(chosen) - 1)}
            if entry[3] in fresh_uids or ctx.iteration < st["ready"]:
                aside.append(entry)  # in this iteration's fresh draw, or cooling down: keep queued
            elif cfg.max_reuse and st["reuse"] >= cfg.max_reuse:
                st["queued"] = None  # retired
            else:
                st["reuse"] += 1
                st["queued"] = None
                chosen.append(entry[3])
        for entry in aside:
            heapq.heappush(self.heap, entry)
        self.replayed_now = chosen
        fresh = [self.prompts[u]["prompt"] for u in chosen] + ctx.stream.take(P - len(chosen))
        reuse = [self.prompts[u]["reuse"] for u in chosen]
        return Plan(fresh=fresh, reasked=list(chosen), metrics={
            "prompt_replay_prompts": float(len(chosen)),
            "prompt_replay_heap_size": float(self.live_entries()),
            "prompt_replay_mean_reuse": sum(reuse) / len(reuse) if reuse else 0.0,
        })

    def record(self, g: Group, ctx: StepContext) -> None:
        """Step 1 of the rule: a scored group's pass rate replaces its prompt's last one (and its queued
        entry), and queues the prompt again when it lies in the window."""
        cfg = self.cfg
        p = g.pass_rate  # mean(score) / max_score with a binary reward
        st = self.prompts.setdefault(g.prompt.uid, {"prompt": g.prompt, "reuse": 0, "ready": 0, "queued": None})
        st.update(pass_rate=p, last_step=ctx.iteration, queued=None)
        in_window = p > 0 and cfg.min_pass_rate <= p <= cfg.max_pass_rate
        if in_window and (not cfg.max_reuse or st["reuse"] < cfg.max_reuse):
            entry = (abs(p - 0.5), p, st["reuse"], g.prompt.uid)  # ties: lower p first (ours)
            heapq.heappush(self.heap, entry)
            st["queued"] = entry
            jitter = ctx.rng.uniform(1 - cfg.cooldown_jitter, 1 + cfg.cooldown_jitter)
            st["ready"] = ctx.iteration + round(cfg.cooldown * jitter)

    def observe_filtered(self, groups: list[Group], ctx: StepContext) -> None:
        # dynamic sampling's dropped groups were scored too: a prompt now solved every time must not be
        # replayed from its older pass rate (§3.2 step 1 records every scoring)
        for g in groups:
            self.record(g, ctx)
        self.dropped_now = list(groups)

    def observe(self, groups: list[Group], stats: UpdateStats, ctx: StepContext) -> dict[str, float]:
        for g in groups:
            self.record(g, ctx)
        # over every group scored this iteration: dynamic sampling's dropped ones too (the paper's zero-variance
        # fraction is of the prompts scored; over the trained ones the filter makes it 0)
        scored, self.dropped_now = [*groups, *self.dropped_now], []
        zero_variance, abs_advantage = scored_statistics(scored)
        uids = set(self.replayed_now)
        replayed = [g for g in scored if g.prompt.uid in uids]
        return {
            "prompt_replay_zero_variance_frac": zero_variance,
            "prompt_replay_mean_abs_advantage": abs_advantage,
            "prompt_replay_replayed_pass_rate": sum(g.pass_rate for g in replayed) / len(replayed) if replayed else None,
            "prompt_replay_replayed_trained": float(sum(g.prompt.uid in uids for g in groups)),
        }

    def live_entries(self) -> int:
        return sum(st["queued"] is not None for st in self.prompts.values())

    def state_dict(self) -> dict:
        return {"prompts": {u: dict(st) for u, st in self.prompts.items()}, "heap": list(self.heap),
                "replayed_now": list(self.replayed_now)}

    def load_state_dict(self, state: dict) -> None:
        self.prompts = {u: dict(st) for u, st in state["prompts"].items()}
        self.heap = list(state["heap"])
        self.replayed_now = list(state["replayed_now"])
