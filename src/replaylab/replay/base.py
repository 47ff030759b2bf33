"""The replay-strategy protocol and registry: the unit of research in replaylab.

A strategy decides what each iteration trains on. The trainer calls its hooks in a fixed order and
never asks which strategy runs:

    initial_prompts(...)  once, before training: prompts whose initial-policy rollouts it needs
    receive_initial(...)  once: those rollouts, scored (teacher log-probs / rewards cached)
    plan(ctx)             which prompts get fresh rollouts, which get initial-policy rollouts now
                          (sampled on demand from a frozen copy of the initial policy), which
                          stored prefixes the current policy continues, and which stored groups
                          are reused
    continuations(fresh, plan, ctx)  after the fresh rollouts: the (prompt, prefix) pairs the
                          current policy continues now (default: the plan's); HDL picks its
                          branch points from the fresh roots here
    compose(fresh, initial, plan)  merge / replace / augment the fresh groups (the continuation
                          groups come last among them, their samples carrying `Sample.prefix`;
                          and the initial-policy groups sampled for `plan.initial`) with stored samples
    observe(groups, stats)  after the updates: buffers, pass rates, triggers; returns metrics
    state_dict / load_state_dict  everything needed for a bit-exact resume

Samples a strategy replays carry their off-policy treatment as a typed field, `Sample.off_policy`
(`types.OffPolicy`): the PPO ratio's anchor ("proximal", the default: the policy at the start of
the update, the stored behaviour ignored; or "behaviour": the stored behaviour log-probs, as RePO
does), the cap of a truncated decoupled weight min(pi_prox / mu, cap) (POPO) and a loss weight.
`Sample.extras` is for a strategy's private notes only.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from replaylab.config_fields import check, knob
from replaylab.tasks.stream import PromptStream
from replaylab.types import Group, Prefix, Prompt


@dataclass
class StrategyConfig:
    """Fields every strategy has."""

    name: str = knob("current", "registry name of the strategy")
    label: str = knob("", "name shown in result rows and tables (default: name); presets of one strategy set it, e.g. repo-recent")


@dataclass
class StepContext:
    """What the trainer tells a strategy at each iteration."""

    iteration: int  # rollout iterations done so far
    update: int  # optimizer updates done so far (the policy version)
    prompts_per_iteration: int
    samples_per_prompt: int
    updates_per_iteration: int
    max_updates: int
    stream: PromptStream
    rng: random.Random  # the strategy's own stream, checkpointed by the trainer
    tokenizer: Any = None  # the policy's tokenizer (prefix strategies find step boundaries with it)
    # logprobs(samples) -> per-sample (L_i,) log-probs of each response under the current policy (no
    # grad; context = prompt + prefix): HDL's hindsight scoring. None outside the trainer.
    logprobs: Callable[[list], list] | None = None


@dataclass
class Continuation:
    """A request to continue a stored prefix: `n` samples of the current policy from prompt + prefix,
    returned as one group whose samples train on their suffix only."""

    prompt: Prompt
    prefix: Prefix
    n: int


@dataclass
class Plan:
    """An iteration's request: fresh prompts to sample, prompts to sample from the initial policy,
    stored groups to train on again. The trainer never writes into it."""

    fresh: list[Prompt] = field(default_factory=list)  # sampled now by the current policy
    initial: list[Prompt] = field(default_factory=list)  # sampled now by the frozen initial policy
    reuse: list[Group] = field(default_factory=list)  # stored groups, trained on again
    fresh_n: int | None = None  # samples per fresh prompt (None: trainer.samples_per_prompt; HDL's roots)
    continue_from: list[Continuation] = field(default_factory=list)  # stored prefixes the current policy continues
    reasked: list[str] = field(default_factory=list)  # uids in `fresh` that are re-asked prompts (Prompt
    # Replay): their samples are fresh, yet they count as replay in the train rows' replay_fraction
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class GradientReading:
    """What one iteration measured of its gradients, as a trainer with gradient groups records it
    (checkpointed, so that a run can replay a sibling's to decide whether it may branch)."""

    iteration: int  # the iteration (0-based)
    start_update: int  # policy version before its updates
    update: int  # policy version after them
    grad_norms: list[float]  # per-gradient-group pre-clip global norms, in update order

    def as_list(self) -> list:
        return [self.iteration, self.start_update, self.update, list(self.grad_norms)]


@dataclass
class UpdateStats:
    """Gradient statistics of one iteration, globally reduced (equal on every rank)."""

    iteration: int
    update: int  # policy version after the iteration's updates
    grad_norms: list[float]  # per-minibatch (or per gradient group) pre-clip global norms
    grad_sketches: list[Any] | None = None  # per-minibatch sketched gradient vectors (torch tensors)
    loss_metrics: dict[str, float] = field(default_factory=dict)


class ReplayStrategy:
    """Base class: plain current-policy training. Subclasses override the hooks they need."""

    name: ClassVar[str] = "base"
    Config: ClassVar[type] = StrategyConfig
    # The objective families a strategy makes sense for ("opd", "grpo"); checked at start.
    trainers: ClassVar[tuple[str, ...]] = ("opd", "grpo")
    # Whether the trainer must keep a frozen copy of the initial policy to sample from on demand
    # (`Plan.initial`); it costs one extra model in memory, so only strategies that need it say so.
    needs_initial_policy: ClassVar[bool] = False
    # Whether it reads the per-gradient-group statistics of `UpdateStats` (norms, sketches): only
    # then does the trainer split each update's backward into trainer.stat_groups groups.
    reads_gradients: ClassVar[bool] = False
    # Whether it ever trains on samples it did not just generate: settings that only act on such
    # samples (trainer.is_cap) are a config error for a strategy that never does.
    replays: ClassVar[bool] = True
    # Whether its replayed samples take trainer.is_cap: False for a strategy that sets every replayed
    # sample's own weight treatment (RePO, RLEP, POPO), so the trainer's cap would be a flag without effect.
    takes_trainer_cap: ClassVar[bool] = True
    # Who writes the rollouts `initial_prompts` asks for: the frozen initial policy, or the teacher
    # (ReOPD's prefix pool; needs a local teacher). An instance may set it from its config.
    initial_from: str = "initial"
    # Rollouts per prompt for `initial_prompts` (None: trainer.samples_per_prompt); ReOPD's pool needs one.
    initial_samples: int | None = None
    # Whether state of its own builds up during its `current_prefix` (recent's stored rollouts): its runs
    # can lend their checkpoints to runs that branch, but cannot start from another run's.
    prefix_state: ClassVar[bool] = False

    @classmethod
    def ratio_at_behaviour(cls, strategy_cfg: Any) -> bool:
        """Whether it takes replayed samples' PPO ratio against their stored behaviour log-probs
        (`OffPolicy.ratio_base='behaviour'`): that ratio leaves 1 even in an iteration's only update, so the
        trainer's clip can bind (config_checks.check_clip); a ratio to the proximal policy cannot there."""
        return False

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """Cross-checks against the whole run config (a `config.Config`), before any model loads;
        a failure raises ConfigError naming the key. Subclasses extend it (call super())."""
        check(cfg.trainer.kind in cls.trainers, "strategy",
              f"{cls.name!r} works with trainer kinds {list(cls.trainers)}, not trainer.kind={cfg.trainer.kind!r}")

    def __init__(self, cfg: Any):
        self.cfg = cfg

    def initial_prompts(self, stream: PromptStream, ctx: StepContext) -> list[Prompt]:
        return []

    def receive_initial(self, groups: list[Group]) -> None:
        pass

    def plan(self, ctx: StepContext) -> Plan:
        return Plan(fresh=ctx.stream.take(ctx.prompts_per_iteration))

    def continuations(self, fresh: list[Group], plan: Plan, ctx: StepContext) -> list[Continuation]:
        return plan.continue_from

    def compose(self, fresh: list[Group], initial: list[Group], plan: Plan, ctx: StepContext) -> list[Group]:
        return fresh + plan.reuse + initial

    def observe(self, groups: list[Group], stats: UpdateStats, ctx: StepContext) -> dict[str, float]:
        return {}

    def observe_filtered(self, groups: list[Group], ctx: StepContext) -> None:
        """Groups generated and rewarded this iteration but not trained on: dynamic sampling dropped them
        (every reward equal, or the last refill round's surplus). Called just before `observe`. A strategy
        that tracks what it learns from each scoring (Prompt Replay's pass rates) records them here."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def current_prefix(self) -> tuple[int, dict[str, float]]:
        """(K, metrics): for its first K updates this strategy trains exactly as `current` does (it plans
        the next prompts of the data order as fresh ones, draws nothing from `ctx.rng`, asks for no
        initial rollouts and trains with the update arithmetic of its config), and each of those
        iterations writes these constant strategy rows. Runs of one config whose strategies share such a
        prefix may start from one another's checkpoints within it (training/branch.py). (0, {}): no such
        prefix."""
        return 0, {}

    def follow_readings(self, readings: list[GradientReading]) -> list[dict[str, float]] | None:
        """For a strategy that trains as `current` until a measurement of training says otherwise (R-OPD's
        trigger on the gradient norms): fed the gradient readings of a run that trained as `current`
        (a sibling's, every iteration from the start), advance this fresh instance's state as if it
        had trained them and return the strategy rows of each of those iterations; None if it would
        have left the current-policy prefix before the last of them. Such a run may then start from
        that sibling's checkpoint (training/branch.py). The default: no measured prefix."""
        return None

    @classmethod
    def measured_prefix(cls) -> bool:
        """Whether `follow_readings` is implemented (the run may branch on a sibling's readings)."""
        return cls.follow_readings is not ReplayStrategy.follow_readings


def run_prompts(stream: PromptStream, ctx: StepContext) -> list[Prompt]:
    """Every distinct prompt the rest of the run will draw (ceil(updates left / updates per
    iteration) iterations of the data order), in order: what a strategy whose store is built before
    training (RLEP's pool, ReOPD's prefixes, PrefixRL's traces) collects for."""
    iterations = math.ceil((ctx.max_updates - ctx.update) / ctx.updates_per_iteration)
    return list({p.uid: p for p in stream.peek(iterations * ctx.prompts_per_iteration)}.values())


STRATEGIES: dict[str, type[ReplayStrategy]] = {}
WHOLE_RUN = 1 << 62  # a `current_prefix` longer than any budget


def register_strategy(cls: type[ReplayStrategy]) -> type[ReplayStrategy]:
    if cls.name in STRATEGIES:
        raise ValueError(f"strategy {cls.name!r} registered twice")
    STRATEGIES[cls.name] = cls
    return cls


def build_strategy(cfg: Any) -> ReplayStrategy:
    name = cfg.name
    if name not in STRATEGIES:
        raise KeyError(f"strategy.name: unknown strategy {name!r}; allowed: {sorted(STRATEGIES)}")
    return STRATEGIES[name](cfg)
