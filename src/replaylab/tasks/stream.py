"""A run's data order as a stream of prompts (its position is checkpointed)."""

from __future__ import annotations

from replaylab.types import Prompt


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
