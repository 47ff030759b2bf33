"""A run's data order as a stream of prompts (its position is checkpointed)."""

from __future__ import annotations

import hashlib
from functools import cached_property

from replaylab.types import Prompt


class StreamChanged(ValueError):
    """A checkpoint was written over other data than this run built: its stream position over another training
    set or data order, or its evaluations over other benchmark problems or golds (training/trainer.py)."""


class PromptStream:
    """The run's data order: a reproducible walk over the training prompts, epoch after epoch.

    Its position is part of the checkpoint, so a resumed run continues the same order.
    """

    def __init__(self, prompts: list[Prompt], order: list[int]):
        if not prompts:
            raise ValueError("the training prompt set is empty")
        self.prompts = prompts
        self.order = order
        self.position = 0  # prompts consumed so far (across epochs)

    @cached_property
    def fingerprint(self) -> str:
        """16 hex digits over the prompts in stream order (id, text, gold): what a checkpoint's position indexes.
        A resumed run whose data root, data file or order code changed builds another stream, and its position
        would silently continue over other prompts."""
        h = hashlib.sha256()
        for i in self.order:
            p = self.prompts[i]
            h.update(f"{p.uid}\0{p.text}\0{p.answer}\0".encode())
        return h.hexdigest()[:16]

    def restore(self, position: int, fingerprint: str | None, where: str) -> None:
        """Continue at a checkpoint's `position`, if it was written over this stream (`fingerprint`; None: a
        checkpoint from before fingerprints, taken on trust); else StreamChanged naming `where`."""
        if fingerprint is not None and fingerprint != self.fingerprint:
            raise StreamChanged(f"{where} was written over other training prompts or another data order (fingerprint "
                                f"{fingerprint}, this run's {self.fingerprint}): a data file or the data root changed "
                                "since; restore it, or move the run directory away to start over")
        self.position = position

    def take(self, n: int) -> list[Prompt]:
        out = [self.peek_at(self.position + i) for i in range(n)]
        self.position += n
        return out

    def peek_at(self, absolute_index: int) -> Prompt:
        """The prompt at a given position of the (endless, epoch-repeating) order."""
        return self.prompts[self.order[absolute_index % len(self.order)]]

    def peek(self, n: int, start: int | None = None) -> list[Prompt]:
        start = self.position if start is None else start
        return [self.peek_at(start + i) for i in range(n)]
