"""`prefixrl`: GRPO from prefixes of correct off-policy traces on hard prompts (PrefixRL; ALGORITHMS.md
§14: the abstract's "condition on the prefix of successful off-policy traces and run on-policy RL
to complete them"; the concrete form, pool and schedule, is ours).

Before training, the initial policy answers every prompt the run will draw
(`trainer.samples_per_prompt` answers each, counted in the ledger as initial-policy trajectories);
its correct answers are the trace pool, its pass rate the prompt's starting difficulty. A prompt is
hard while its last unprefixed pass rate is at most `hard_pass_rate`. A hard prompt with a correct
trace gets its GRPO group from a prefix: a trace drawn with the strategy RNG, cut at a fraction f of
its length (rounded down, at least one token kept for the policy to write); the reward is the
correctness of the completed answer, advantages are taken within the group, and only the suffix is
trained on. Every other prompt gets an ordinary group.

The schedule (`schedule=adaptive`) gives each prompt its own f, starting at `prefix_fraction`: when a
prefixed group's pass rate reaches `shrink_at`, f is multiplied by `shrink`; once f falls below
`min_fraction` the prompt is asked unprefixed again, and its unprefixed pass rate is then the
back-generalization the paper claims. `schedule=constant` keeps f. Strategy rows log the pass rate
of prefixed and of unprefixed groups separately, the latter also over prompts that were ever
prefixed (`prefixrl_graduated_pass_rate`), and the mean f.
"""

from __future__ import annotations

from dataclasses import dataclass

from replaylab.config_fields import check, check_choice, knob
from replaylab.replay.base import Continuation, Plan, PromptStream, ReplayStrategy, StepContext, StrategyConfig, UpdateStats, register_strategy, run_prompts
from replaylab.replay.prefixes import cut
from replaylab.types import Group, Prompt


@dataclass
class PrefixRLConfig(StrategyConfig):
    name: str = knob("prefixrl", "GRPO groups completed from prefixes of correct initial-policy traces on hard prompts (PrefixRL)")
    hard_pass_rate: float = knob(0.25, "a prompt is hard while its last unprefixed pass rate is at most this (chosen)")
    prefix_fraction: float = knob(0.5, "f: share of a correct trace's tokens given as prefix (the difficulty knob; chosen)")
    schedule: str = knob("adaptive", "adaptive: each prompt's f shrinks as its prefixed pass rate rises | constant")
    shrink: float = knob(0.5, "adaptive: f is multiplied by this when a prefixed group passes shrink_at")
    shrink_at: float = knob(0.5, "adaptive: prefixed pass rate at which f shrinks")
    min_fraction: float = knob(0.1, "adaptive: below this f, the prompt is asked without a prefix again")

    def __post_init__(self) -> None:
        check(0 <= self.hard_pass_rate < 1, "strategy.hard_pass_rate", f"must be in [0, 1), got {self.hard_pass_rate}")
        check(0 < self.prefix_fraction < 1, "strategy.prefix_fraction", f"must be in (0, 1), got {self.prefix_fraction}")
        check_choice(self.schedule, "strategy.schedule", ["adaptive", "constant"])
        check(0 < self.shrink < 1, "strategy.shrink", f"must be in (0, 1), got {self.shrink}")
        check(0 < self.shrink_at <= 1, "strategy.shrink_at", f"must be in (0, 1], got {self.shrink_at}")
        check(0 <= self.min_fraction < self.prefix_fraction, "strategy.min_fraction",
              f"must be in [0, prefix_fraction={self.prefix_fraction}), got {self.min_fraction}")


