"""Moving the trainer's weights into a rollout engine: one small, version-pinned interface.

Two halves (docs/scale_out.md for how verl, TRL and prime-rl do the same):

* `iter_full_tensors(model)`: the trainer side. Streams `(hf_name, full_tensor)` pairs from a
  plain, DDP or FSDP2 model, all-gathering one DTensor at a time (peak memory: one full tensor).
  Every rank must consume the whole iterator, in the same order, because each FSDP2 tensor is a
  collective. Tested on CPU with gloo (tests/test_distributed.py).
* `ColocatedVLLMWeightSync`: the engine side, **pinned to vllm 0.33** (the `vllm` extra). It pushes
  those pairs into a vLLM `LLM` that lives in the same process (engine core in-process, which
  `distributed_executor_backend="external_launcher"` requires): `LLM.collective_rpc(fn)` runs `fn`
  on the worker, which calls `model.load_weights(pairs)`; vLLM's per-model loader maps HF names to
  its fused parameters (qkv_proj, gate_up_proj) and copies in place, so CUDA graphs stay valid.
  The prefix cache is then reset (cached KV blocks were computed with the old weights).
  vLLM's newer native weight-transfer API (`WeightTransferConfig`, NCCL/IPC engines) changed shape
  twice between 0.16 and 0.29 (docs/scale_out.md), which is why this path sticks to the two calls that
  have been stable since early 2025: `collective_rpc` with a callable and `load_weights`.
  Against real vLLM it is tested only in the gpu-marked tests/test_vllm_gpu.py (the glue also
  against a fake engine on CPU).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator

import torch
from torch import nn

from replaylab.parallel.wrap import unwrap

PINNED_VLLM = "0.33"  # the version this module's engine-side calls were written against
WRAPPER_PREFIXES = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")


def hf_name(name: str) -> str:
    """Parameter name as in the HF checkpoint: strips activation-checkpoint / compile / FSDP1
    wrapper segments that would not match vLLM's loader."""
    for prefix in WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def iter_full_tensors(model: nn.Module, dtype: torch.dtype | None = None,
                      device: torch.device | str | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full tensor) for every state-dict entry of `model` (plain, DDP or FSDP2).

    DTensors are all-gathered with `.full_tensor()`, one at a time, so all ranks must iterate to
    the end together. Non-persistent buffers (rotary `inv_freq`) are not in the state dict, which
    is what engines expect: they recompute them."""
    from torch.distributed.tensor import DTensor


    for name, t in unwrap(model).state_dict().items():
        if isinstance(t, DTensor):
            t = t.full_tensor()
        t = t.detach()
        if dtype is not None or device is not None:
            t = t.to(device=device or t.device, dtype=dtype or t.dtype)
        yield hf_name(name), t


def _load_weights_on_worker(worker, weights: list[tuple[str, torch.Tensor]]) -> int:
    """Runs inside the vLLM worker (via collective_rpc): `worker` is the worker (wrapper)."""
    runner = worker.model_runner
    model = runner.get_model() if hasattr(runner, "get_model") else runner.model
    model.load_weights(weights=weights)
    return len(weights)


class ColocatedVLLMWeightSync:
    """Push full HF-named tensors into a colocated vLLM 0.33 `LLM` (same process and GPU).

    Tensors are sent in chunks of about `chunk_bytes` so that the transient copy on the engine side
    stays small; in-process, `collective_rpc` passes them by reference (no serialisation)."""

    def __init__(self, llm, chunk_bytes: int = 256 << 20):
        import vllm

        if not vllm.__version__.startswith(PINNED_VLLM):
            warnings.warn(f"replaylab's vLLM weight sync is pinned to vllm {PINNED_VLLM}.x (the `vllm` extra); found "
                          f"{vllm.__version__}. collective_rpc/load_weights may have changed: run tests/test_vllm_gpu.py",
                          stacklevel=2)
        self.llm = llm
        self.chunk_bytes = chunk_bytes
        self.tensors_pushed = 0

    def push(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Load every (name, tensor) into the engine, then drop its prefix cache. Returns the number
        of tensors loaded."""
        chunk: list[tuple[str, torch.Tensor]] = []
        size = 0
        n = 0
        for name, t in named_tensors:
            chunk.append((name, t))
            size += t.numel() * t.element_size()
            if size >= self.chunk_bytes:
                n += self._load(chunk)
                chunk, size = [], 0
        if chunk:
            n += self._load(chunk)
        self.llm.reset_prefix_cache()
        self.tensors_pushed += n
        return n

    def _load(self, chunk: list[tuple[str, torch.Tensor]]) -> int:
        results = self.llm.collective_rpc(_load_weights_on_worker, args=(chunk,))
        return int(results[0]) if results else len(chunk)
