"""What a run is made of (built by `training.build`), and the seeds and errors the loop shares."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from replaylab.objectives import Objective
from replaylab.replay.base import ReplayStrategy
from replaylab.tasks.stream import PromptStream


class TrainingDiverged(RuntimeError):
    """A non-finite loss or gradient; the last good checkpoint is left untouched."""


@dataclass
class Components:
    policy: torch.nn.Module
    tokenizer: object
    generator: object  # rollout.base.Generator
    teacher: object | None  # teacher.base.TeacherScorer
    grader: object  # grading.Grader
    strategy: ReplayStrategy
    stream: PromptStream
    evaluate: object  # callable(update) -> list[(benchmark, metrics, n)] or None
    ref_model: torch.nn.Module | None = None
    initial_generator: object | None = None  # samples from a frozen copy of the initial policy
    objective: Objective | None = None  # what scores samples and gives the loss (replaylab.objectives)
    eval_fingerprint: str = ""  # evaluation.benchmarks_fingerprint of what `evaluate` scores ("" when nothing)
    train_fingerprint: str = ""  # tasks.datasets.rows_fingerprint of the training problems in data order


def derived_seed(*parts: object) -> int:
    """A 31-bit seed from the run seed and a purpose, stable across Python processes."""
    return random.Random("/".join(map(str, parts))).getrandbits(31)
