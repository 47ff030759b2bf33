"""The data that flows through one iteration: samples, groups and the prompts they answer.

A `Sample` is one response to one prompt. It carries everything a replay strategy or an objective
needs later, so that a stored sample can be trained on again without regenerating or rescoring it:
the behaviour log-probs (the policy that actually produced the tokens), that policy's version,
where the sample came from, its reward (GRPO) and its cached teacher log-probs (OPD).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Literal

import torch

Source = Literal["fresh", "initial", "replay", "teacher"]


@dataclass(frozen=True)
class OffPolicy:
    """How the loss treats a sample that the policy at the start of its iteration did not generate.

    Set by the strategy that replays the sample; the objective reads it (`objectives.inputs`).
    """

    ratio_base: Literal["proximal", "behaviour"] = "proximal"  # anchor of the PPO ratio: the policy at
    # the start of the update (stored behaviour ignored), or the stored behaviour log-probs (RePO)
    is_cap: float | None = None  # cap c of the truncated decoupled weight min(pi_prox / mu, c); None = no weight
    cap_from_trainer: bool = True  # a replayed sample takes trainer.is_cap unless the strategy set is_cap
    loss_weight: float = 1.0  # multiplies the sample's token losses (RePO's lambda_off)
    own_term: bool = False  # aggregated as a loss term of its own beside the other rows, with its own
    # normaliser, and without the KL term (RePO: L = L_on + lambda_off * L_off, KL on online rows only)
    freshness_alpha: float | None = None  # f-OPD: weight the sample by its freshness
    # f = exp(-alpha * mean_t |log pi_theta(y_t) - log mu(y_t)|), pi_theta the policy the loss is taken under
    freshness_min: float = 0.0  # f-OPD: a sample with f below this gets weight 0 (cut)


@dataclass(frozen=True)
class Prompt:
    """One training or evaluation question, already rendered through the chat template."""

    uid: str  # stable id of the question (dataset id), the key of every per-prompt buffer
    text: str  # the rendered prompt text (chat template applied)
    token_ids: tuple[int, ...]  # tokenized rendered prompt
    answer: str  # gold final answer, graded with the math grader


@dataclass(frozen=True, eq=False)
class Prefix:
    """A stored beginning of a response that the policy continues (prefix replay: ReOPD, PrefixRL, HDL).

    The prefix is context, like the prompt: the sample's `response_ids`, behaviour log-probs, loss mask,
    ledger tokens and teacher scores cover the continuation (the suffix) only."""

    ids: torch.Tensor  # (K,) int64 tokens of the stored response prefix
    source: Source  # who wrote it: the teacher, the initial policy, or an earlier policy version ("fresh")
    policy_version: int | None  # the version of the policy that wrote it (None: the teacher)
    origin_id: str  # sample_id of the trajectory it was cut from

    @property
    def num_tokens(self) -> int:
        return int(self.ids.numel())


@dataclass
class Sample:
    """One response to one prompt, with the provenance needed to train on it again."""

    prompt: Prompt
    response_ids: torch.Tensor  # (L,) int64 response tokens, EOS included when generated
    behaviour_logprobs: torch.Tensor  # (L,) float32 log mu(y_t | s_t) under the sampling policy
    policy_version: int  # optimizer updates the sampling policy had taken (0 = initial policy)
    source: Source  # fresh (current policy), initial (initial-policy store) or replay (buffer)
    truncated: bool  # hit the response budget before EOS
    sample_id: str  # unique id: a strategy that must never reuse trajectories checks these
    reward: float | None = None  # verifiable reward (GRPO), set by the scorer
    reward_status: str | None = None  # the grader's status behind `reward` (grading.result: timeout, error and
    # unparseable_gold score 0 without a verdict on the answer)
    teacher_logprobs: torch.Tensor | None = None  # (L,) log p_teacher(y_t | s_t), cached (OPD)
    teacher_full_logprobs: torch.Tensor | None = None  # (L, V) full teacher log-probs when the
    # exact reverse-KL estimator needs them; cached like teacher_logprobs (tiny vocabularies only)
    advantage: float | None = None  # GRPO group-relative advantage, set each iteration
    proximal_logprobs: torch.Tensor | None = None  # (L,) log-probs under the policy at the start of
    # this iteration, for samples it did not generate; valid for one iteration only
    off_policy: OffPolicy = field(default_factory=OffPolicy)
    prefix: Prefix | None = None  # a stored response prefix this sample continues (context, never trained on)
    extras: dict = field(default_factory=dict)  # a strategy's private notes; the loss never reads them

    @property
    def num_tokens(self) -> int:
        """Tokens this sample's policy generated (the suffix, for a prefix continuation)."""
        return int(self.response_ids.numel())

    @property
    def context_ids(self) -> tuple[int, ...]:
        """What the response is conditioned on: the prompt, then the prefix it continues, if any."""
        if self.prefix is None:
            return self.prompt.token_ids
        return self.prompt.token_ids + tuple(self.prefix.ids.tolist())

    @property
    def full_response_ids(self) -> torch.Tensor:
        """The whole answer (prefix + suffix): what the grader reads."""
        if self.prefix is None:
            return self.response_ids
        return torch.cat([self.prefix.ids, self.response_ids])

    # Checkpoints hold whole replay buffers: a tiny-world RePO buffer of 50K samples was 100K tensor records
    # in torch.save's archive and as many objects for the weights-only unpickler to rebuild in Python (about
    # 4 s to save and 9.5 s to load; benchmarks/bench_checkpoint.py). Small tensors therefore travel as raw
    # bytes; large ones (a full-vocabulary teacher distribution) stay tensors, whose storage torch.save
    # writes once however many samples share it. Fields at their defaults are left out too (the
    # unpickler's cost is per object).
    def __getstate__(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if not _is_default(k, v)}
        for name in TENSOR_FIELDS:
            t = state.get(name)
            if t is not None and t.numel() * t.element_size() <= INLINE_BYTES:
                state[name] = _to_bytes(t)
        return state

    def __setstate__(self, state: dict) -> None:
        for name in TENSOR_FIELDS:
            if isinstance(state.get(name), tuple):
                state[name] = _from_bytes(state[name])
        for name, factory, default in _DEFAULTED:  # a field left out was at its default
            if name not in state:
                state[name] = factory() if factory is not MISSING else default
        self.__dict__.update(state)

    def replayed(self, source: Source = "replay") -> "Sample":
        """A copy marked as coming from a store; tensors are shared (they are never mutated)."""
        return Sample(
            prompt=self.prompt,
            response_ids=self.response_ids,
            behaviour_logprobs=self.behaviour_logprobs,
            policy_version=self.policy_version,
            source=source,
            truncated=self.truncated,
            sample_id=self.sample_id,
            reward=self.reward,
            reward_status=self.reward_status,
            teacher_logprobs=self.teacher_logprobs,
            teacher_full_logprobs=self.teacher_full_logprobs,
            advantage=self.advantage,
            off_policy=self.off_policy,
            prefix=self.prefix,
            extras=dict(self.extras),
        )


