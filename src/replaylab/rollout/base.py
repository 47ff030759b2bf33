"""The `Generator` protocol: how the trainer and the evaluator get responses from a policy.

Three implementations sit behind it: `fast.FastGenerator` (the lean decoding loop, the default),
`hf.HFGenerator` (transformers `generate`, CPU and GPU) and `vllm.VLLMGenerator` (GPU machines,
optional extra, imported lazily). All return `Sample`s with per-token behaviour log-probs, a
truncation flag and the policy version that produced them.

Prefix continuation (`continue_prefixes`) works with every engine: the stored prefix is appended to
the prompt's tokens, so each engine decodes from prompt + prefix as it decodes from a prompt, and
the samples it returns carry the prefix (`Sample.prefix`) with the suffix as their response.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

import torch

from replaylab.types import Prefix, Prompt, Sample, Source


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
    # manual_seed seeds every device's generator: fork the CUDA ones too, so that generating leaves the
    # caller's random state as it was on a GPU as on the CPU.
    cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        for start in range(0, len(flat), micro_batch):
            out.extend(decode(flat[start : start + micro_batch], start))
    return [out[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]


def continue_prefixes(generator: Generator, prompts: list[Prompt], prefixes: list[Prefix], params: SamplingParams,
                      seed: int, source: Source = "fresh") -> list[list[Sample]]:
    """`params.n` continuations of each (prompt, prefix), grouped per pair in input order.

    The response budget covers the whole answer: a continuation of a K-token prefix gets
    `max_new_tokens - K` tokens and is truncated there (it is decoded with the longest remaining
    budget of the call and cut afterwards, which samples the same distribution: later tokens never
    change earlier ones). Each sample's response, behaviour log-probs and length are the suffix's;
    the prefix rides on `Sample.prefix` and its prompt stays the original question. The tokens decoded
    past a pair's own limit are dropped and counted nowhere (the ledger counts what was kept): the
    price of one batched call instead of one per prefix length."""
    if len(prompts) != len(prefixes):
        raise ValueError(f"{len(prompts)} prompts but {len(prefixes)} prefixes")
    limits = [params.max_new_tokens - p.num_tokens for p in prefixes]
    if any(limit < 1 for limit in limits):
        raise ValueError(f"a prefix of {params.max_new_tokens - min(limits)} tokens leaves no room in the response "
                         f"budget of {params.max_new_tokens} tokens")
    contexts = [replace(p, token_ids=p.token_ids + tuple(x.ids.tolist())) for p, x in zip(prompts, prefixes)]
    groups = generator.generate(contexts, replace(params, max_new_tokens=max(limits)), seed, source)
    for prompt, prefix, limit, group in zip(prompts, prefixes, limits, groups):
        for s in group:
            if s.num_tokens > limit:
                s.response_ids, s.behaviour_logprobs = s.response_ids[:limit].clone(), s.behaviour_logprobs[:limit].clone()
                s.truncated = True
            s.prompt, s.prefix, s.sample_id = prompt, prefix, f"cont-{s.sample_id}"
    return groups
