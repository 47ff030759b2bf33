"""Wrapping the policy for DDP or FSDP2, and unwrapping it again."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from replaylab.parallel.process import MODES, is_distributed, world_size


def unwrap(model: nn.Module) -> nn.Module:
    """The module whose parameter names are the HF names: DDP's `.module`; an FSDP2 model is
    sharded in place (same class hierarchy, same names), so it is returned as it is."""
    from torch.nn.parallel import DistributedDataParallel

    while isinstance(model, DistributedDataParallel):
        model = model.module
    return getattr(model, "_orig_mod", model)  # torch.compile wrapper


def is_fsdp(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(unwrap(model), FSDPModule)


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks, found the way accelerate does it: by the model's `_no_split_modules`
    class names (Qwen3DecoderLayer, LlamaDecoderLayer, ...), falling back to `model.model.layers`."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers and hasattr(getattr(model, "model", None), "layers"):
        layers = list(model.model.layers)
    if not layers:
        raise ValueError(f"cannot find the decoder layers of {type(model).__name__} to shard (no _no_split_modules, "
                         "no model.layers); use wrap_model(mode='ddp') or pass a transformers CausalLM")
    return layers


def wrap_model(model: nn.Module, mode: str, device: torch.device | str,
               param_dtype: torch.dtype | None = None) -> nn.Module:
    """Move `model` to `device` and make its gradients synchronised across ranks.

    * none: the model itself (single process, or replicated inference).
    * ddp: DistributedDataParallel; rank 0's weights are broadcast at construction. Buffers are not
      re-broadcast at each forward (`forward_sync_buffers=False`): HF LMs only hold constant rotary
      buffers, and a per-forward broadcast would make every no-grad scoring pass a collective.
    * fsdp2: `fully_shard` on every decoder layer, then on the root (docs/scale_out.md). Every rank
      must hold the same full weights when this is called (they do after `from_pretrained`).
      `param_dtype` (e.g. bfloat16) enables FSDP2 mixed precision with fp32 gradient reduction.

    Both DDP and FSDP2 *average* gradients over ranks; see `grad_sync_scale`.
    """
    if mode not in MODES:
        raise ValueError(f"unknown distributed mode {mode!r}; choose one of {MODES}")
    device = torch.device(device)
    model = model.to(device)
    if mode == "none":
        return model
    if not is_distributed():
        raise RuntimeError(f"wrap_model(mode={mode!r}) needs torch.distributed: launch with torchrun "
                           "(or submitit tasks_per_node > 1) and call init_from_env() first")
    if mode == "ddp":
        import inspect

        from torch.nn.parallel import DistributedDataParallel

        # torch >= 2.13 renames broadcast_buffers to forward_sync_buffers (which still syncs at init: fine here).
        sync_kw = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
                   else "broadcast_buffers")
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                       **{sync_kw: False})
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (world_size(),))
    kwargs: dict = {"mesh": mesh}
    if param_dtype is not None:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def grad_sync_scale() -> int:
    """Factor to multiply a rank's loss by before `backward` so that the averaged gradient equals
    the gradient of the *sum* of the ranks' losses. With losses weighted by their share of the
    global minibatch (`Objective.share(local_part, global_minibatch)`), the sum over
    ranks is the global minibatch loss, so the synchronised gradient is exactly the single-process
    one. (DDP and FSDP2 both divide the reduced gradient by the world size.)"""
    return world_size()


# ---------------------------------------------------------------------------- gradients
def _is_dtensor(t: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)
