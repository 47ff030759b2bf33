"""The probe set: fixed initial-policy rollouts measured under the current student at every eval."""

from __future__ import annotations

import pytest
import torch

from conftest import load_rows
from replaylab.models.batching import score_logprobs


def probe_rows(path):
    return {(r["update"], r["metric"]): r["value"] for r in load_rows(path) if r["split"] == "probe"}


def test_probe_rows_at_every_evaluation_same_probe_for_every_strategy(run_train):
    _, current = run_train(["trainer.eval_every=2", "budget.max_updates=4"])
    _, initial = run_train(["strategy=initial", "trainer.eval_every=2", "budget.max_updates=4"])
    a, b = probe_rows(current), probe_rows(initial)
    assert {u for u, _ in a} == {0, 2, 4}
    assert {m for _, m in a} == {"probe_student_logprob", "probe_reverse_kl", "probe_tokens"}
    assert a[(0, "probe_student_logprob")] == b[(0, "probe_student_logprob")]  # same tokens, same student
    assert a[(0, "probe_reverse_kl")] == b[(0, "probe_reverse_kl")] > 0
    assert a[(4, "probe_student_logprob")] != a[(0, "probe_student_logprob")]  # the student moved


def test_probe_measures_what_it_says(run_train, monkeypatch):
    from replaylab.training.trainer import Trainer

    seen = {}
    original = Trainer.run_eval

    def spy(self):
        original(self)
        seen["trainer"] = self

    monkeypatch.setattr(Trainer, "run_eval", spy)
    run_train(["budget.max_updates=1", "eval.probe_size=5"])
    t = seen["trainer"]
    probe, policy = t.probe, t.c.policy
    assert len(probe.samples) == 5 and len(set(probe.prompt_indices)) == 5
    by_hand = score_logprobs(policy, probe.samples, t.pad_id, 2)
    tokens = sum(lp.numel() for lp, _ in by_hand)
    expected = sum(float(lp.sum()) for lp, _ in by_hand) / tokens
    got = probe.measure(policy, policy, t.pad_id, 3)  # the student against itself: KL 0
    assert got["probe_student_logprob"] == pytest.approx(expected, rel=1e-5)
    assert got["probe_reverse_kl"] == pytest.approx(0.0, abs=1e-6)
    assert got["probe_tokens"] == tokens
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(0.5)
    assert probe.measure(policy, t.c.teacher.distribution_model(), t.pad_id, 3)["probe_reverse_kl"] > 0


def test_grpo_probe_has_no_teacher_term(run_train):
    _, path = run_train(["trainer=grpo", "teacher=none", "trainer.prompts_per_iteration=4", "trainer.samples_per_prompt=2",
                         "budget.max_updates=1"])
    assert {m for _, m in probe_rows(path)} == {"probe_student_logprob", "probe_tokens"}
