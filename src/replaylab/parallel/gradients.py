"""Per-gradient-group gradients and their norms, read off the synchronised `.grad`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from replaylab.parallel.wrap import _is_dtensor


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
