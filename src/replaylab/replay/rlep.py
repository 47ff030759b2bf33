"""`rlep`: RL with experience replay of verified successes (arXiv 2507.07451).

Phase 1, experience collection: before training, the trainer samples answers for every prompt the
run will see (`initial_prompts` peeks the data order for the whole run) and scores them; verified
successes (reward == 1) are kept for prompts with at least `min_successes` of them.
Phase 2, replay: every fresh group gets up to `replays_per_group` stored successes of its prompt,
drawn with the strategy RNG (all of them when the pool is no larger, as in the code); the advantage
is z-scored over the whole enlarged group (shared baseline, no `baseline_labels`). Groups whose pool
is smaller just get fewer rows, and prompts without a pool none: the group shrinks instead of being
padded with empty responses (ours).

Replayed answers are treated as on-policy (the paper's step 3: verl recomputes `old_log_prob` with the current
policy): `ratio_base='proximal'` and `is_cap=None`, so the ratio is pi_theta / pi_prox with no
behaviour correction, whatever `trainer.is_cap` says. They keep `source='initial'`.

Differences from the paper, by necessity of the shared trainer (see `Trainer.build_initial_store`):
the pool comes from the *initial* policy, not from a separately trained 400-step checkpoint, at the
training rollout temperature, not 0.7. Its size per prompt is `pool_samples` (the paper's 64 in the
full-scale sweep, `strategy=rlep_pool64`; by default `trainer.samples_per_prompt`, which the tiny twin
keeps: 64 answers for each of its 4,096 prompts would cost more than its whole run).
"""

from __future__ import annotations

from dataclasses import dataclass

from replaylab.config_fields import check, knob
from replaylab.replay.base import Plan, PromptStream, ReplayStrategy, StepContext, StrategyConfig, UpdateStats, register_strategy, run_prompts
from replaylab.replay.buffer import PromptBuffer
from replaylab.types import Group, OffPolicy, Prompt


@dataclass
class RLEPConfig(StrategyConfig):
    name: str = knob("rlep", "replay verified successes of the initial policy into each fresh group (RLEP, arXiv 2507.07451)")
    replays_per_group: int = knob(2, "paper code (experience_replay_num): stored successes added per group")
    min_successes: int = knob(2, "paper: keep a prompt's pool only with at least this many correct answers")
    pool_samples: int = knob(0, "answers sampled per prompt for the pool before training (paper: 64); "
                                "0 = trainer.samples_per_prompt")

    def __post_init__(self) -> None:
        check(self.replays_per_group >= 1, "strategy.replays_per_group", f"must be >= 1, got {self.replays_per_group}")
        check(self.min_successes >= 1, "strategy.min_successes", f"must be >= 1, got {self.min_successes}")
        check(self.pool_samples >= 0, "strategy.pool_samples", f"must be >= 0, got {self.pool_samples}")


@register_strategy
class RLEP(ReplayStrategy):
    name = "rlep"
    Config = RLEPConfig
    trainers = ("grpo",)
    takes_trainer_cap = False  # its replayed rows carry their own ratio treatment

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        s, pool = cfg.strategy, cfg.strategy.pool_samples or cfg.trainer.samples_per_prompt
        check(s.min_successes <= pool, "strategy.min_successes", f"{s.min_successes} > the {pool} answers sampled per "
              "prompt for the pool (strategy.pool_samples, else trainer.samples_per_prompt): no prompt could qualify, "
              "and the run would be current-policy GRPO charged for a pool")
        check(s.replays_per_group <= pool, "strategy.replays_per_group", f"{s.replays_per_group} > the {pool} answers "
              "a prompt's pool holds at most: every value above it replays the same")
        check(not cfg.trainer.dynamic_sampling, "trainer.dynamic_sampling",
              "rlep's pool covers the prompts the run plans to ask, but dynamic sampling's refills draw further ones "
              "that have no pool (the run turns into DAPO after a few iterations), and its filter drops all-wrong groups "
              "before rlep adds their successes")

    def __init__(self, cfg: RLEPConfig):
        super().__init__(cfg)
        self.pool = PromptBuffer()  # uid -> verified successful answers (all kept)
        self.initial_samples = cfg.pool_samples or None  # None: trainer.samples_per_prompt
        self.collected_prompts = 0

    def initial_prompts(self, stream: PromptStream, ctx: StepContext) -> list[Prompt]:
        return run_prompts(stream, ctx)

    def receive_initial(self, groups: list[Group]) -> None:
        self.collected_prompts = len(groups)
        for g in groups:
            wins = [s.replayed(source=s.source) for s in g.samples if s.reward == 1.0]
            if len(wins) >= self.cfg.min_successes:
                self.pool.extend(g.prompt.uid, wins, step=0)

    def compose(self, fresh: list[Group], initial: list[Group], plan: Plan, ctx: StepContext) -> list[Group]:
        k, out = self.cfg.replays_per_group, []
        for g in fresh:
            pool = self.pool.items(g.prompt.uid)
            picks = pool if len(pool) <= k else ctx.rng.sample(pool, k)
            rows = []
            for s in picks:
                r = s.replayed(source=s.source)
                r.off_policy = OffPolicy(ratio_base="proximal", is_cap=None, cap_from_trainer=False)
                rows.append(r)
            out.append(Group(g.prompt, g.samples + rows))
        return out + plan.reuse + initial

    def observe(self, groups: list[Group], stats: UpdateStats, ctx: StepContext) -> dict[str, float]:
        replayed = [sum(s.source == "initial" for s in g.samples) for g in groups]
        return {
            "rlep_replay_rate": sum(n > 0 for n in replayed) / len(groups),
            "rlep_replayed_rows": float(sum(replayed)),
            "rlep_mean_group_size": sum(len(g.samples) for g in groups) / len(groups),
            "rlep_pool_prompts": float(self.pool.num_prompts),
            "rlep_pool_answers": float(len(self.pool)),
            "rlep_collected_prompts": float(self.collected_prompts),
        }

    def state_dict(self) -> dict:
        return {"pool": self.pool.state_dict(), "collected_prompts": self.collected_prompts}

    def load_state_dict(self, state: dict) -> None:
        self.pool.load_state_dict(state["pool"])
        self.collected_prompts = state["collected_prompts"]
