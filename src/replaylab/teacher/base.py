"""The `TeacherScorer` protocol: per-token teacher log-probs of student responses (OPD).

Scores are cached on the sample (`Sample.teacher_logprobs`), so a replayed sample is never scored
twice: the teacher is frozen. Implementations: `local.LocalTeacher` (transformers, same process)
and `server.ServerTeacher` (a vLLM OpenAI-compatible server returning prompt log-probs).
"""

from __future__ import annotations

from typing import Protocol

from replaylab.types import Sample


class TeacherScorer(Protocol):
    tokens_scored: int  # teacher tokens scored so far (the ledger reads it)
    provides_full: bool  # can return full-vocabulary log-probs (needed by the exact reverse KL)

    def score(self, samples: list[Sample], full: bool = False) -> None:
        """Fill `teacher_logprobs` (and `teacher_full_logprobs` if `full`) on samples lacking them."""
        ...

    def distribution_model(self):
        """A local torch model giving full next-token distributions, or None (a server)."""
        ...


def unscored(samples: list[Sample], full: bool) -> list[Sample]:
    return [s for s in samples if s.teacher_logprobs is None or (full and s.teacher_full_logprobs is None)]
