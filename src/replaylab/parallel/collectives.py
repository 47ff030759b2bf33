"""Collectives on Python objects and floats, and the contiguous split of work across ranks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from replaylab.parallel.process import is_distributed, rank, world_size


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
