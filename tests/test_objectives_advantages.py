"""Tests of the model-free pieces of replaylab.losses: group advantages, importance weights,
aggregation, the registry and argument validation. References are written as explicit loops."""

from __future__ import annotations

import math

import pytest
import torch

from replaylab.losses import (
    LOSSES,
    aggregate,
    get_loss,
    grpo_loss,
    group_advantages,
    off_policyness,
    opd_full_rkl_loss,
    opd_sampled_loss,
    policy_ratio,
    register_loss,
    truncated_behaviour_weight,
    weight_metrics,
)


def loop_advantages(rewards, groups, mode, eps, ddof):
    out = []
    for r, g in zip(rewards, groups):
        members = [rr for rr, gg in zip(rewards, groups) if gg == g]
        mean = sum(members) / len(members)
        if mode == "center":
            out.append(r - mean)
            continue
        denom = max(len(members) - ddof, 1)
        std = math.sqrt(sum((x - mean) ** 2 for x in members) / denom)
        out.append((r - mean) / (std + eps))
    return out


@pytest.mark.parametrize("mode,unbiased", [("zscore", False), ("zscore", True), ("center", False)])
def test_group_advantages_matches_loop(mode, unbiased):
    g = torch.Generator().manual_seed(0)
    # Non-contiguous, unsorted ids; one singleton group (7) and one constant-reward group (42).
    groups = [3, 9, 3, 7, 9, 3, 42, 9, 42, 3, 42]
    rewards = torch.rand(len(groups), generator=g, dtype=torch.float64).tolist()
    rewards[6] = rewards[8] = rewards[10] = 1.0
    expected = loop_advantages(rewards, groups, mode, 1e-4, 1 if unbiased else 0)
    got = group_advantages(
        torch.tensor(rewards, dtype=torch.float64), torch.tensor(groups), mode, 1e-4, unbiased=unbiased
    )
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    assert got[3] == 0 and torch.all(got[[6, 8, 10]] == 0)  # no relative signal -> 0


def test_group_advantages_binary_population_std():
    # Binary rewards with pass rate p: population std = sqrt(p (1 - p)) exactly.
    r = torch.tensor([1.0, 0.0, 0.0, 0.0])
    adv = group_advantages(r, torch.zeros(4, dtype=torch.long), eps=0.0)
    std = math.sqrt(0.25 * 0.75)
    torch.testing.assert_close(adv, torch.tensor([0.75, -0.25, -0.25, -0.25]) / std)
    assert not adv.requires_grad


def test_group_advantages_rejects_bad_input():
    with pytest.raises(ValueError, match="mode"):
        group_advantages(torch.zeros(2), torch.zeros(2, dtype=torch.long), "rank")
    with pytest.raises(ValueError, match=r"\(N,\)"):
        group_advantages(torch.zeros(2), torch.zeros(3, dtype=torch.long))


