"""The learning-rate schedule: linear warm-up, then constant or a half cosine to zero.

Warm-up follows replaylab's convention (update u of W runs at lr x (u + 1) / W, so the first update
already moves the weights) rather than HF's u / W, whose first update has lr 0; after the warm-up
the cosine is HF's `get_cosine_schedule_with_warmup` with one half cycle, reaching 0 at the run's
last update. The multiplier depends only on the update count, so a resumed scheduler (its
`last_epoch` is checkpointed) continues exactly.
"""

from __future__ import annotations

import math

import torch


def lr_multiplier(update: int, warmup: int, total: int, schedule: str) -> float:
    """The factor on the peak lr for optimizer update `update` (0-based) of `total`."""
    if warmup and update < warmup:
        return (update + 1) / warmup
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        progress = (update - warmup) / max(1, total - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    raise ValueError(f"trainer.lr_schedule: unknown schedule {schedule!r}; allowed: constant, cosine")


def build_scheduler(optimizer: torch.optim.Optimizer, trainer_cfg, max_updates: int) -> torch.optim.lr_scheduler.LambdaLR:
    warmup = trainer_cfg.warmup_for(max_updates)
    schedule = trainer_cfg.lr_schedule
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: lr_multiplier(u, warmup, max_updates, schedule))
