"""Primitives for running one replaylab training run on several processes (one per device).

    torchrun --nproc_per_node=N -m replaylab.train trainer.distributed=fsdp2 ...

The split of work is deliberately narrow (docs/scale_out.md, "How a step is split"):

* Everything that decides *what* to train on is replicated: every rank holds the same strategy
  buffers, ledger, prompt stream and RNG state, so every rank makes the same decisions without
  talking to the others. Rollouts and teacher scores are the only inputs that are produced sharded
  (each rank its contiguous slice, `shard`) and then gathered (`all_gather_objects`).
* The loss of each *gradient group* (a slice of the global minibatch) is split across ranks; DDP or
  FSDP2 synchronise the gradients in `backward`, so what a rank reads off `.grad` afterwards is the
  gradient of the whole global group. Per-group statistics (the R-OPD gradient norms, sketches) are
  therefore taken from the synchronised gradient (`GradientGroups`, `grad_norm`) and are the same
  whatever the world size.
* Generation never runs through the sharded model: `unwrapped_generation_copy` gathers the full
  weights into a plain transformers model on every rank (`GatheredGenerator` does it lazily for
  HFGenerator; a vLLM engine gets them via `rollout.weight_sync`), so ranks that generate different
  numbers of tokens can never deadlock on FSDP all-gathers. No-grad passes that must go through the
  wrapped model (proximal log-probs) use `sharded_map`, which keeps every rank's forwards in step.

Every helper is a no-op (or the obvious single-process equivalent) when torch.distributed is not
initialised, so the single-process trainer can call them unconditionally. Facts behind the choices
(gloo on CPU, rank-0-only full state dicts, in-place mutation by `set_model_state_dict`, ...) were
measured and are recorded in SCALE_FACTS.md.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

MODES = ("none", "ddp", "fsdp2")


# ---------------------------------------------------------------------------- process group
@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: what `init_from_env` set up."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None  # None when running as a single process without a process group


def export_submitit_env() -> bool:
    """Inside a submitit task of a multi-task job (hydra-submitit-launcher with tasks_per_node=N),
    export MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK the way torchrun would, so the same
    `init_from_env` works under torchrun and under SLURM/submitit. Returns True if it exported.

    Nothing is exported for single-task jobs (a plain sweep cell) or when torchrun already set the
    variables. CUDA_VISIBLE_DEVICES is left alone: `init_from_env` picks the device by LOCAL_RANK.
    """
    if os.environ.get("WORLD_SIZE") or not os.environ.get("SUBMITIT_EXECUTOR"):
        return False
    try:
        import submitit
    except ImportError as e:  # the variable says submitit launched us, so it must be importable
        raise RuntimeError("SUBMITIT_EXECUTOR is set but submitit is not importable; pip install replaylab[slurm]") from e
    job = submitit.JobEnvironment()
    if job.num_tasks <= 1:
        return False
    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    return True


def init_from_env(device: str = "auto", timeout_s: float = 1800.0) -> DistInfo:
    """Join the process group described by the environment (torchrun, or submitit via
    `export_submitit_env`): gloo on CPU, nccl on CUDA. Without WORLD_SIZE it is a no-op that
    describes the single process, so `python -m replaylab.train` keeps working unchanged.

    `device`: auto | cpu | cuda. On CUDA each rank takes device LOCAL_RANK (modulo the visible
    devices, so jobs that already narrowed CUDA_VISIBLE_DEVICES to one GPU per task work too).
    """
    export_submitit_env()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("init_from_env(device='cuda') but no CUDA device is available")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    dev = torch.device("cuda", local_rank % torch.cuda.device_count()) if device == "cuda" else torch.device("cpu")
    if device == "cuda":
        torch.cuda.set_device(dev)
    if "WORLD_SIZE" not in os.environ:
        return DistInfo(0, 1, 0, dev, None)
    if not dist.is_initialized():
        backend = "nccl" if device == "cuda" else "gloo"
        for key in ("MASTER_ADDR", "MASTER_PORT", "RANK"):
            if key not in os.environ:
                raise RuntimeError(f"WORLD_SIZE is set but {key} is not: launch with torchrun (or under submitit with "
                                   f"tasks_per_node > 1), or unset WORLD_SIZE for a single process")
        kwargs = {"device_id": dev} if backend == "nccl" else {}
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s), **kwargs)
    return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, dev, dist.get_backend())


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    """Rank 0 (or the only process): the one that writes rows, configs and done markers."""
    return rank() == 0


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def destroy() -> None:
    if is_distributed():
        dist.destroy_process_group()


# ---------------------------------------------------------------------------- data split
def shard_bounds(n: int, rank_: int, world: int) -> tuple[int, int]:
    """[start, end) of rank's contiguous share of n items; sizes differ by at most one."""
    if not 0 <= rank_ < world:
        raise ValueError(f"rank {rank_} is not in [0, {world})")
    return rank_ * n // world, (rank_ + 1) * n // world