def test_truncated_behaviour_weight():
    prox = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -0.1, 0.0]], requires_grad=True)
    behav = torch.tensor([[-1.0, -0.5, -2.0], [-1.0, -0.1, float("-inf")]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    w = truncated_behaviour_weight(prox, behav, cap=2.0, mask=mask)
    expected = [[1.0, math.exp(-1.5), 2.0], [math.exp(-2.0), 1.0, 0.0]]  # exp(1.5) = 4.48 -> cap
    torch.testing.assert_close(w, torch.tensor(expected))
    assert not w.requires_grad
    uncapped = truncated_behaviour_weight(prox, behav, cap=None, mask=mask)
    assert uncapped[0, 2].item() == pytest.approx(math.exp(1.5))
    m = weight_metrics(w, mask, prefix="bw", cap=2.0)
    assert m["bw_truncated_frac"].item() == pytest.approx(1 / 5)
    assert m["bw_max"].item() == 2.0 and m["bw_min"].item() == pytest.approx(math.exp(-2.0))
    assert m["bw_mean"].item() == pytest.approx(sum(sum(r) for r in expected) / 5)
    with pytest.raises(ValueError):
        truncated_behaviour_weight(prox, behav, cap=0.0)


def test_policy_ratio_gradient_and_off_policyness():
    lp = torch.tensor([[-1.0, -2.0], [-0.3, 5.0]], requires_grad=True)
    old = torch.tensor([[-1.5, -2.0], [-0.1, float("nan")]])
    mask = torch.tensor([[True, True], [True, False]])
    r = policy_ratio(lp, old, mask)
    torch.testing.assert_close(r, torch.tensor([[math.exp(0.5), 1.0], [math.exp(-0.2), 1.0]]))
    r.sum().backward()
    # d exp(lp - old) / d lp = ratio on valid tokens; 0 on padded ones.
    torch.testing.assert_close(lp.grad, torch.tensor([[math.exp(0.5), 1.0], [math.exp(-0.2), 0.0]]))
    assert off_policyness(lp, old, mask).item() == pytest.approx((0.5 + 0.0 + 0.2) / 3)


def test_aggregate_modes_and_errors():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    assert aggregate(x, mask, "grpo").item() == pytest.approx((2.0 + 4.0) / 2)
    assert aggregate(x, mask, "dapo").item() == pytest.approx(10.0 / 4)
    assert aggregate(x, mask, "dr_grpo", norm_len=5).item() == pytest.approx(10.0 / 10)
    with pytest.raises(ValueError, match="norm_len"):
        aggregate(x, mask, "dr_grpo")
    with pytest.raises(ValueError, match="allowed"):
        aggregate(x, mask, "sum")


def test_registry():
    assert LOSSES["grpo"] is grpo_loss and get_loss("grpo") is grpo_loss
    assert get_loss("opd_sampled") is opd_sampled_loss
    assert get_loss("opd_full_rkl") is opd_full_rkl_loss
    with pytest.raises(KeyError, match="grpo, opd_full_rkl, opd_sampled"):
        get_loss("ppo")
    with pytest.raises(ValueError, match="already registered"):
        register_loss("grpo")(lambda: None)
    assert register_loss("grpo")(grpo_loss) is grpo_loss  # idempotent for the same function


def test_argument_validation():
    lp = torch.zeros(2, 3)
    mask = torch.ones(2, 3)
    adv = torch.ones(2)
    with pytest.raises(ValueError, match="dual_clip"):
        grpo_loss(lp, lp, adv, mask, dual_clip=1.0)
    with pytest.raises(ValueError, match="clip_low"):
        grpo_loss(lp, lp, adv, mask, clip_low=1.0)
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo_loss(lp, lp, adv, mask, kl_coef=0.1)
    with pytest.raises(ValueError, match="advantages"):
        grpo_loss(lp, lp, torch.ones(3), mask)
    with pytest.raises(ValueError, match="old_logprobs"):
        grpo_loss(lp, torch.zeros(2, 4), adv, mask)
    with pytest.raises(ValueError, match="is_cap"):
        opd_sampled_loss(lp, lp, lp, mask, clip_low=0.2, is_cap=2.0)
    with pytest.raises(ValueError, match="allowed"):
        opd_sampled_loss(lp, lp, lp, mask, aggregation="dr_grpo")
    with pytest.raises(ValueError, match=r"\(B, T, V\)"):
        opd_full_rkl_loss(torch.zeros(2, 3, 4), torch.zeros(2, 3, 5), mask)


def test_low_precision_inputs_are_upcast_and_empty_batch_is_zero():
    lp = torch.full((2, 3), -1.0, dtype=torch.bfloat16, requires_grad=True)
    loss, metrics = grpo_loss(lp, lp.detach() - 0.5, torch.tensor([1.0, -1.0]), torch.ones(2, 3))
    assert loss.dtype == torch.float32 and math.isfinite(metrics["loss"])
    loss, metrics = grpo_loss(lp, lp.detach(), torch.ones(2), torch.zeros(2, 3))
    assert loss.item() == 0.0 and metrics["num_tokens"] == 0.0
