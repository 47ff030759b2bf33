"""A policy stored in bfloat16 (every real-model preset) trains through float32 master weights.

Plain AdamW on bf16 weights rounds a step of ~lr back to the old weight whenever it is below half the
weight's bf16 spacing (~1e-4 at the sizes of a Qwen3 layer): at the sweeps' lr of 1e-6 the policy hardly
moved and every strategy looked alike. training/optimizer.MasterWeightAdamW steps a float32 master kept in
its state and rounds it into the weight."""

from __future__ import annotations

import pytest
import torch

from replaylab.config import to_object
from replaylab.storage import safe_torch_load
from replaylab.training.optimizer import MasterWeightAdamW


def _weights(seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    return (torch.randn(64, 64) * 0.03).to(torch.bfloat16).float()  # exactly representable in bf16


def test_a_bf16_weight_follows_the_float32_trajectory_rounded():
    """Fed the same gradients, the bf16 parameter ends exactly at float32 AdamW's weights rounded to bf16,
    its master exactly at them; plain AdamW on the bf16 weight stays near its start instead."""
    w = _weights()
    full = torch.nn.Parameter(w.clone())
    low = torch.nn.Parameter(w.to(torch.bfloat16))
    plain = torch.nn.Parameter(w.to(torch.bfloat16))
    opts = [torch.optim.AdamW([full], lr=1e-6, weight_decay=0.1), MasterWeightAdamW([low], lr=1e-6, weight_decay=0.1),
            torch.optim.AdamW([plain], lr=1e-6, weight_decay=0.1)]
    for _ in range(20):
        g = torch.randn(64, 64).to(torch.bfloat16)
        full.grad, low.grad, plain.grad = g.float(), g.clone(), g.clone()
        for opt in opts:
            opt.step()
    assert torch.equal(opts[1].state[low]["master"], full.detach())
    assert torch.equal(low.detach(), full.detach().to(torch.bfloat16))
    moved = (full.detach().to(torch.bfloat16) != w.to(torch.bfloat16)).float().mean()
    moved_plain = (plain.detach() != w.to(torch.bfloat16)).float().mean()
    assert moved_plain < 0.5 * moved, (moved_plain, moved)  # what the masters are for: plain AdamW lost most steps


def test_float32_parameters_step_exactly_as_adamw():
    w = _weights(1)
    a, b = torch.nn.Parameter(w.clone()), torch.nn.Parameter(w.clone())
    opt_a = torch.optim.AdamW([a], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    opt_b = MasterWeightAdamW([b], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    for _ in range(5):
        g = torch.randn(64, 64)
        a.grad, b.grad = g.clone(), g.clone()
        opt_a.step()
        opt_b.step()
    assert torch.equal(a, b) and "master" not in opt_b.state[b]


def test_masters_and_moments_survive_a_checkpoint_in_float32(tmp_path):
    """torch's Optimizer.load_state_dict casts state to the parameter's dtype: a resume would round the
    masters to bf16 and continue from other weights than the uninterrupted run."""
    p = torch.nn.Parameter(_weights(2).to(torch.bfloat16))
    opt = MasterWeightAdamW([p], lr=1e-6)
    for _ in range(5):
        p.grad = torch.randn(64, 64).to(torch.bfloat16)
        opt.step()
    torch.save({"policy": {"w": p.detach().clone()}, "optimizer": opt.state_dict()}, tmp_path / "ckpt.pt")
    saved = safe_torch_load(tmp_path / "ckpt.pt")
    q = torch.nn.Parameter(saved["policy"]["w"].clone())
    resumed = MasterWeightAdamW([q], lr=1e-6)
    resumed.load_state_dict(saved["optimizer"])
    assert {k: v.dtype for k, v in resumed.state[q].items()} == {k: torch.float32 for k in ("step", "master", "exp_avg",
                                                                                            "exp_avg_sq")}
    for _ in range(3):
        g = torch.randn(64, 64).to(torch.bfloat16)
        p.grad, q.grad = g.clone(), g.clone()
        opt.step()
        resumed.step()
    assert torch.equal(resumed.state[q]["master"], opt.state[p]["master"]) and torch.equal(p, q)


def test_a_bf16_run_moves_its_weights_at_a_small_learning_rate(run_train):
    """The real call path: a micro-world OPD run with the policy in bf16 at lr 1e-6. Its checkpoint holds a
    float32 master per weight, the weights are the masters rounded, and the masters moved almost everywhere
    (without them about 2% of the bf16 weights moved)."""
    from replaylab.training.build import load_policy
    from replaylab.training.runs import latest_checkpoint, load_checkpoint

    overrides = ["model.dtype=bfloat16", "rollout.engine=hf", "trainer.lr=1e-6", "eval=none", "eval.probe_size=0"]
    model, _ = load_policy(to_object(run_train.config(overrides)), torch.device("cpu"))
    params = [name for name, p in model.named_parameters() if p.requires_grad]  # the optimizer's order
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    _, run = run_train(overrides)
    ckpt = load_checkpoint(latest_checkpoint(run))
    states = ckpt["optimizer"]["state"]
    assert len(states) == len(params) and all(s["master"].dtype == torch.float32 for s in states.values())
    moved = total = 0
    for index, name in enumerate(params):
        master = states[index]["master"]
        assert torch.equal(ckpt["policy"][name], master.to(torch.bfloat16)), name
        moved += int((master != start[name].float()).sum())
        total += master.numel()
    assert moved / total > 0.9, moved / total


@pytest.mark.parametrize("flag", ["amsgrad", "maximize"])
def test_variants_the_master_step_does_not_implement_are_refused(flag):
    p = torch.nn.Parameter(_weights(3).to(torch.bfloat16))
    opt = MasterWeightAdamW([p], lr=1e-3, **{flag: True})
    p.grad = torch.ones_like(p)
    with pytest.raises(ValueError, match="plain AdamW"):
        opt.step()
