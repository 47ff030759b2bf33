"""Generation on a DDP / FSDP2 policy through a plain gathered copy, so ranks never deadlock."""

from __future__ import annotations

import torch
from torch import nn

from replaylab.parallel.checkpoint import load_full_state
from replaylab.parallel.wrap import is_fsdp, unwrap
from replaylab.rollout.weight_sync import iter_full_tensors


def unwrapped_generation_copy(model: nn.Module, target: nn.Module | None = None) -> nn.Module:
    """A plain transformers model with the training model's current full weights, on every rank,
    for `generate` and no-grad scoring: its forward has no collectives, so ranks may generate
    different prompts and lengths without deadlocking (docs/scale_out.md).

    * DDP / plain models: the unwrapped module itself (it already holds the full weights and its
      own forward bypasses DDP's hooks), like HFGenerator's reference to the policy.
    * FSDP2: every rank streams `state_dict()` and all-gathers one tensor at a time
      (`weight_sync.iter_full_tensors`) into `target` (built once on the meta device if None, then
      materialised; pass the previous copy back to reuse its memory). Buffers (rotary inv_freq,
      non-persistent, so not in the state dict) are copied from the training model, where FSDP2
      leaves them unsharded. All ranks must call it.
    """

    base = unwrap(model)
    if not is_fsdp(base):
        return base
    first = next(base.parameters())
    device, dtype = first.device, first.dtype
    if target is None:
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            target = AutoModelForCausalLM.from_config(base.config)
        target = target.to_empty(device=device).to(dtype)
        if getattr(base, "generation_config", None) is not None:
            target.generation_config = base.generation_config
    with torch.no_grad():
        sd = dict(iter_full_tensors(base))
        load_full_state(target, sd, source="the FSDP2 training model")
        own = dict(target.named_buffers())
        for name, buf in base.named_buffers():
            if name in own:
                own[name].copy_(buf)
    return target.eval().requires_grad_(False)


class GatheredGenerator:
    """Wraps an `HFGenerator` for a DDP/FSDP2 policy: it samples from
    `unwrapped_generation_copy(policy)`, refreshed lazily. `sync_weights` only records the model and
    version; the gather happens at the next `generate` (or `model_for_scoring`), so the several
    updates of one iteration cost one gather. Under FSDP2 that gather is a collective: all ranks
    must call `generate` together (with their shard of the prompts, possibly none), as they do in
    the trainer loop. For DDP the copy is the unwrapped module itself (no gather, no extra memory).
    Any other attribute is the wrapped generator's."""

    def __init__(self, inner, policy: nn.Module):
        self.inner = inner
        self._copy: nn.Module | None = None
        self._pending: nn.Module | None = policy

    @property
    def policy_version(self) -> int:
        return self.inner.policy_version

    def __getattr__(self, name: str):  # tokens_generated, micro_batch, tokenizer, ...
        return getattr(self.__dict__["inner"], name)

    def sync_weights(self, model: nn.Module, version: int) -> None:
        self._pending = model
        self.inner.policy_version = version

    def model_for_scoring(self) -> nn.Module:
        """The plain model holding the latest synced weights (e.g. for proximal log-probs, whose
        forward then has no collectives). Collective under FSDP2 when weights are pending."""
        if self._pending is not None:
            self._copy = unwrapped_generation_copy(self._pending, self._copy)
            self._pending = None
            self.inner.sync_weights(self._copy, self.inner.policy_version)
        return self._copy

    def generate(self, prompts: list, params, seed: int, source: str = "fresh") -> list:
        self.model_for_scoring()
        return self.inner.generate(prompts, params, seed, source) if prompts else []
