"""Scoring an iteration's groups: GRPO rewards and advantages, OPD teacher log-probs.

Both are cached on the samples, so a replayed sample is graded and teacher-scored once.
"""

from __future__ import annotations

import torch

from replaylab.objectives import group_advantages
from replaylab.types import Group, Sample


def grade_rewards(samples: list[Sample], tokenizer, grader) -> None:
    """Binary verifiable reward from the math grader for samples that have none yet."""
    todo = [s for s in samples if s.reward is None]
    if not todo:
        return
    texts = tokenizer.batch_decode([s.response_ids.tolist() for s in todo], skip_special_tokens=True)
    for s, res in zip(todo, grader.grade([(t, s.prompt.answer) for t, s in zip(texts, todo)])):
        s.reward = 1.0 if res.correct else 0.0


def assign_advantages(groups: list[Group], mode: str) -> None:
    """Group-relative advantages written to `extras['advantage']`. Samples of a group share a
    baseline unless the group carries `baseline_labels` (RePO's split normalisation)."""
    rewards, index, owners = [], [], []
    next_id = 0
    for g in groups:
        labels = g.baseline_labels or ["all"] * len(g.samples)
        ids = {lab: next_id + i for i, lab in enumerate(dict.fromkeys(labels))}
        next_id += len(ids)
        for s, lab in zip(g.samples, labels):
            rewards.append(s.reward if s.reward is not None else 0.0)
            index.append(ids[lab])
            owners.append(s)
    if not owners:
        return
    adv = group_advantages(torch.tensor(rewards), torch.tensor(index), mode=mode)
    for s, a in zip(owners, adv.tolist()):
        s.extras["advantage"] = a