def shard(items: Sequence, rank_: int | None = None, world: int | None = None) -> list:
    """Rank's contiguous, deterministic slice of `items`. Contiguous (not strided) so that
    concatenating the shards in rank order (`all_gather_objects`) restores the original order."""
    rank_ = rank() if rank_ is None else rank_
    world = world_size() if world is None else world
    start, end = shard_bounds(len(items), rank_, world)
    return list(items[start:end])


# ---------------------------------------------------------------------------- collectives
def _collective_device() -> torch.device:
    if is_distributed() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _reduce(x: Any, op) -> Any:
    if not is_distributed():
        return x
    if isinstance(x, torch.Tensor):
        t = x.detach().clone().to(_collective_device())
        dist.all_reduce(t, op=op)
        return t.to(x.device)
    is_list = isinstance(x, (list, tuple))
    t = torch.tensor(list(x) if is_list else [x], dtype=torch.float64, device=_collective_device())
    dist.all_reduce(t, op=op)
    values = t.cpu().tolist()
    return values if is_list else values[0]


def all_reduce_sum(x: Any) -> Any:
    """Sum over ranks of a float, a list of floats (element-wise) or a tensor; same type back."""
    return _reduce(x, dist.ReduceOp.SUM if is_distributed() else None)


def all_reduce_mean(x: Any) -> Any:
    """Mean over ranks (sum / world size) of a float, a list of floats or a tensor."""
    total = all_reduce_sum(x)
    w = world_size()
    if w == 1:
        return total
    if isinstance(total, torch.Tensor):
        return total / w
    return [v / w for v in total] if isinstance(total, list) else total / w


def all_reduce_max(x: Any) -> Any:
    """Max over ranks (e.g. to agree on a common number of micro-batches)."""
    return _reduce(x, dist.ReduceOp.MAX if is_distributed() else None)


def all_gather_objects(items: list) -> list:
    """Concatenate every rank's list in rank order (every rank gets the whole list). With
    `shard` this round-trips: all_gather_objects(shard(xs)) == xs. Objects are pickled, so Samples
    with CPU tensors travel as they are."""
    if not is_distributed():
        return list(items)
    parts: list = [None] * world_size()
    dist.all_gather_object(parts, list(items))
    return [x for part in parts for x in part]


def sharded_map(fn, items: Sequence, chunk_size: int) -> list:
    """`fn(chunk) -> list` over this rank's contiguous shard of `items`, in chunks of `chunk_size`;
    the results, in the original order, on every rank.

    Every rank makes the same number of `fn` calls: a rank with fewer chunks repeats a one-item
    dummy chunk and drops its result. So `fn` may run collectives, e.g. a no-grad forward through
    an FSDP2 model (proximal log-probs), which would deadlock if ranks ran different numbers of
    forwards. All ranks must call it with the same `items`."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    mine = shard(items)
    chunks = [mine[i : i + chunk_size] for i in range(0, len(mine), chunk_size)]
    calls = int(all_reduce_max(float(len(chunks))))
    out: list = []
    for k in range(calls):
        if k < len(chunks):
            out.extend(fn(chunks[k]))
        else:
            fn(list(items[:1]))  # keeps the collectives of fn in step with the other ranks
    return all_gather_objects(out)


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """`obj` from rank `src` on every rank (e.g. a decision only rank 0 may take)."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


# ---------------------------------------------------------------------------- wrapping
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
    * fsdp2: `fully_shard` on every decoder layer, then on the root (SCALE_FACTS §1). Every rank
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
        from torch.nn.parallel import DistributedDataParallel

        import inspect

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


