"""Supervised fine-tuning on prompt/solution pairs, used to build the tiny world's models.

Loss on completion tokens (and the EOS) only; AdamW with linear warm-up and cosine decay; a pure
function of its inputs and the seed, so a rebuild gives bit-identical weights on the same machine.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from replaylab.tasks.arithmetic import Problem
from replaylab.tasks.prompts import render_question


@dataclass(frozen=True)
class SFTSchedule:
    steps: int
    batch_size: int = 64
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.01
    warmup: int = 50
    grad_clip: float = 1.0


def collate_sft(
    tokenizer: PreTrainedTokenizerBase, problems: list[Problem]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded (input_ids, attention_mask, labels) with labels only on the solution + EOS."""
    seqs, labels = [], []
    for p in problems:
        prompt = tokenizer(render_question(tokenizer, p.question), add_special_tokens=False)["input_ids"]
        target = tokenizer(p.solution, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        seqs.append(prompt + target)
        labels.append([-100] * len(prompt) + target)
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
    lab = torch.full((len(seqs), width), -100, dtype=torch.long)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (s, l) in enumerate(zip(seqs, labels)):
        ids[i, : len(s)] = torch.tensor(s)
        lab[i, : len(l)] = torch.tensor(l)
        att[i, : len(s)] = 1
    return ids, att, lab


def train_sft(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sample_batch: Callable[[random.Random, int], list[Problem]],
    schedule: SFTSchedule,
    seed: int,
    on_step: Callable[[int, float], None] | None = None,
) -> None:
    """Train `model` in place for `schedule.steps` steps; `on_step(step, loss)` after each step
    (used to snapshot early checkpoints as students and to drive a progress bar)."""
    rng = random.Random(seed)
    opt = torch.optim.AdamW(
        model.parameters(), lr=schedule.lr, betas=schedule.betas, weight_decay=schedule.weight_decay
    )

    def lr_at(step: int) -> float:
        if step < schedule.warmup:
            return (step + 1) / schedule.warmup
        progress = (step - schedule.warmup) / max(1, schedule.steps - schedule.warmup)
        return 0.5 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    for step in range(1, schedule.steps + 1):
        ids, att, lab = collate_sft(tokenizer, sample_batch(rng, schedule.batch_size))
        loss = model(input_ids=ids, attention_mask=att, labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), schedule.grad_clip)
        opt.step()
        sched.step()
        if on_step is not None:
            on_step(step, loss.item())
    model.eval()
