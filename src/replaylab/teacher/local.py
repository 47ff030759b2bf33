"""`LocalTeacher`: a frozen transformers model in the trainer's process, scoring in batches."""

from __future__ import annotations

import torch

from replaylab.models.batching import score_logprobs
from replaylab.teacher.base import unscored
from replaylab.types import Sample


class LocalTeacher:
    provides_full = True

    def __init__(self, model: torch.nn.Module, pad_id: int, micro_batch: int = 256):
        self.model = model.eval().requires_grad_(False)
        self.pad_id = pad_id
        self.micro_batch = micro_batch
        self.tokens_scored = 0

    def distribution_model(self) -> torch.nn.Module:
        """The frozen model whose full next-token distributions diagnostics may read (the probe)."""
        return self.model

    def score(self, samples: list[Sample], full: bool = False) -> None:
        todo = unscored(samples, full)
        if not todo:
            return
        for s, (logp, logp_full) in zip(todo, score_logprobs(self.model, todo, self.pad_id, self.micro_batch, full=full)):
            s.teacher_logprobs = logp
            if full:
                # Full rows are cached in float16: the tiny world's 128-token vocabulary makes
                # this cheap, and the exact reverse KL only needs ~1e-3 relative accuracy.
                s.teacher_full_logprobs = logp_full.to(torch.float16)
            self.tokens_scored += s.num_tokens