class GradientGroups:
    """Per-group gradients read off the synchronised `.grad` of each parameter.

    The single-process trainer takes one `torch.autograd.grad` per gradient group. That does not
    work distributed: DDP only reduces in the hooks of `backward`, and FSDP2 differentiates through
    unsharded copies of the (sharded) parameters. So each group is a `backward` instead (all ranks
    take part, each with its slice of the group), and the group's gradient is the change of `.grad`
    since the previous group: already averaged over ranks, i.e. the gradient of the whole group.

        groups = GradientGroups(params); groups.reset()
        for part in parts:                 # global slices of the minibatch
            (local_loss * w * grad_sync_scale()).backward()
            g = groups.take()              # this group's global gradient (sharded under FSDP2)
            norms.append(grad_norm(g) / w_global)
        # .grad now holds the whole minibatch's gradient: clip and step as usual

    Under FSDP2 the returned tensors are DTensor shards; use `grad_norm` (which reduces over the
    mesh) and `full_tensors` (all-gather, e.g. for a count sketch) rather than local ops.
    """

    def __init__(self, params: Iterable[torch.Tensor]):
        self.params = [p for p in params]
        self._prev: list[torch.Tensor | None] = [None] * len(self.params)

    def reset(self) -> None:
        """Forget the previous snapshot (call when `.grad` was zeroed, i.e. at each optimizer step)."""
        self._prev = [None] * len(self.params)

    def take(self) -> list[torch.Tensor | None]:
        out: list[torch.Tensor | None] = []
        for i, p in enumerate(self.params):
            g = p.grad
            if g is None:
                out.append(None)
                continue
            g = g.detach()
            prev = self._prev[i]
            out.append(g.clone() if prev is None else g - prev)
            self._prev[i] = g.clone()
        return out


def grad_norm(grads: Sequence[torch.Tensor | None]) -> float:
    """Global L2 norm of a list of gradients; DTensor shards are reduced over their mesh, so every
    rank gets the norm of the full gradient (all ranks must call it)."""
    total: Any = None
    for g in grads:
        if g is None:
            continue
        g = g.detach()
        sq = torch.linalg.vector_norm(g.float() if g.dtype in (torch.float16, torch.bfloat16) else g) ** 2
        if _is_dtensor(sq):
            sq = sq.full_tensor()
        total = sq if total is None else total + sq
    return 0.0 if total is None else float(total.sqrt())


def full_tensors(grads: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]:
    """Full tensors from (possibly) DTensor shards: an all-gather per DTensor, all ranks take part."""
    return [g.full_tensor() if g is not None and _is_dtensor(g) else g for g in grads]


def clip_grad_norm(params: Iterable[torch.Tensor], max_norm: float) -> float:
    """`clip_grad_norm_` that also works on FSDP2's DTensor gradients; returns the pre-clip norm as a
    float on every rank. max_norm <= 0 means no clipping (the norm is still returned)."""
    params = [p for p in params if p.grad is not None]
    if not params:
        return 0.0
    total = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
    if _is_dtensor(total):
        total = total.full_tensor()
    return float(total)


# ---------------------------------------------------------------------------- state dicts
def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full (unsharded) state dict on CPU, **on rank 0 only**: other ranks get `{}` (by design,
    SCALE_FACTS §2), so guard every use with `is_main()`. All ranks must call it (it all-gathers)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    if not is_distributed():
        return {k: v.detach().cpu() for k, v in unwrap(model).state_dict().items()}
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def save_sharded(model: nn.Module, optimizer: torch.optim.Optimizer | None, path: str | Path,
                 extra: dict | None = None) -> Path:
    """Sharded checkpoint with torch.distributed.checkpoint: each rank writes its own shards of the
    model and optimizer state (no full gather, so it scales with the model). `extra` (replicated
    trainer state: scheduler, strategy, ledger, RNG, counters) is written by rank 0 as extra.pt.
    All ranks must call it; also works in a single process."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if optimizer is not None:
        msd, osd = get_state_dict(model, optimizer)
        state = {"model": msd, "optimizer": osd}
    else:
        state = {"model": get_model_state_dict(model)}
    dcp.save(state, checkpoint_id=str(path))
    if extra is not None and is_main():
        tmp = path / "extra.pt.tmp"
        torch.save(extra, tmp)
        os.replace(tmp, path / "extra.pt")
    barrier()
    return path


def load_sharded(model: nn.Module, optimizer: torch.optim.Optimizer | None, path: str | Path) -> dict | None:
    """Load a `save_sharded` checkpoint into an already wrapped model (any world size: DCP reshards)
    and optimizer, in place; returns `extra` (or None)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict, get_state_dict, set_model_state_dict, set_state_dict,
    )

    path = Path(path)
    if not (path / ".metadata").exists():
        raise FileNotFoundError(f"{path} is not a torch.distributed.checkpoint directory (no .metadata)")
    if optimizer is not None:
        msd, osd = get_state_dict(model, optimizer)
        state = {"model": msd, "optimizer": osd}
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    else:
        state = {"model": get_model_state_dict(model)}
        dcp.load(state, checkpoint_id=str(path))
        set_model_state_dict(model, state["model"])
    extra_path = path / "extra.pt"
    return torch.load(extra_path, map_location="cpu", weights_only=False) if extra_path.exists() else None


