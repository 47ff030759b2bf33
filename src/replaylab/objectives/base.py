"""The objective family as registered objects: what scores a sample, what it trains on, how.

The trainer is objective-blind: it calls these hooks and never compares names.

    score(samples, scorers) -> int   fill the samples' scores (teacher log-probs or rewards; cached
                                     on the sample, so a replayed sample is scored once); returns
                                     the teacher tokens scored (the ledger's count)
    prepare(groups)                  per-iteration inputs of the loss (GRPO: group advantages)
    loss(model, samples, pad_id, reference, batch) -> (loss, metrics)   one slice of a minibatch
                                     (`batch`: the whole minibatch, for normalisers that span it)
    share(part, batch)               the weight of a slice's loss in its minibatch's loss
    informative(group) -> bool       whether a group carries learning signal (dynamic sampling
                                     keeps only those; default: every group)
    batch_metrics(groups)            the objective's own train-row metrics

Class-level declarations tell the rest of the harness what an objective needs: its `family`
("opd": a teacher scores; "grpo": a grader rewards; it becomes `trainer.kind`), whether it needs a
teacher and full teacher distributions, whether replayed samples need proximal log-probs, which
aggregations it implements, and which objective-specific trainer fields it reads (the config
check refuses any other one set away from its default). A new objective is one module with one
registered subclass plus one YAML under conf/trainer/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from replaylab.types import Group, Sample

# A key a loss's metrics may carry beside them, not logged: the tokens its token means were measured on,
# when not its `num_tokens` (the trainer weights the slices' token means by it: training.update_metrics)
MEASURED_TOKENS = "measured_tokens"

@dataclass
class Scorers:
    """What can score a sample: the frozen teacher (OPD) and the verifiable-reward grader."""

    teacher: Any | None  # teacher.base.TeacherScorer
    grader: Any  # grading.Grader
    tokenizer: Any


class Objective:
    name: ClassVar[str] = "base"
    family: ClassVar[str] = ""
    needs_teacher: ClassVar[bool] = False
    needs_full_teacher: ClassVar[bool] = False
    # Replayed samples get log-probs under the iteration-start policy (the PPO ratio's anchor).
    needs_proximal: ClassVar[bool] = True
    aggregations: ClassVar[tuple[str, ...]] = ("dapo", "grpo")
    # Objective-specific trainer fields this objective reads (see config_checks.OBJECTIVE_SPECIFIC).
    reads: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, cfg: Any, max_response_tokens: int, temperature: float):
        self.cfg = cfg  # TrainerConfig
        self.max_response_tokens = max_response_tokens
        self.temperature = temperature  # rollout temperature: log-probs are taken at it

    def needs_reference(self) -> bool:
        """Whether the trainer must keep a frozen reference copy of the initial policy."""
        return False

    def score(self, samples: list[Sample], scorers: Scorers) -> int:
        raise NotImplementedError

    def prepare(self, groups: list[Group]) -> None:
        pass

    def loss(self, model: torch.nn.Module, samples: list[Sample], pad_id: int,
             reference: torch.nn.Module | None = None, batch: list[Sample] | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss of slice `samples` of minibatch `batch` (None: the slice is the whole minibatch),
        normalised so that the sum over slices of `share(slice, batch) * loss` is the minibatch's loss."""
        raise NotImplementedError

    def informative(self, group: Group) -> bool:
        return True

    def share(self, part: list[Sample], batch: list[Sample]) -> float:
        """The weight that makes a sum of per-slice losses equal the loss of the whole batch: the
        slice's share of tokens (token mean) or of sequences (sequence mean, constant normaliser)."""
        if self.cfg.aggregation == "dapo":
            return sum(s.num_tokens for s in part) / max(1, sum(s.num_tokens for s in batch))
        return len(part) / len(batch)

    def batch_metrics(self, groups: list[Group], dropped: list[Group] = ()) -> dict[str, float]:
        """Metrics of an iteration's trained `groups`; `dropped` are the groups dynamic sampling scored and
        filtered out (their surplus aside), for metrics of everything scored."""
        return {}


OBJECTIVES: dict[str, type[Objective]] = {}


def register_objective(cls: type[Objective]) -> type[Objective]:
    if OBJECTIVES.get(cls.name, cls) is not cls:
        raise ValueError(f"objective {cls.name!r} registered twice")
    if not cls.family:
        raise ValueError(f"objective {cls.name!r} declares no family")
    OBJECTIVES[cls.name] = cls
    return cls


def objective_class(name: str) -> type[Objective]:
    if name not in OBJECTIVES:
        raise KeyError(f"trainer.objective: unknown objective {name!r}; allowed: {sorted(OBJECTIVES)}")
    return OBJECTIVES[name]


def build_objective(cfg: Any, max_response_tokens: int, temperature: float) -> Objective:
    return objective_class(cfg.objective)(cfg, max_response_tokens, temperature)
