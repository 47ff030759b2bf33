"""Rollouts for the trainer: sampling (fresh, initial-policy, teacher-pool, prefix continuations),
scoring, and the no-grad log-probs a strategy or the loss needs under the current policy.

Every rollout is sampled in fixed chunks of prompts, each with its own seed, so the samples do not
depend on how many ranks share the work. A mixin of `Trainer`: it uses the trainer's components,
config, ledger and seeds.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

from replaylab import parallel as D
from replaylab.models.batching import score_logprobs
from replaylab.rollout.base import NonFiniteLogits, SamplingParams, continue_prefixes
from replaylab.training.components import TrainingDiverged, derived_seed
from replaylab.types import Group, Sample


def prompts_per_chunk(micro_batch: int, n: int) -> int:
    """Prompts in one seeded rollout chunk: `rollout.micro_batch` sequences of `n` samples (at least one prompt).
    Ranks share an iteration's chunks whole (`generate_sharded`)."""
    return max(1, micro_batch // n)


class RolloutsMixin:
    def policy_logprobs(self, samples: list[Sample]) -> list:
        """Response log-probs under the current policy (no grad), for a strategy's own scoring."""
        model = self.c.generator.model_for_scoring()
        mb, temp = self.cfg.rollout.micro_batch, self.cfg.rollout.temperature
        self.ledger.record_forward(samples)
        with self.ledger.timed("strategy_scoring"):
            return D.sharded_map(lambda chunk: [lp for lp, _ in score_logprobs(model, chunk, self.pad_id, mb, temp)], samples, mb)

    def build_initial_store(self) -> None:
        """The rollouts a strategy asked for before any update (`initial_prompts`), `initial_samples`
        per prompt: by the initial policy, or by the teacher for a strategy whose `initial_from` is
        "teacher" (through an in-process engine over the local teacher, dropped once the pool is built)."""
        strategy = self.c.strategy
        prompts = strategy.initial_prompts(self.c.stream, self.context())
        if not prompts:
            return
        seed, n = (self.cfg.trainer.seed, "initial"), strategy.initial_samples
        if strategy.initial_from != "teacher":
            groups = self.generate_initial(prompts, seed, n=n)
        else:
            from replaylab.rollout.local import in_process_engine, local_generator

            teacher = local_generator(in_process_engine(self.cfg.rollout.engine), self.c.teacher.distribution_model(), self.c.tokenizer,
                                      self.cfg.teacher.micro_batch, self.cfg.rollout.compile)
            groups = self.generate_initial(prompts, seed, "teacher", n=n, generator=teacher)
        strategy.receive_initial(groups)

    def generate_initial(self, prompts: list, seed_parts: tuple, source: str = "initial", n: int | None = None,
                         generator=None) -> list[Group]:
        """Initial-policy rollouts (`n` per prompt, None: trainer.samples_per_prompt): from the frozen
        copy if the strategy asked for one, else from the policy itself, which is still the initial
        policy before the first update; or from `generator` (the teacher's pool, source "teacher")."""
        generator = generator or self.c.initial_generator
        if generator is None:
            if self.update != 0:
                raise RuntimeError(f"strategy {self.cfg.strategy.name!r} asked for initial-policy rollouts after "
                                   "training started but does not set needs_initial_policy = True")
            generator = self.c.generator
        groups = self.generate_sharded(generator, prompts, seed_parts, source, n=n)
        self.ledger.record_generated([s for g in groups for s in g.samples])
        return groups

    def generate_sharded(self, generator, prompts: list, seed_parts: tuple, source: str = "fresh",
                         prefixes: list | None = None, n: int | None = None) -> list[Group]:
        """Sample and score `prompts`, in fixed chunks of prompts each with its own seed, so the
        samples do not depend on how many ranks share the work: each rank takes a contiguous share
        of the chunks, scores what it sampled, and every rank gets all groups back in plan order
        (what follows, compose, advantages, ledger, strategy, is then the same on every rank).
        With `prefixes` (one per prompt) the policy continues them (`rollout.base.continue_prefixes`)."""
        params = self.sampling() if n is None else replace(self.sampling(), n=n)
        per_chunk = prompts_per_chunk(self.cfg.rollout.micro_batch, params.n)
        starts = range(0, len(prompts), per_chunk)
        chunks = [prompts[i : i + per_chunk] for i in starts]
        prefix_chunks = [prefixes[i : i + per_chunk] for i in starts] if prefixes is not None else None
        generator.model_for_scoring()  # distributed: the weight gather is collective, so every rank does it here

        def sample() -> list[Group]:
            groups: list[Group] = []
            with self.ledger.timed("generate" if source == "fresh" else "generate_initial"), self.diverged_if_non_finite():
                for c in D.shard(list(range(len(chunks)))):
                    seed = derived_seed(*seed_parts, "chunk", c)
                    if prefix_chunks is None:
                        sampled = generator.generate(chunks[c], params, seed=seed, source=source)
                    else:
                        sampled = continue_prefixes(generator, chunks[c], prefix_chunks[c], params, seed, source)
                    groups += [Group(p, s) for p, s in zip(chunks[c], sampled)]
            return groups

        # The initial policy's rollouts are the same in every run of the sweep that asks for these prompts
        # at this iteration (training/shared.py); the current policy's are this run's own.
        if source == "initial" and prefixes is None and self.shared is not None:
            groups = self.shared.initial_rollouts(seed_parts, prompts, params, sample)
        else:
            groups = sample()
        if source != "teacher":  # the teacher's own rollouts (a prefix pool) need no teacher scores
            self.score([s for g in groups for s in g.samples])
        return D.all_gather_objects(groups) if D.world_size() > 1 else groups

    @contextmanager
    def diverged_if_non_finite(self):
        """inf/NaN logits while sampling mean the weights diverged: say so, naming the update."""
        try:
            yield
        except NonFiniteLogits as e:
            raise TrainingDiverged(
                f"the policy after update {self.update} produced non-finite logits while sampling ({e}); the last good "
                f"checkpoint in {self.run_dir / 'checkpoints'} is kept. Lower trainer.lr or check the data."
            ) from e

    def sampling(self) -> SamplingParams:
        r = self.cfg.rollout
        return SamplingParams(self.cfg.budget.max_response_tokens, r.temperature, r.top_p, r.top_k, self.cfg.trainer.samples_per_prompt)

    def score(self, samples: list[Sample]) -> None:
        with self.ledger.timed("score"):
            before = [(s.teacher_logprobs, s.teacher_full_logprobs) for s in samples]
            scored = self.objective.score(samples, self.scorers)
            # The samples the teacher scored now (scores are cached: a rescored sample gets new tensors)
            fresh = [s for s, (lp, full) in zip(samples, before) if s.teacher_logprobs is not lp or s.teacher_full_logprobs is not full]
            tokens, flops = D.all_reduce_sum([float(scored), float(self.ledger.teacher_flops(fresh))])
            self.ledger.record_teacher(int(tokens), flops)

    def generate_continuations(self, requests: list) -> list[Group]:
        """The current policy's continuations of stored prefixes, one group per request, in request
        order (requests with the same n are sampled together)."""
        groups: list[Group | None] = [None] * len(requests)
        for n in sorted({r.n for r in requests}):
            idx = [i for i, r in enumerate(requests) if r.n == n]
            sampled = self.generate_sharded(self.c.generator, [requests[i].prompt for i in idx],
                                            (self.cfg.trainer.seed, "continue", self.iteration, n), "fresh",
                                            prefixes=[requests[i].prefix for i in idx], n=n)
            self.ledger.record_generated([s for g in sampled for s in g.samples])
            for i, g in zip(idx, sampled):
                groups[i] = g
        return groups

    def attach_proximal(self, samples: list[Sample], version: int) -> None:
        """Log-probs under the policy at the start of this iteration, for samples not generated by it
        (replayed or stored ones); fresh samples' behaviour log-probs already are exactly that."""
        stale = [s for s in samples if (s.source != "fresh" or s.policy_version != version)
                 and (s.off_policy.ratio_base != "behaviour" or s.off_policy.is_cap is not None)]
        if not stale or not self.objective.needs_proximal:
            return
        model = self.c.generator.model_for_scoring()  # distributed: a plain copy, no collectives
        mb, temp = self.cfg.rollout.micro_batch, self.cfg.rollout.temperature
        with self.ledger.timed("proximal"):
            logps = D.sharded_map(lambda chunk: [lp for lp, _ in score_logprobs(model, chunk, self.pad_id, mb, temp)], stale, mb)
        for s, logp in zip(stale, logps):
            s.proximal_logprobs = logp
