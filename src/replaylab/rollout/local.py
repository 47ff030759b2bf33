"""The in-process rollout engines by name: `fast` (rollout/fast.py) and `hf` (rollout/hf.py)."""

from __future__ import annotations

from torch import nn


def local_generator(engine: str, model: nn.Module | None, tokenizer, micro_batch: int, compile: bool = False):
    """A generator sampling from `model` (None: weights arrive later through `sync_weights`); `compile`:
    rollout.compile (fast only; config checks refuse it with another engine)."""
    if engine == "fast":
        from replaylab.rollout.fast import FastGenerator

        return FastGenerator(model, tokenizer, micro_batch=micro_batch, compile=compile)
    if engine == "hf":
        from replaylab.rollout.hf import HFGenerator

        return HFGenerator(model, tokenizer, micro_batch=micro_batch)
    raise ValueError(f"rollout.engine={engine!r} is not an in-process engine (fast, hf)")


def in_process_engine(engine: str) -> str:
    """The in-process engine for a frozen copy (initial policy, teacher pool) beside `engine`: the same
    one, except under vLLM, whose second colocated engine would need its own GPU memory budget."""
    return "fast" if engine == "fast" else "hf"
