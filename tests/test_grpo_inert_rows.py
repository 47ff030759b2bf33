"""GRPO leaves rows with advantage exactly 0 (zero-variance groups) out of the forward/backward: the
loss, its gradient and the update must be those of the forward over every row."""

from __future__ import annotations

import pytest
import torch

import replaylab.objectives.grpo as grpo_mod
from test_micro_batch import loss_batch_sizes
from test_grpo_recipe_features import PAD, make_sample, objective, tiny_model, train_rows
from test_replay_buffer import token_rewards
from replaylab.types import OffPolicy


@pytest.fixture(scope="module")
def model():
    return tiny_model(0)


def rows_forwarded(monkeypatch) -> list[int]:
    return loss_batch_sizes(monkeypatch, "replaylab.objectives.grpo")


def minibatch(model) -> list:
    """Two groups with reward variance, two without (their advantages 0.0), a truncated row in each,
    and a RePO-style replayed pair (its own loss term, a behaviour ratio) in a live group."""
    rows = [make_sample(model, f"g{g}", n, 0.0, 10 * g + i) for g in range(4) for i, n in enumerate((3, 8, 5))]
    replay = OffPolicy(ratio_base="behaviour", is_cap=2.0, cap_from_trainer=False, loss_weight=0.5, own_term=True)
    rows += [make_sample(model, "g0", n, 0.0, 50 + i, source="replay", off_policy=replay) for i, n in enumerate((4, 6))]
    advantages = [0.9, -1.2, 0.3, 0.0, 0.0, 0.0, -0.4, 1.1, -0.7, 0.0, 0.0, 0.0, 0.8, -0.6]
    for s, a in zip(rows, advantages):
        s.advantage = a
    return rows


def loss_and_grads(model, obj, rows, slices):
    model.zero_grad(set_to_none=True)
    total = 0.0
    for part in slices:
        loss, _ = obj.loss(model, part, PAD, batch=rows)
        (loss * obj.share(part, rows)).backward()
        total += obj.share(part, rows) * loss.item()
    return total, [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("trainer", [{"aggregation": "dapo"}, {"aggregation": "grpo"}, {"aggregation": "dr_grpo"},
                                     {"aggregation": "dapo", "mask_truncated": True, "dual_clip": 3.0}])
def test_skipping_inert_rows_gives_the_full_loss_and_gradient(model, monkeypatch, trainer):
    rows = minibatch(model)
    slices = [rows[:5], rows[5:11], rows[11:]]  # the middle slice: inert rows and a live group
    obj = objective(**trainer)
    obj.skip_inert = False
    sizes = rows_forwarded(monkeypatch)
    full_loss, full_grads = loss_and_grads(model, obj, rows, slices)
    full_rows = sum(sizes)
    sizes.clear()
    obj.skip_inert = True
    loss, grads = loss_and_grads(model, obj, rows, slices)
    assert sum(sizes) < full_rows  # the rows were left out (the check below could fail if they were not)
    assert loss == pytest.approx(full_loss, abs=1e-6)
    assert abs(full_loss) > 1e-3
    for g, ref in zip(grads, full_grads):
        torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-7)


def test_a_slice_of_only_inert_rows_has_zero_loss_and_reports_its_counts(model):
    rows = minibatch(model)
    dead = [s for s in rows if s.advantage == 0.0]
    loss, metrics = objective().loss(model, dead, PAD, batch=rows)
    assert loss.item() == 0.0 and loss.requires_grad
    assert metrics["num_seqs"] == len(dead) and metrics["num_tokens"] == sum(s.num_tokens for s in dead)


def test_nothing_is_skipped_with_a_kl_term(model, monkeypatch):
    rows = [s for s in minibatch(model) if s.source == "fresh"]
    sizes = rows_forwarded(monkeypatch)
    objective(kl_coef=0.1).loss(model, rows, PAD, reference=tiny_model(1), batch=rows)
    assert sizes == [len(rows)]  # policy and reference forward over every row, inert ones included


def test_training_steps_with_and_without_the_skip_agree(run_train, monkeypatch, tmp_path):
    """Real updates on the micro world (rewards from a stand-in: about half the groups of 2 have zero
    variance): the train rows, the update's loss and its gradient norm, are the same."""
    token_rewards(monkeypatch, 2)
    overrides = ["trainer.samples_per_prompt=2", "budget.max_updates=3", "trainer.lr=1e-3"]
    runs, forwarded = {}, {}
    sizes = rows_forwarded(monkeypatch)  # rows of every loss forward, both runs in turn
    for skip in (False, True):
        monkeypatch.setattr(grpo_mod.GRPO, "skip_inert", skip)
        start = len(sizes)
        # separate output roots: the second run must train, not find the first one finished
        runs[skip] = train_rows(run_train, overrides, output_root=tmp_path / f"skip-{skip}")[1]
        forwarded[skip] = sizes[start:]
        assert forwarded[skip], skip  # the spy saw the real loss path
    # the skip happened (else the agreement below would hold trivially): fewer rows went through the forward
    assert sum(forwarded[True]) < sum(forwarded[False])
    full, skipped = runs[False], runs[True]
    assert len(full) == 3 and all(r["zero_variance_groups"] > 0 for r in full)  # there was something to skip
    assert [r["num_seqs"] for r in skipped] == [r["num_seqs"] for r in full]
    for a, b in zip(skipped, full):
        for key in ("loss", "grad_norm", "abs_advantage", "reward"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-7), key
