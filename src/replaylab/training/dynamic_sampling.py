"""DAPO's dynamic sampling (Yu et al. 2025): train only on groups that carry a gradient.

A GRPO group whose rewards are all equal has zero advantage everywhere. With
`trainer.dynamic_sampling` the trainer drops such groups from an iteration's fresh rollouts and
samples further rounds of prompts from the data stream (as many as the strategy planned, verl's
`gen_batch_size`) until the iteration holds as many informative groups as the strategy planned;
the surplus of the last round is discarded in order, as verl does. What counts as informative is
the objective's call (`Objective.informative`). Every generated rollout is counted in the ledger:
`trajectories` holds them all, `dynamic_rounds`, `filtered_groups` and `filtered_trajectories`
what the refill cost. After `trainer.dynamic_sampling_max_rounds` rounds without a full batch the
run stops (verl's `max_num_gen_batches`): the data is then too easy or too hard for the policy.

A mixin of `Trainer`: it uses the trainer's generator, stream, ledger and seeds.
"""

from __future__ import annotations

from replaylab.types import Group, Prompt


class DynamicSamplingExhausted(RuntimeError):
    """Dynamic sampling could not fill a batch within trainer.dynamic_sampling_max_rounds rounds."""


class DynamicSamplingMixin:
    def generate_fresh(self, prompts: list[Prompt], n: int | None = None, reasked: frozenset[str] = frozenset()
                       ) -> tuple[list[Group], dict[str, float], list[Group]]:
        """The iteration's fresh groups (`prompts` sampled once, `n` samples each (None:
        trainer.samples_per_prompt), or, with dynamic sampling, refilled until every planned slot
        holds an informative group), the refill's train-row metrics, and the groups it dropped
        (rewarded but not trained: the strategy is told of them). `reasked`: the uids the strategy asked
        again this iteration (Prompt Replay), which refills skip."""
        t = self.cfg.trainer
        seed = (t.seed, "iteration", self.iteration)
        groups = self.generate_sharded(self.c.generator, prompts, seed, n=n)
        self.ledger.record_generated([s for g in groups for s in g.samples])
        if not (t.dynamic_sampling and prompts):
            return groups, {}, []
        target = len(prompts)
        kept, dropped = [], []
        self.split_informative(groups, kept, dropped)
        rounds = 1
        while len(kept) < target:
            if t.dynamic_sampling_max_rounds and rounds >= t.dynamic_sampling_max_rounds:
                raise DynamicSamplingExhausted(
                    f"dynamic sampling found {len(kept)} of {target} groups with reward variance after "
                    f"trainer.dynamic_sampling_max_rounds={t.dynamic_sampling_max_rounds} rounds at iteration "
                    f"{self.iteration} (update {self.update}): the prompts are too easy or too hard for this policy. "
                    "Raise the limit (0 = unlimited) or turn trainer.dynamic_sampling off.")
            more = self.generate_sharded(self.c.generator, self.refill_prompts(target, reasked), (*seed, "refill", rounds), n=n)
            self.ledger.record_generated([s for g in more for s in g.samples])
            rounds += 1
            self.split_informative(more, kept, dropped)
        dropped += kept[target:]
        self.ledger.dynamic_rounds += rounds - 1
        self.ledger.filtered_groups += len(dropped)
        self.ledger.filtered_trajectories += sum(len(g.samples) for g in dropped)
        return kept[:target], {"dynamic_rounds": float(rounds), "filtered_groups": float(len(dropped))}, dropped

    def refill_prompts(self, n: int, reasked: frozenset[str]) -> list[Prompt]:
        """The next `n` prompts of the data stream, skipping those the strategy re-asked this iteration: a
        refill that reached one (a small set, or the stream coming round to it) would put that prompt in
        the batch twice. Without re-asked prompts this is `stream.take(n)`."""
        stream = self.c.stream
        if not reasked:
            return stream.take(n)
        out: list[Prompt] = []
        skipped = 0  # in a row: a whole epoch of them means the set holds no other prompt
        while len(out) < n:
            (p,) = stream.take(1)
            skipped = skipped + 1 if p.uid in reasked else 0
            if skipped > len(stream.order):
                raise RuntimeError(f"dynamic sampling cannot refill: every training prompt was re-asked this iteration "
                                   f"({len(reasked)} prompts); use a larger data set")
            if not skipped:
                out.append(p)
        return out

    def split_informative(self, groups: list[Group], kept: list[Group], dropped: list[Group]) -> None:
        for g in groups:
            (kept if self.objective.informative(g) else dropped).append(g)