TENSOR_FIELDS = ("response_ids", "behaviour_logprobs", "teacher_logprobs", "teacher_full_logprobs", "proximal_logprobs")
INLINE_BYTES = 16384  # tensors up to this size are pickled inline as bytes


def _is_default(name: str, value) -> bool:
    if name not in _DEFAULTS:
        return False
    default = _DEFAULTS[name]
    return value is None if default is None else value == default  # tensor fields all default to None


def _to_bytes(t: torch.Tensor) -> tuple[str, tuple[int, ...], bytes | None]:
    """(dtype name, shape, raw bytes) of a tensor, any dtype (bfloat16 has no numpy type: bytes via uint8)."""
    flat = t.detach().cpu().contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes()
    # None for no bytes: torch.save's pickle protocol 2 writes b"" as a call to `bytes`, which the
    # weights-only unpickler refuses
    return str(t.dtype).removeprefix("torch."), tuple(t.shape), raw or None


def _from_bytes(packed: tuple[str, tuple[int, ...], bytes | None]) -> torch.Tensor:
    name, shape, data = packed
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"a stored sample names {name!r} as its tensor's dtype, which is not a torch dtype")
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)


# (name, default_factory, default) of every field with a default, computed once: loading calls __setstate__ per sample
_DEFAULTED = [(f.name, f.default_factory, f.default) for f in fields(Sample)
              if f.default is not MISSING or f.default_factory is not MISSING]
# each such field's default value, for saving's comparison (a fresh one per sample is built only when loading)
_DEFAULTS = {name: factory() if factory is not MISSING else default for name, factory, default in _DEFAULTED}


@dataclass
class Group:
    """All samples for one prompt in one update; GRPO advantages are computed within a group."""

    prompt: Prompt
    samples: list[Sample]
    # Sub-group label per sample for advantage normalisation ("split" mode in RePO): samples with
    # the same label share one baseline. None = one baseline for the whole group.
    baseline_labels: list[str] | None = None

    @property
    def rewards(self) -> list[float]:
        return [s.reward if s.reward is not None else 0.0 for s in self.samples]

    @property
    def reward_std(self) -> float:
        r = torch.tensor(self.rewards, dtype=torch.float64)
        return float(r.std(unbiased=False)) if r.numel() > 1 else 0.0

    @property
    def pass_rate(self) -> float:
        r = self.rewards
        return sum(r) / len(r) if r else 0.0


def scored_statistics(groups: list[Group]) -> tuple[float, float]:
    """(share of the groups with zero reward variance, mean |advantage| of their samples): Prompt Replay's two
    headline statistics, over every group an iteration scored (GRPO's train rows and Prompt Replay's own)."""
    samples = [s for g in groups for s in g.samples]
    return (sum(g.reward_std == 0 for g in groups) / len(groups),
            sum(abs(s.advantage or 0.0) for s in samples) / len(samples))
