"""Gradient sketches for strategies (norms: `distributed.grad_norm`): a fixed random projection.

The sketch is a count sketch of the flattened gradient: coordinate i goes to bucket h(i) with sign
s(i), both drawn once from a seeded generator per parameter, so sketches of different updates are
comparable, norms are preserved in expectation, and the cost is one pass over the gradient whatever
the model size (no copy of the full gradient is kept).
"""

from __future__ import annotations

import torch


class CountSketch:
    """Hash buckets and signs are regenerated from the seed at each call instead of stored: storing
    them would cost 12 bytes per parameter, more than the model itself."""

    def __init__(self, dim: int, seed: int = 0):
        self.dim = dim
        self.seed = seed

    def __call__(self, grads: list[torch.Tensor | None]) -> torch.Tensor:
        out: torch.Tensor | None = None
        for i, g in enumerate(grads):
            if g is None:
                continue
            if out is None:
                out = torch.zeros(self.dim, device=g.device)
            gen = torch.Generator(device=g.device).manual_seed(self.seed * 100_003 + i)
            buckets = torch.randint(0, self.dim, (g.numel(),), generator=gen, device=g.device)
            signs = torch.randint(0, 2, (g.numel(),), generator=gen, device=g.device).float() * 2 - 1
            out.index_add_(0, buckets, g.detach().reshape(-1).float() * signs)
        return (out if out is not None else torch.zeros(self.dim)).cpu()
