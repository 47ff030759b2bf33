"""`popo`: prioritized group replay in place of zero-variance groups (Mao et al., arXiv 2606.01281).

POPO (Mao et al., arXiv 2606.01281; abstract only, so the concrete form is our recommendation)
fills a GRPO batch with *effective* off-policy groups instead of spending extra rollouts on
dynamic sampling. Every fresh group with reward std > 0 enters a buffer with its iteration; each
fresh group whose rewards are all equal (no gradient) is replaced by one buffered effective group,
chosen by priority q * lambda^age (q = reward std, maximal at pass rate 0.5; age = iterations since
it was generated). Entries older than `max_age` are dropped, each group is used at most once, and
a group is never replayed for a prompt this iteration already sampled (its fresh evidence is newer)
nor twice for one prompt in a batch. Ties go to the older entry (buffer order). A zero-variance group
with nothing eligible to replace it stays (zero advantage, no gradient): the batch keeps P groups.

Off-policy treatment (the paper's step 4, decoupled PPO): replayed samples keep `ratio_base='proximal'`,
so the clip is centred on the policy at the start of the iteration like for fresh samples, and
carry `is_cap = c`, so the loss multiplies their tokens by the truncated weight min(pi_prox/mu, c).
Their advantages come from their own stored rewards: the trainer z-scores within the replayed group,
which is exactly the stored group's own baseline.
"""

from __future__ import annotations

from dataclasses import dataclass

from replaylab.config_fields import check, knob
from replaylab.replay.base import Plan, ReplayStrategy, StepContext, StrategyConfig, UpdateStats, register_strategy
from replaylab.replay.buffer import PromptBuffer
from replaylab.types import Group, OffPolicy


@dataclass
class POPOConfig(StrategyConfig):
    name: str = knob("popo", "replace zero-variance groups by prioritized buffered effective groups (Mao et al., arXiv 2606.01281)")
    decay: float = knob(0.7, "recommended (the paper's step 3, ours; paper value not retrieved): lambda of priority "
                             "q * lambda^age, in [0.5, 0.9]")
    max_age: int = knob(8, "recommended (ours: 4-8; paper value not retrieved): drop groups older than this many iterations")
    is_cap: float = knob(2.0, "recommended (the paper's step 4, ours: c = 2): truncation of the decoupled weight min(pi_prox/mu, c)")

    def __post_init__(self) -> None:
        p = "strategy."
        check(0 < self.decay <= 1, p + "decay", f"must be in (0, 1], got {self.decay}")
        check(self.max_age >= 1, p + "max_age", f"must be >= 1, got {self.max_age}")
        check(self.is_cap > 0, p + "is_cap", f"must be > 0, got {self.is_cap}")


@register_strategy
class POPO(ReplayStrategy):
    name = "popo"
    Config = POPOConfig
    trainers = ("grpo",)
    takes_trainer_cap = False  # its replayed rows carry their own ratio treatment

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        check(not cfg.trainer.dynamic_sampling, "trainer.dynamic_sampling",
              "popo replaces zero-variance groups, which dynamic sampling never lets through: with both, popo does "
              "nothing. POPO is the alternative to dynamic sampling (compare them as two rows)")

    def __init__(self, cfg: POPOConfig):
        super().__init__(cfg)
        self.buffer = PromptBuffer()  # uid -> effective groups; bounded by max_age (about max_age x P groups)
        self.last: dict[str, float | None] = {}  # compose's metrics, returned by observe

    def compose(self, fresh: list[Group], initial: list[Group], plan: Plan, ctx: StepContext) -> list[Group]:
        cfg, now = self.cfg, ctx.iteration
        self.buffer.drop(lambda uid, e: now - e.step > cfg.max_age)
        taken = {g.prompt.uid for g in fresh}  # never a prompt this iteration already sampled
        out, ages = [], []
        for g in fresh:
            if g.reward_std > 0:
                out.append(g)
                continue
            best, best_priority = None, 0.0
            for uid, e in self.buffer.entries():  # oldest first: ties go to the older entry
                if uid in taken:
                    continue
                priority = e.item.reward_std * cfg.decay ** (now - e.step)
                if priority > best_priority:
                    best, best_priority = (uid, e), priority
            if best is None:
                out.append(g)  # nothing eligible: the uniform group stays
                continue
            uid, e = best
            self.buffer.remove(uid, e)  # each group at most once
            taken.add(uid)
            ages.append(now - e.step)
            samples = []
            for s in e.item.samples:
                r = s.replayed()
                r.off_policy = OffPolicy(ratio_base="proximal", is_cap=cfg.is_cap, cap_from_trainer=False)
                samples.append(r)
            out.append(Group(e.item.prompt, samples))
        for g in fresh:  # this iteration's effective groups become replayable from the next one on
            if g.reward_std > 0:
                self.buffer.add(g.prompt.uid, Group(g.prompt, [s.replayed(source=s.source) for s in g.samples]), now)
        self.last = {
            "popo_zero_variance_fresh": float(sum(g.reward_std == 0 for g in fresh)),
            "popo_replaced_groups": float(len(ages)),
            "popo_replayed_age_mean": sum(ages) / len(ages) if ages else None,
            "popo_buffer_groups": float(len(self.buffer)),
        }
        return out + plan.reuse + initial

    def observe(self, groups: list[Group], stats: UpdateStats, ctx: StepContext) -> dict[str, float]:
        return dict(self.last)

    def state_dict(self) -> dict:
        return {"buffer": self.buffer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.buffer.load_state_dict(state["buffer"])
