"""`fifo`: experience replay from a FIFO buffer at a chosen generation-to-training ratio
(Arnal, Cabannes, Cohen, Kempe, Munos, FAIR, arXiv 2604.08706; ALGORITHMS.md §7).

Each iteration trains on T = `trainer.prompts_per_iteration` groups and the current policy answers
W = ceil(`generation_ratio` x T) new prompts (the paper's W/T, generation per training). The new
groups enter a FIFO buffer holding the newest `buffer_batches` x T groups (the oldest are evicted);
the T trained groups are drawn uniformly from the buffer without replacement, and not removed: a
group can be trained on again until it is evicted. Each trajectory is then reused about T / W
times, so an update costs less generation; the paper's point is that this pays per unit of
compute (match `budget.max_compute`, not steps).

Before the buffer holds a batch, an iteration generates what is missing (the first iteration
fills it). Groups drawn from an earlier iteration are replayed samples (`source="replay"`): their
ratio is anchored at the proximal policy and `trainer.is_cap` weights them, as for any replay;
their advantages are recomputed within the stored group. Rows log the staleness of what was
trained (updates since each sample was generated) and how often each group was used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from replaylab.config_fields import check, check_choice, knob
from replaylab.replay.base import Plan, ReplayStrategy, StepContext, StrategyConfig, UpdateStats, register_strategy
from replaylab.types import Group, OffPolicy


@dataclass
class FIFOConfig(StrategyConfig):
    name: str = knob("fifo", "uniform replay from a FIFO buffer of recent groups at a chosen generation-to-training ratio")
    generation_ratio: float = knob(0.5, "W/T: fresh prompts per iteration as a share of the trained trainer.prompts_per_iteration "
                                        "(rounded up); 1 = a fresh batch every iteration (each group then trained about "
                                        "once on average, the buffer only reorders)")
    buffer_batches: int = knob(2, "N in batches: the buffer keeps the newest buffer_batches x prompts_per_iteration groups")
    ratio_base: str = knob("proximal", "anchor of a replayed sample's PPO ratio: proximal (recomputed under the policy at "
                                       "the start of the iteration, replaylab's decoupled default: one extra forward per "
                                       "replayed sample) | behaviour (the stored behaviour log-probs, as asynchronous PPO "
                                       "does: no recompute)")

    def __post_init__(self) -> None:
        check_choice(self.ratio_base, "strategy.ratio_base", ["proximal", "behaviour"])
        check(0 < self.generation_ratio <= 1, "strategy.generation_ratio",
              f"must be in (0, 1], got {self.generation_ratio}: above 1 groups would be generated and never trained on")
        check(self.buffer_batches >= 1, "strategy.buffer_batches", f"must be >= 1, got {self.buffer_batches}")

    def fresh_prompts(self, per_iteration: int) -> int:
        return math.ceil(self.generation_ratio * per_iteration)


@dataclass
class Stored:
    group: Group  # copies (`Sample.replayed`): the trainer mutates the groups it trains on
    seq: int  # insertion number: FIFO order, and the eviction test
    uses: int = 0  # times trained on so far


@register_strategy
class FIFO(ReplayStrategy):
    name = "fifo"
    Config = FIFOConfig

    @classmethod
    def ratio_at_behaviour(cls, strategy_cfg) -> bool:
        return strategy_cfg.ratio_base == "behaviour"

    def __init__(self, cfg: FIFOConfig):
        super().__init__(cfg)
        self.buffer: list[Stored] = []  # oldest first
        self.next_seq = 0
        self.evicted = 0

    def plan(self, ctx: StepContext) -> Plan:
        missing = ctx.prompts_per_iteration - len(self.buffer)  # only until the buffer holds a batch
        return Plan(fresh=ctx.stream.take(max(self.cfg.fresh_prompts(ctx.prompts_per_iteration), missing)))

    def compose(self, fresh: list[Group], initial: list[Group], plan: Plan, ctx: StepContext) -> list[Group]:
        first_new = self.next_seq
        for g in fresh:
            self.buffer.append(Stored(Group(g.prompt, [s.replayed() for s in g.samples], g.baseline_labels), self.next_seq))
            self.next_seq += 1
        overflow = len(self.buffer) - self.cfg.buffer_batches * ctx.prompts_per_iteration
        if overflow > 0:
            self.buffer, self.evicted = self.buffer[overflow:], self.evicted + overflow
        picks = sorted(ctx.rng.sample(range(len(self.buffer)), ctx.prompts_per_iteration))
        by_seq = {first_new + i: g for i, g in enumerate(fresh)}
        out = []
        for i in picks:
            item = self.buffer[i]
            item.uses += 1
            # this iteration's own groups are trained as generated; older ones as replay copies
            out.append(by_seq.get(item.seq) or Group(item.group.prompt, [self.replay_copy(s) for s in item.group.samples],
                                                    item.group.baseline_labels))
        self.last_picks = [self.buffer[i].seq for i in picks]
        return out

    def replay_copy(self, sample):
        copy = sample.replayed()
        if self.cfg.ratio_base == "behaviour":
            copy.off_policy = OffPolicy(ratio_base="behaviour")  # (trainer.is_cap with it is a config error)
        return copy

    def observe(self, groups: list[Group], stats: UpdateStats, ctx: StepContext) -> dict[str, float]:
        # the staleness of what was trained is in the train rows (training/provenance.py)
        return {
            "fresh_group_fraction": sum(all(s.source == "fresh" for s in g.samples) for g in groups) / len(groups),
            "buffer_groups": float(len(self.buffer)),
            "evicted_groups": float(self.evicted),
            "oldest_trained_seq": float(min(self.last_picks)),
            "oldest_kept_seq": float(self.buffer[0].seq),
            "mean_uses": sum(item.uses for item in self.buffer) / len(self.buffer),
        }

    def state_dict(self) -> dict:
        return {"buffer": [(x.group, x.seq, x.uses) for x in self.buffer], "next_seq": self.next_seq, "evicted": self.evicted}

    def load_state_dict(self, state: dict) -> None:
        self.buffer = [Stored(g, seq, uses) for g, seq, uses in state["buffer"]]
        self.next_seq, self.evicted = state["next_seq"], state["evicted"]