@register_strategy
class PrefixRL(ReplayStrategy):
    name = "prefixrl"
    Config = PrefixRLConfig
    trainers = ("grpo",)
    replays = False  # every trained sample is the current policy's (a continuation of a stored prefix)

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        s = cfg.strategy
        check(not cfg.trainer.dynamic_sampling, "trainer.dynamic_sampling",
              "would filter only prefixrl's unprefixed groups, and its refills draw prompts past the ones whose "
              "traces were collected up front")
        for key in ("shrink", "shrink_at", "min_fraction"):
            check(s.schedule == "adaptive" or getattr(s, key) == getattr(PrefixRLConfig, key), f"strategy.{key}",
                  "acts only with strategy.schedule=adaptive")

    def __init__(self, cfg: PrefixRLConfig):
        super().__init__(cfg)
        self.traces: dict[str, list] = {}  # uid -> correct initial-policy answers (Samples)
        self.pass_rate: dict[str, float] = {}  # uid -> last unprefixed pass rate
        self.fraction: dict[str, float] = {}  # uid -> its current prefix fraction f
        self.ever_prefixed: set[str] = set()

    def initial_prompts(self, stream: PromptStream, ctx: StepContext) -> list[Prompt]:
        return run_prompts(stream, ctx)

    def receive_initial(self, groups: list[Group]) -> None:
        for g in groups:
            self.pass_rate[g.prompt.uid] = g.pass_rate
            wins = [s.replayed(source=s.source) for s in g.samples if s.reward == 1.0 and s.num_tokens > 1]
            if wins:
                self.traces[g.prompt.uid] = wins

    def current_fraction(self, uid: str) -> float | None:
        """The prefix fraction for this prompt now, or None: ask it without a prefix."""
        if uid not in self.traces or self.pass_rate.get(uid, 1.0) > self.cfg.hard_pass_rate:
            return None
        f = self.fraction.get(uid, self.cfg.prefix_fraction)
        return f if f >= self.cfg.min_fraction else None

    def prefixable(self, uid: str) -> bool:
        """Hard now, with a trace long enough to cut at its fraction (a shorter one is asked plain: `plan`)."""
        f = self.current_fraction(uid)
        return f is not None and any(int(f * t.num_tokens) >= 1 for t in self.traces[uid])

    def plan(self, ctx: StepContext) -> Plan:
        fresh, cont, fractions = [], [], []
        for prompt in ctx.stream.take(ctx.prompts_per_iteration):
            f = self.current_fraction(prompt.uid)
            if f is None:
                fresh.append(prompt)
                continue
            trace = ctx.rng.choice(self.traces[prompt.uid])
            length = min(trace.num_tokens - 1, int(f * trace.num_tokens))
            if length < 1:
                fresh.append(prompt)
                continue
            cont.append(Continuation(prompt, cut(trace, length), ctx.samples_per_prompt))
            fractions.append(f)
            self.ever_prefixed.add(prompt.uid)
        return Plan(fresh=fresh, continue_from=cont, metrics={
            "prefixrl_prefixed_prompts": float(len(cont)),
            "prefixrl_fraction_mean": sum(fractions) / len(fractions) if fractions else 0.0,
        })

    def observe(self, groups: list[Group], stats: UpdateStats, ctx: StepContext) -> dict[str, float]:
        prefixed = [g for g in groups if g.samples and g.samples[0].prefix is not None]
        plain = [g for g in groups if not (g.samples and g.samples[0].prefix is not None)]
        for g in plain:
            self.pass_rate[g.prompt.uid] = g.pass_rate
        if self.cfg.schedule == "adaptive":
            for g in prefixed:
                if g.pass_rate >= self.cfg.shrink_at:
                    uid = g.prompt.uid
                    self.fraction[uid] = self.fraction.get(uid, self.cfg.prefix_fraction) * self.cfg.shrink
        graduated = [g for g in plain if g.prompt.uid in self.ever_prefixed]
        metrics = {
            "prefixrl_pass_rate_prefixed": _mean([g.pass_rate for g in prefixed]),
            "prefixrl_pass_rate_unprefixed": _mean([g.pass_rate for g in plain]),
            "prefixrl_trace_prompts": float(len(self.traces)),
            "prefixrl_hard_prompts": float(sum(self.prefixable(u) for u in self.traces)),
            "prefixrl_ever_prefixed": float(len(self.ever_prefixed)),
        }
        if graduated:
            metrics["prefixrl_graduated_pass_rate"] = _mean([g.pass_rate for g in graduated])
        return metrics

    def state_dict(self) -> dict:
        return {"traces": dict(self.traces), "pass_rate": dict(self.pass_rate), "fraction": dict(self.fraction),
                "ever_prefixed": sorted(self.ever_prefixed)}

    def load_state_dict(self, state: dict) -> None:
        self.traces, self.pass_rate, self.fraction = dict(state["traces"]), dict(state["pass_rate"]), dict(state["fraction"])
        self.ever_prefixed = set(state["ever_prefixed"])


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")