def export_to_hf(dcp_dir: str | Path, out_dir: str | Path, base_model_dir: str | Path,
                 dtype: torch.dtype | None = None) -> Path:
    """Turn a sharded checkpoint into a plain `save_pretrained` directory that
    `AutoModelForCausalLM.from_pretrained(out_dir)` (or vLLM) loads: dcp_to_torch_save, load into a
    model built from `base_model_dir`'s config, save with the base tokenizer and generation config
    (when the base has them). `dtype` None keeps the checkpoint's precision. Runs offline in one
    process (no process group needed); call it on rank 0 only. Peak memory: two full copies on CPU."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from transformers import AutoConfig, AutoModelForCausalLM

    dcp_dir, out_dir = Path(dcp_dir), Path(out_dir)
    with tempfile.TemporaryDirectory() as tmp:
        dcp_to_torch_save(dcp_dir, Path(tmp) / "full.pt")
        state = torch.load(Path(tmp) / "full.pt", map_location="cpu", weights_only=False)
    sd = state["model"] if isinstance(state.get("model"), dict) else state
    if dtype is None:  # keep the trained weights' precision (no silent downcast)
        dtype = next((v.dtype for v in sd.values() if v.is_floating_point()), torch.float32)
    config = AutoConfig.from_pretrained(base_model_dir)
    model = AutoModelForCausalLM.from_config(config).to(dtype)
    _load_full(model, sd, source=str(dcp_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    _copy_tokenizer_and_generation_config(Path(base_model_dir), out_dir)
    return out_dir


def _tied_keys(model: nn.Module) -> set[str]:
    keys = getattr(model, "_tied_weights_keys", None) or []
    if isinstance(keys, dict):  # transformers 5: {target: source}
        keys = list(keys)
    tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
    return set(keys) if tied else set()


def _load_full(model: nn.Module, sd: dict[str, torch.Tensor], source: str) -> None:
    """load_state_dict that tolerates only the tied output embedding being absent."""
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if k not in _tied_keys(model)]
    if missing or unexpected:
        raise ValueError(f"state dict from {source} does not match {type(model).__name__}: "
                         f"missing {missing[:8]}, unexpected {unexpected[:8]}")
    if hasattr(model, "tie_weights"):
        model.tie_weights()


def _copy_tokenizer_and_generation_config(base: Path, out: Path) -> None:
    """Only files the base directory really has: AutoTokenizer would otherwise invent a tokenizer
    from the model type alone."""
    from transformers import AutoTokenizer, GenerationConfig

    if any((base / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")):
        AutoTokenizer.from_pretrained(base).save_pretrained(out)
    if (base / "generation_config.json").exists():
        GenerationConfig.from_pretrained(base).save_pretrained(out)


# ---------------------------------------------------------------------------- generation copy
def unwrapped_generation_copy(model: nn.Module, target: nn.Module | None = None) -> nn.Module:
    """A plain transformers model with the training model's current full weights, on every rank,
    for `generate` and no-grad scoring: its forward has no collectives, so ranks may generate
    different prompts and lengths without deadlocking (SCALE_FACTS §3).

    * DDP / plain models: the unwrapped module itself (it already holds the full weights and its
      own forward bypasses DDP's hooks), like HFGenerator's reference to the policy.
    * FSDP2: every rank streams `state_dict()` and all-gathers one tensor at a time
      (`weight_sync.iter_full_tensors`) into `target` (built once on the meta device if None, then
      materialised; pass the previous copy back to reuse its memory). Buffers (rotary inv_freq,
      non-persistent, so not in the state dict) are copied from the training model, where FSDP2
      leaves them unsharded. All ranks must call it.
    """
    from replaylab.rollout.weight_sync import iter_full_tensors

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
        _load_full(target, sd, source="the FSDP2 training model")
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
