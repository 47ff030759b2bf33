"""The `Generator` protocol: how the trainer and the evaluator get responses from a policy.

Two implementations sit behind it: `hf.HFGenerator` (transformers `generate`, CPU and GPU) and
`vllm.VLLMGenerator` (GPU machines, optional extra, imported lazily). Both return `Sample`s with
per-token behaviour log-probs, a truncation flag and the policy version that produced them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from replaylab.types import Prompt, Sample, Source


class NonFiniteLogits(FloatingPointError):
    """The policy produced inf/NaN logits while sampling: its weights diverged."""


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings for one generate call."""

    max_new_tokens: int  # the response budget
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    n: int = 1  # samples per prompt
    ignore_eos: bool = False  # EOS is an ordinary token: every response has max_new_tokens (benchmarks)

    def __post_init__(self) -> None:
        if self.max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be positive, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")


@runtime_checkable
class Generator(Protocol):
    policy_version: int

    def generate(
        self, prompts: list[Prompt], params: SamplingParams, seed: int, source: Source = "fresh"
    ) -> list[list[Sample]]:
        """`params.n` samples per prompt, grouped per prompt in input order. Deterministic given
        `seed` and the weights (on CPU)."""
        ...

    def sync_weights(self, model: torch.nn.Module, version: int) -> None:
        """Make the generator sample from `model`'s current weights, tagged as `version`."""
        ...

    def model_for_scoring(self) -> torch.nn.Module:
        """A plain torch model with the current policy weights, for no-grad passes (proximal log-probs,
        the probe set, evaluation). Under DDP/FSDP2 it gathers weights, a collective: every rank calls it."""
        ...


def generate_in_chunks(prompts: list[Prompt], params: SamplingParams, seed: int, micro_batch: int,
                       decode: Callable[[list[Prompt], int], list[Sample]]) -> list[list[Sample]]:
    """What every in-process engine does around its decoding: `params.n` copies of each prompt,
    decoded `micro_batch` at a time by `decode(chunk, offset)` under one seeded, forked RNG, and
    regrouped per prompt in input order."""
    flat = [p for p in prompts for _ in range(params.n)]
    out: list[Sample] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for start in range(0, len(flat), micro_batch):
            out.extend(decode(flat[start : start + micro_batch], start))
    return [out[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]
