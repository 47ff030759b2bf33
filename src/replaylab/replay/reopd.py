"""`reopd`: single-turn ReOPD, OPD on the student's continuation of a stored teacher prefix
(Liao et al., arXiv 2607.04763; ALGORITHMS.md §8 and §14, the single-turn form is ours).

Before training, the teacher (or, with `pool=initial`, the initial policy) answers every prompt the
run will draw, once: the prefix pool, counted in the ledger (`trajectories`, source "teacher").
Each iteration, every prompt's pool trajectory is cut before a reasoning step t drawn with the
paper's step-decaying probability p_t proportional to kappa^t over its K steps (kappa = 0.6, the
paper's script): steps 1..t-1 are the prefix, the student generates the rest, the teacher scores
the suffix, and the loss is the usual OPD loss over the suffix tokens only. t = 1 (no prefix) is an
ordinary OPD row. The paper's multi-turn rows (a turn of an agent trajectory) become steps of one
answer here. Rows report the prefix tokens the student did not have to generate.
"""

from __future__ import annotations

from dataclasses import dataclass

from replaylab.config_fields import check, check_choice, knob
from replaylab.replay.base import Continuation, Plan, PromptStream, ReplayStrategy, StepContext, StrategyConfig, register_strategy, run_prompts
from replaylab.replay.prefixes import cut, draw_step, step_boundaries, step_end_ids
from replaylab.types import Group, Prompt


@dataclass
class ReOPDConfig(StrategyConfig):
    name: str = knob("reopd", "OPD on the student's continuation of a stored teacher prefix cut at a step-decaying step (ReOPD, single turn)")
    kappa: float = knob(0.6, "paper script: cut before step t with probability proportional to kappa^t")
    pool: str = knob("teacher", "who writes the prefix pool: teacher (the paper; needs teacher.kind=local) | initial (the initial policy)")
    step_ends: list = knob([".", "\n"], "a reasoning step ends after a token whose text ends with one of these; \".\" "
                                       "suits the tiny world's sentences, but a tokenizer that splits digits (Qwen's) "
                                       "makes it end a step inside every decimal: real models use strategy=reopd_lines")

    def __post_init__(self) -> None:
        check(0 < self.kappa, "strategy.kappa", f"must be > 0, got {self.kappa}")
        check_choice(self.pool, "strategy.pool", ["teacher", "initial"])
        check(len(self.step_ends) > 0, "strategy.step_ends", "needs at least one step end")


@register_strategy
class ReOPD(ReplayStrategy):
    name = "reopd"
    Config = ReOPDConfig
    trainers = ("opd",)
    replays = False  # every trained sample is the student's own (a continuation of a stored prefix)

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        check(cfg.strategy.pool != "teacher" or cfg.teacher.kind == "local", "strategy.pool",
              f"pool=teacher samples the prefix pool from the teacher, which needs teacher.kind=local, not {cfg.teacher.kind!r}")
        # the pool is sampled by an in-process engine over the teacher, and the fast one decodes float32 only
        check(cfg.strategy.pool != "teacher" or cfg.rollout.engine != "fast" or cfg.teacher.dtype == "float32",
              "teacher.dtype", f"{cfg.teacher.dtype}: strategy.pool=teacher samples the pool from the teacher with "
              "rollout.engine=fast, which decodes float32 models only; use teacher.dtype=float32 or rollout=hf")

    def __init__(self, cfg: ReOPDConfig):
        super().__init__(cfg)
        self.initial_from = cfg.pool
        self.initial_samples = 1  # one stored answer per prompt: the pool
        self.pool: dict = {}  # uid -> the stored trajectory (a Sample)
        self.tally: dict[str, int] = {}  # "K,t" -> rows cut before step t of a K-step trajectory
        self.saved_tokens = 0

    def initial_prompts(self, stream: PromptStream, ctx: StepContext) -> list[Prompt]:
        return run_prompts(stream, ctx)

    def receive_initial(self, groups: list[Group]) -> None:
        for g in groups:
            self.pool[g.prompt.uid] = g.samples[0].replayed(source=g.samples[0].source)

    def plan(self, ctx: StepContext) -> Plan:
        ends = step_end_ids(ctx.tokenizer, self.cfg.step_ends)
        fresh, cont, cuts, prefix_tokens = [], [], [], 0
        for prompt in ctx.stream.take(ctx.prompts_per_iteration):
            stored = self.pool.get(prompt.uid)
            bounds = step_boundaries(stored.response_ids, ends, ctx.tokenizer.eos_token_id) if stored is not None else []
            t = draw_step(len(bounds) + 1, self.cfg.kappa, ctx.rng)
            key = f"{len(bounds) + 1},{t}"
            self.tally[key] = self.tally.get(key, 0) + 1
            cuts.append(t)
            if t == 1:
                fresh.append(prompt)
                continue
            prefix = cut(stored, bounds[t - 2])
            prefix_tokens += prefix.num_tokens
            cont.append(Continuation(prompt, prefix, ctx.samples_per_prompt))
        self.saved_tokens += prefix_tokens * ctx.samples_per_prompt
        return Plan(fresh=fresh, continue_from=cont, metrics={
            "reopd_cut_step_mean": sum(cuts) / len(cuts),
            "reopd_prefixed_prompts": float(len(cont)),
            "reopd_prefix_tokens_mean": prefix_tokens / max(1, len(cont)),
            "reopd_tokens_not_generated": float(self.saved_tokens),  # prefix tokens the student was spared, so far
        })

    def state_dict(self) -> dict:
        return {"pool": dict(self.pool), "tally": dict(self.tally), "saved_tokens": self.saved_tokens}

    def load_state_dict(self, state: dict) -> None:
        self.pool, self.tally, self.saved_tokens = dict(state["pool"]), dict(state["tally"]), state["saved_tokens"]
