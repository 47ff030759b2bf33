"""`depo`: DEPO's online half, an explorability filter before rollout and replay of under-explored
prompts (ALGORITHMS.md §15; the abstract gives the idea, the concrete form here is ours).

Explorability of a prompt = p (1 - p), the reward variance of a Bernoulli with its last observed
pass rate p (an unseen prompt counts 0.25, the maximum): a GRPO group carries a gradient only
where rewards vary. Each iteration:

1. re-ask (fresh rollouts, as Prompt Replay does) up to floor(`replay_fraction` x P) prompts that
   were trained fewer than `min_visits` times and whose explorability is at least `threshold`,
   most explorable first, then fewest visits, then oldest;
2. fill the other slots from the data order, skipping prompts whose explorability is below
   `threshold` (a skipped prompt's slot goes to the next prompt of the order; at most
   `max_skips` skips per iteration, after which prompts are taken as they come, so a run whose
   every prompt is solved still trains) and prompts already in the batch (skipping can wrap the
   order into its next epoch).

Every skipped prompt saves `samples_per_prompt` rollouts; strategy rows report the running count.
Rows also log the batch's mean explorability. The offline half of DEPO (data curation) is out of
scope, and so is the optional entropy factor.
"""

from __future__ import annotations

from dataclasses import dataclass

from replaylab.config_fields import check, knob
from replaylab.replay.base import Plan, ReplayStrategy, StepContext, StrategyConfig, UpdateStats, register_strategy
from replaylab.types import Group, Prompt

UNSEEN = 0.25  # p (1 - p) at p = 1/2: an unseen prompt is presumed fully explorable


@dataclass
class DEPOConfig(StrategyConfig):
    name: str = knob("depo", "skip prompts of low explorability p(1-p) before rollout, re-ask under-explored ones (DEPO, online part)")
    threshold: float = knob(0.05, "explorability p(1-p) below which a prompt is skipped (0.05: p outside about [0.053, 0.947]); chosen")
    min_visits: int = knob(2, "prompts trained fewer times than this, and explorable, are re-asked; chosen")
    replay_fraction: float = knob(0.25, "share of each iteration's prompt slots that re-asked prompts may take; chosen")
    max_skips: int = knob(256, "skips per iteration before prompts are taken regardless of explorability")

    def __post_init__(self) -> None:
        check(0 < self.threshold <= UNSEEN, "strategy.threshold", f"must be in (0, 0.25], got {self.threshold}")
        check(self.min_visits >= 1, "strategy.min_visits", f"must be >= 1, got {self.min_visits}")
        check(0 <= self.replay_fraction <= 1, "strategy.replay_fraction", f"must be in [0, 1], got {self.replay_fraction}")
        check(self.max_skips >= 0, "strategy.max_skips", f"must be >= 0, got {self.max_skips}")


@register_strategy
class DEPO(ReplayStrategy):
    name = "depo"
    Config = DEPOConfig
    trainers = ("grpo",)
    replays = False  # re-asked prompts get fresh rollouts

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        s, P = cfg.strategy, cfg.trainer.prompts_per_iteration
        check(not cfg.trainer.dynamic_sampling, "trainer.dynamic_sampling",
              "drops the all-correct and all-wrong groups before depo sees them, so their prompts never become "
              "unexplorable and the filter never acts")
        # a prompt has an observed pass rate only once it was trained, so it has at least one visit
        check(s.min_visits >= 2 or s.replay_fraction == 0, "strategy.min_visits",
              "=1 re-asks nothing (a prompt is eligible only once trained, i.e. with one visit already): "
              "use min_visits >= 2, or replay_fraction=0 to turn re-asking off")
        if int(P * s.replay_fraction) == 0:
            key = "strategy.replay_fraction" if s.replay_fraction > 0 else "strategy.min_visits"
            check(s.replay_fraction == 0 and s.min_visits == DEPOConfig.min_visits, key,
                  f"replay_fraction={s.replay_fraction} leaves no re-ask slot in {P} prompts per iteration: "
                  "min_visits and the re-asking have no effect")

    def __init__(self, cfg: DEPOConfig):
        super().__init__(cfg)
        self.pass_rate: dict[str, float] = {}  # uid -> last observed pass rate
        self.visits: dict[str, int] = {}  # uid -> groups trained
        self.last_seen: dict[str, int] = {}  # uid -> iteration of the last group
        self.prompts: dict[str, Prompt] = {}
        self.skipped = 0  # prompts skipped by the filter, over the run
        self.reasked = 0

    def explorability(self, uid: str) -> float:
        p = self.pass_rate.get(uid)
        return UNSEEN if p is None else p * (1 - p)

    def plan(self, ctx: StepContext) -> Plan:
        c, P = self.cfg, ctx.prompts_per_iteration
        under = [u for u in self.pass_rate if self.visits[u] < c.min_visits and self.explorability(u) >= c.threshold]
        under.sort(key=lambda u: (-self.explorability(u), self.visits[u], self.last_seen[u]))
        replay = [self.prompts[u] for u in under[: int(P * c.replay_fraction)]]
        chosen, in_batch, skips, repeats = [], {p.uid for p in replay}, 0, 0
        while len(chosen) < P - len(replay):
            p = ctx.stream.take(1)[0]
            # skipping can wrap the order into its next epoch: a prompt is not asked twice in one batch,
            # unless a whole epoch in a row held nothing new (a data set smaller than the batch)
            if p.uid in in_batch and repeats < len(ctx.stream.prompts):
                repeats += 1
                continue
            repeats = 0
            if skips < c.max_skips and self.explorability(p.uid) < c.threshold:
                skips += 1
                continue
            chosen.append(p)
            in_batch.add(p.uid)
        self.skipped += skips
        self.reasked += len(replay)
        return Plan(fresh=replay + chosen, reasked=[p.uid for p in replay],
                    metrics={"depo_skipped": float(skips), "depo_reasked": float(len(replay))})

    def observe(self, groups: list[Group], stats: UpdateStats, ctx: StepContext) -> dict[str, float]:
        batch = [self.explorability(g.prompt.uid) for g in groups]  # before this batch's outcome
        for g in groups:
            uid = g.prompt.uid
            self.pass_rate[uid] = g.pass_rate
            self.visits[uid] = self.visits.get(uid, 0) + 1
            self.last_seen[uid] = ctx.iteration
            self.prompts[uid] = g.prompt
        return {
            "explorability_mean": sum(batch) / len(batch),
            "depo_skipped_total": float(self.skipped),
            "depo_rollouts_saved": float(self.skipped * ctx.samples_per_prompt),
            "depo_reasked_total": float(self.reasked),
            "depo_known_prompts": float(len(self.pass_rate)),
        }

    def state_dict(self) -> dict:
        return {"pass_rate": dict(self.pass_rate), "visits": dict(self.visits), "last_seen": dict(self.last_seen),
                "prompts": dict(self.prompts), "skipped": self.skipped, "reasked": self.reasked}

    def load_state_dict(self, state: dict) -> None:
        self.pass_rate, self.visits = dict(state["pass_rate"]), dict(state["visits"])
        self.last_seen, self.prompts = dict(state["last_seen"]), dict(state["prompts"])
        self.skipped, self.reasked = state["skipped"], state["reasked"]
