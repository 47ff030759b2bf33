"""What the prefix-replay strategies share (ReOPD, PrefixRL, HDL; ALGORITHMS.md §14): cutting a
stored trajectory into a `Prefix`, finding its reasoning-step boundaries, and ReOPD's
step-decaying draw of a cut.

A step ends after a token whose text ends with one of the configured step ends ("." and a line
break by default: the tiny world writes one result per sentence, reasoning models one per line).
A trajectory with b such boundaries before its last token has K = b + 1 steps; cutting before step
t keeps steps 1..t-1 as the prefix (t = 1: no prefix).
"""

from __future__ import annotations

import random
from functools import lru_cache

import torch

from replaylab.types import Prefix, Sample


@lru_cache(maxsize=8)
def _end_ids(tokenizer, ends: tuple[str, ...]) -> frozenset[int]:
    texts = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    decoded = [tokenizer.convert_tokens_to_string([t]) if t is not None else "" for t in texts]
    return frozenset(i for i, text in enumerate(decoded) if text and text.rstrip(" ").endswith(ends))


def step_end_ids(tokenizer, ends) -> frozenset[int]:
    """Token ids whose text ends a reasoning step (trailing spaces ignored)."""
    return _end_ids(tokenizer, tuple(ends))


def step_boundaries(ids: torch.Tensor, end_ids: frozenset[int], eos_id: int | None = None) -> list[int]:
    """Cut positions (prefix lengths) after each step-ending token, leaving at least one token that
    is not EOS to continue ("....<eos>" has no final step made of EOS alone)."""
    tokens = ids.tolist()
    last = len(tokens) - (1 if tokens and tokens[-1] == eos_id else 0)  # the real answer ends here
    return [j + 1 for j, tok in enumerate(tokens[: last - 1]) if tok in end_ids]


def step_decay_probs(steps: int, kappa: float) -> list[float]:
    """p_t proportional to kappa^t over t = 1..steps (ReOPD's step-decaying cut)."""
    weights = [kappa**t for t in range(1, steps + 1)]
    total = sum(weights)
    return [w / total for w in weights]


def draw_step(steps: int, kappa: float, rng: random.Random) -> int:
    """A step t in 1..steps with probability proportional to kappa^t."""
    return rng.choices(range(1, steps + 1), weights=step_decay_probs(steps, kappa))[0]


def cut(sample: Sample, length: int) -> Prefix:
    """The first `length` response tokens of a stored sample, as a prefix with its provenance."""
    if not 0 < length < sample.num_tokens:
        raise ValueError(f"a prefix of {length} tokens from a {sample.num_tokens}-token trajectory leaves nothing to continue")
    source = sample.source if sample.source in ("teacher", "initial") else "fresh"
    version = None if sample.source == "teacher" else sample.policy_version
    return Prefix(sample.response_ids[:length].clone(), source, version, sample.sample_id)
