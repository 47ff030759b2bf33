"""Sharded checkpoints (torch.distributed.checkpoint), full state dicts and export to a transformers directory."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from torch import nn

from replaylab.parallel.process import barrier, is_distributed, is_main
from replaylab.parallel.wrap import unwrap
from replaylab.storage import CorruptCheckpoint, atomic_torch_save, safe_torch_load


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full (unsharded) state dict on CPU, **on rank 0 only**: other ranks get `{}` (by design,
    docs/scale_out.md), so guard every use with `is_main()`. All ranks must call it (it all-gathers)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
    )

    if not is_distributed():
        return {k: v.detach().cpu() for k, v in unwrap(model).state_dict().items()}
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def save_sharded(model: nn.Module, optimizer: torch.optim.Optimizer | None, path: str | Path,
                 extra: dict | None = None, weights: bool = True) -> Path:
    """Sharded checkpoint with torch.distributed.checkpoint: each rank writes its own shards of the
    model and optimizer state (no full gather, so it scales with the model). `extra` (replicated
    trainer state: scheduler, strategy, ledger, RNG, counters) is written by rank 0 as extra.pt.
    All ranks must call it; also works in a single process. With `weights` False only extra.pt is
    rewritten (atomically): the caller saved these very weights to `path` already. dcp overwrites a
    directory in place, so a kill during a second save of one update (a run's last) tore its only copy."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
    )

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if weights:
        if optimizer is not None:
            msd, osd = get_state_dict(model, optimizer)
            state = {"model": msd, "optimizer": osd}
        else:
            state = {"model": get_model_state_dict(model)}
        dcp.save(state, checkpoint_id=str(path))
    if extra is not None and is_main():
        atomic_torch_save(extra, path / "extra.pt")
    barrier()
    return path


def load_sharded(model: nn.Module, optimizer: torch.optim.Optimizer | None, path: str | Path) -> dict | None:
    """Load a `save_sharded` checkpoint into an already wrapped model (any world size: DCP reshards)
    and optimizer, in place; returns `extra` (or None)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    from torch.distributed.checkpoint.api import CheckpointException

    path = Path(path)
    if not (path / ".metadata").exists():
        raise FileNotFoundError(f"{path} is not a torch.distributed.checkpoint directory (no .metadata)")
    try:  # a torn shard: dcp raises on every rank (it gathers the ranks' read errors)
        if optimizer is not None:
            msd, osd = get_state_dict(model, optimizer)
            state = {"model": msd, "optimizer": osd}
            dcp.load(state, checkpoint_id=str(path))
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        else:
            state = {"model": get_model_state_dict(model)}
            dcp.load(state, checkpoint_id=str(path))
            set_model_state_dict(model, state["model"])
    except (CheckpointException, RuntimeError, OSError, EOFError) as e:
        raise CorruptCheckpoint(f"{path}: unreadable sharded checkpoint ({type(e).__name__}: {str(e)[:300]})") from e
    extra_path = path / "extra.pt"
    return safe_torch_load(extra_path) if extra_path.exists() else None


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
        state = safe_torch_load(Path(tmp) / "full.pt")
    sd = state["model"] if isinstance(state.get("model"), dict) else state
    if dtype is None:  # keep the trained weights' precision (no silent downcast)
        dtype = next((v.dtype for v in sd.values() if v.is_floating_point()), torch.float32)
    config = AutoConfig.from_pretrained(base_model_dir)
    model = AutoModelForCausalLM.from_config(config).to(dtype)
    load_full_state(model, sd, source=str(dcp_dir))
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


def load_full_state(model: nn.Module, sd: dict[str, torch.Tensor], source: str) -> None:
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
