"""Process groups: initialising torch.distributed from torchrun or submitit, rank and world size."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

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
