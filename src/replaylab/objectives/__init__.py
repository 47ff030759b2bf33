"""Objectives: the registered families the trainer optimises (OPD exact, OPD sampled, GRPO).

Each is a small class (`base.Objective`) that scores samples, prepares per-iteration inputs and
computes a minibatch loss from samples, calling the tensor-level losses of `replaylab.losses`.
"""

from replaylab.objectives import grpo, opd  # noqa: F401  (registers)
from replaylab.objectives.base import (
    OBJECTIVES,
    Objective,
    Scorers,
    build_objective,
    objective_class,
    register_objective,
)

__all__ = ["OBJECTIVES", "Objective", "Scorers", "build_objective", "objective_class", "register_objective"]
