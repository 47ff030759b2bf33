"""`hdl`: Hindsight-Divergence Localization, GRPO groups filled with continuations from branch points
found in hindsight (ALGORITHMS.md §14; the abstract gives the idea, the concrete form is ours).

Per prompt the current policy writes `roots` complete answers. After grading, every root token gets
a hindsight score, the change of its log-likelihood when the outcome is known:

    delta_t = log pi(y_t | hint, prompt, y_<t) - log pi(y_t | prompt, y_<t)

with the hint the gold answer written before the prompt (`hint`, "The answer is {answer}. " by
default; our choice of conditioning, which works for any chat template because it precedes it).
Both terms come from no-grad forwards of the trainer's policy over the roots (`ctx.logprobs`, timed
as strategy_scoring and counted with training FLOPs), not from the behaviour log-probs, which an
engine such as vLLM computes with other kernels and after top-k / top-p. The
`branches` positions with the largest |delta_t| over the prompt's roots (at least one token before
and one after) are the branch points; the remaining samples_per_prompt - roots slots are split
evenly over them, each a continuation of root[:position] that trains on its suffix only. The group
(roots + continuations) shares one GRPO baseline; a continuation's reward is the correctness of the
answer it completes. Rows report the tokens the continuations did not regenerate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from replaylab.config_fields import check, knob
from replaylab.replay.base import Continuation, Plan, ReplayStrategy, StepContext, StrategyConfig, UpdateStats, register_strategy
from replaylab.replay.prefixes import cut
from replaylab.types import Group, Sample


@dataclass
class HDLConfig(StrategyConfig):
    name: str = knob("hdl", "GRPO groups of a few roots plus continuations from hindsight branch points (HDL)")
    roots: int = knob(2, "complete answers per prompt; the other samples_per_prompt - roots slots are continuations (chosen)")
    branches: int = knob(2, "branch points per prompt, where the continuations start (chosen)")
    hint: str = knob("The answer is {answer}. ", "hindsight context written before the prompt; {answer} = the gold answer")

    def __post_init__(self) -> None:
        check(self.roots >= 1, "strategy.roots", f"must be >= 1, got {self.roots}")
        check(self.branches >= 1, "strategy.branches", f"must be >= 1, got {self.branches}")
        check("{answer}" in self.hint, "strategy.hint", "must contain {answer}: the hindsight is the outcome")


@register_strategy
class HDL(ReplayStrategy):
    name = "hdl"
    Config = HDLConfig
    trainers = ("grpo",)
    replays = False  # every sample is the current policy's (continuations of its own roots)

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        s, n = cfg.strategy, cfg.trainer.samples_per_prompt
        check(s.roots < n, "strategy.roots", f"{s.roots} roots leave no continuation slot in trainer.samples_per_prompt={n}")
        check(s.branches <= n - s.roots, "strategy.branches",
              f"{s.branches} branch points need at least as many continuation slots (samples_per_prompt - roots = {n - s.roots})")
        check(not cfg.trainer.dynamic_sampling, "trainer.dynamic_sampling",
              "would judge hdl's groups by their roots alone, before the continuations that complete them")

    def __init__(self, cfg: HDLConfig):
        super().__init__(cfg)
        self.saved_tokens = 0

    def plan(self, ctx: StepContext) -> Plan:
        return Plan(fresh=ctx.stream.take(ctx.prompts_per_iteration), fresh_n=self.cfg.roots)

    def hindsight(self, roots: list[Sample], ctx: StepContext) -> list[torch.Tensor]:
        """delta_t per root: hinted minus plain log-prob of each token, both from the trainer's own
        forward (not the behaviour log-probs, which an engine such as vLLM computes with other kernels
        and after top-k / top-p: their mismatch would enter the ranking)."""
        hinted = []
        for s in roots:
            hint = tuple(ctx.tokenizer(self.cfg.hint.format(answer=s.prompt.answer), add_special_tokens=False)["input_ids"])
            copy = s.replayed(source=s.source)
            copy.prompt = replace(s.prompt, token_ids=hint + s.prompt.token_ids)
            hinted.append(copy)
        both = ctx.logprobs(hinted + list(roots))
        return [h - p for h, p in zip(both[: len(roots)], both[len(roots) :])]

    def continuations(self, fresh: list[Group], plan: Plan, ctx: StepContext) -> list[Continuation]:
        roots = [s for g in fresh for s in g.samples]
        deltas = dict(zip((s.sample_id for s in roots), self.hindsight(roots, ctx)))
        slots = ctx.samples_per_prompt - self.cfg.roots
        requests, self.branch_at, self.branch_delta, self.all_delta = [], [], [], []
        self.owner = []  # per request, the index of its root group (compose merges by position, not uid)
        for index, g in enumerate(fresh):
            candidates = []  # (|delta|, root index, position): branch before token `position`
            for i, s in enumerate(g.samples):
                d = deltas[s.sample_id].abs()
                self.all_delta += d.tolist()
                candidates += [(float(d[j]), i, j) for j in range(1, s.num_tokens)]
            if not candidates:  # every root is one token long: nothing to branch from, the group stays the roots
                continue
            candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
            points = candidates[: self.cfg.branches]
            for k, (score, i, j) in enumerate(points):
                n = slots // len(points) + (k < slots % len(points))
                root = g.samples[i]
                requests.append(Continuation(g.prompt, cut(root, j), n))
                self.owner.append(index)
                self.saved_tokens += j * n
                self.branch_at.append(j / root.num_tokens)
                self.branch_delta.append(score)
        return requests

    def compose(self, fresh: list[Group], initial: list[Group], plan: Plan, ctx: StepContext) -> list[Group]:
        merged = [Group(g.prompt, list(g.samples)) for g in fresh[: len(plan.fresh)]]
        for owner, g in zip(self.owner, fresh[len(plan.fresh) :]):
            merged[owner].samples += g.samples
        return merged

    def observe(self, groups: list[Group], stats: UpdateStats, ctx: StepContext) -> dict[str, float]:
        roots = [s for g in groups for s in g.samples if s.prefix is None]
        conts = [s for g in groups for s in g.samples if s.prefix is not None]
        metrics = {
            "hdl_tokens_not_generated": float(self.saved_tokens),
            "hdl_group_size_mean": sum(len(g.samples) for g in groups) / len(groups),
            "hdl_root_pass_rate": sum(s.reward or 0.0 for s in roots) / max(1, len(roots)),
        }
        if conts:
            metrics["hdl_continuation_pass_rate"] = sum(s.reward or 0.0 for s in conts) / len(conts)
            metrics["hdl_branch_position_mean"] = sum(self.branch_at) / len(self.branch_at)
            metrics["hdl_branch_abs_delta_mean"] = sum(self.branch_delta) / len(self.branch_delta)
            metrics["hdl_token_abs_delta_mean"] = sum(self.all_delta) / len(self.all_delta)
        return metrics

    def state_dict(self) -> dict:
        return {"saved_tokens": self.saved_tokens}

    def load_state_dict(self, state: dict) -> None:
        self.saved_tokens = state["saved_tokens"]
