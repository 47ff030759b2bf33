"""replaylab.parallel on CPU: gloo, 2 ranks under torchrun, 1 thread each, a tiny float64 Qwen3.

The torchrun runs (tests/scripts/dist_train_check.py) take optimizer steps the way the trainer will
(gradient groups as global slices of the minibatch, each rank its share, group gradients read off
the synchronised .grad) and must reproduce the single-process run: weights, losses, per-group
gradient norms (the R-OPD statistic), greedy generation from the gathered copy. They also resume
from a sharded checkpoint and export it to a `from_pretrained` directory.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from replaylab import parallel as D
from replaylab.rollout.gathered import unwrapped_generation_copy
from replaylab.rollout.weight_sync import hf_name, iter_full_tensors

SCRIPT = Path(__file__).parent / "scripts" / "dist_train_check.py"
PROMPT = [5, 17, 33, 2, 9]  # the script's fixed generation prompt


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_check(mode: str, out: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("WORLD_SIZE", None)
    if mode == "none":
        cmd = [sys.executable, str(SCRIPT)]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}", str(SCRIPT)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd + ["--mode", mode, "--out", str(out)], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"{mode} run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    result = json.loads((out / "result.json").read_text())
    result["wall_seconds"] = time.perf_counter() - t0
    result["weights"] = torch.load(out / "weights.pt")
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each mode runs once per module, lazily."""
    root = tmp_path_factory.mktemp("dist")
    cache: dict[str, dict] = {}

    def get(mode: str) -> dict:
        if mode not in cache:
            cache[mode] = run_check(mode, root / mode)
            cache[mode]["out"] = root / mode
        return cache[mode]

    return get


@pytest.mark.parametrize("mode", ["ddp", "fsdp2"])
def test_two_ranks_match_single_process(runs, mode):
    ref, got = runs("none"), runs(mode)
    assert got["world_size"] == 2
    assert got["wall_seconds"] < 60, f"torchrun {mode} took {got['wall_seconds']:.1f} s"
    # float64 model: any logic error would show far above reduction-order noise (~1e-14).
    weight_diff = max(float((got["weights"][k] - ref["weights"][k]).abs().max()) for k in ref["weights"])
    assert sorted(got["weights"]) == sorted(ref["weights"])
    assert weight_diff < 1e-9, weight_diff
    for s_got, s_ref in zip(got["steps"], ref["steps"], strict=True):
        assert s_got["loss"] == pytest.approx(s_ref["loss"], rel=1e-10)
        assert s_got["total_norm"] == pytest.approx(s_ref["total_norm"], rel=1e-10)
        # per-group gradient norms from the synchronised gradient: world-size invariant
        assert s_got["group_norms"] == pytest.approx(s_ref["group_norms"], rel=1e-10)
    assert got["gen_final"] == ref["gen_final"]
    assert got["gen_at_ckpt"] == ref["gen_at_ckpt"]
    assert got["gen_lengths"] == [4, 9]  # ranks generated different lengths without deadlock
    assert got["stream_matches_full"] and got["full_keys"] == len(ref["weights"])
    assert got["nonzero_rank_ok"] == [True, True]  # rank 1's full_state_dict is {}
    assert got["resume_max_diff"] == 0.0  # load_sharded into a fresh model resumes exactly
    # GatheredGenerator: one prompt sharded over 2 ranks (rank 0 has none) samples what one process samples
    assert got["gen_sampled"] == ref["gen_sampled"] and got["policy_version"] == 4
    assert got["gen5_groups"] == [2] * 5
    # sharded_map through the wrapped model reproduces the generation copy's behaviour log-probs
    assert got["sharded_score_max_diff"] < 1e-10


def test_sharded_checkpoint_exports_to_from_pretrained(runs, tmp_path):
    from transformers import AutoModelForCausalLM

    fsdp = runs("fsdp2")
    out = D.export_to_hf(fsdp["out"] / "ckpt", tmp_path / "hf", fsdp["out"] / "base")
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.dtype == torch.float64  # the checkpoint's precision is kept
    ids = model.generate(input_ids=torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
                         do_sample=False, max_new_tokens=8, eos_token_id=None, pad_token_id=0)
    assert ids[0, len(PROMPT):].tolist() == fsdp["gen_at_ckpt"]


# ------------------------------------------------------------------ single-process behaviour
def tiny(seed: int = 0) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=8, max_position_embeddings=32, tie_word_embeddings=True)
    return Qwen3ForCausalLM(cfg).double()


def test_shard_is_contiguous_deterministic_and_covers_everything():
    items = list(range(10))
    parts = [D.shard(items, r, 3) for r in range(3)]
    assert parts == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert [x for p in parts for x in p] == items
    assert D.shard(items[:1], 0, 2) == [] and D.shard(items[:1], 1, 2) == [0]
    with pytest.raises(ValueError):
        D.shard_bounds(4, 2, 2)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_single_process_helpers_are_identities(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("SUBMITIT_EXECUTOR", raising=False)
    info = D.init_from_env("cpu")
    assert (info.rank, info.world_size, info.backend) == (0, 1, None)
    assert D.rank() == 0 and D.world_size() == 1 and D.is_main() and not D.is_distributed()
    assert D.all_reduce_sum(2.5) == 2.5 and D.all_reduce_mean([1.0, 3.0]) == [1.0, 3.0]
    assert D.all_gather_objects([1, 2]) == [1, 2] and D.broadcast_object("x") == "x"
    assert D.sharded_map(lambda c: [x * 10 for x in c], [1, 2, 3], 2) == [10, 20, 30]
    assert D.grad_sync_scale() == 1
    assert not D.export_submitit_env()
    model = tiny()
    assert D.wrap_model(model, "none", "cpu") is model
    assert unwrapped_generation_copy(model) is model  # plain models are their own generation copy
    with pytest.raises(RuntimeError, match="torchrun"):
        D.wrap_model(model, "ddp", "cpu")
    with pytest.raises(ValueError, match="unknown distributed mode"):
        D.wrap_model(model, "zero3", "cpu")


def test_init_from_env_explains_a_half_set_environment(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(RuntimeError, match="MASTER_ADDR"):
        D.init_from_env("cpu")


def test_gradient_groups_equal_per_group_autograd_grad():
    """The backward-based group gradients equal what the single-process trainer computes today
    (one torch.autograd.grad per group), and .grad ends as the sum of the groups."""
    model = tiny()
    params = [p for p in model.parameters()]
    g = torch.Generator().manual_seed(0)
    parts = [torch.randint(0, 32, (3, 7), generator=g) for _ in range(3)]

    def loss(ids):
        logits = model(input_ids=ids).logits[:, :-1]
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 32), ids[:, 1:].reshape(-1))

    expected = [torch.autograd.grad(loss(ids), params) for ids in parts]
    groups = D.GradientGroups(params)
    for ids, exp in zip(parts, expected):
        loss(ids).backward()
        got = groups.take()
        assert all(torch.allclose(a, b, atol=1e-12) for a, b in zip(got, exp))
        assert D.grad_norm(got) == pytest.approx(float(torch.sqrt(sum((e ** 2).sum() for e in exp))), rel=1e-12)
    total = [sum(e[i] for e in expected) for i in range(len(params))]
    assert all(torch.allclose(p.grad, t, atol=1e-12) for p, t in zip(params, total))
    norm = D.clip_grad_norm(params, 0.0)  # no clipping, norm returned
    assert norm == pytest.approx(D.grad_norm([p.grad for p in params]), rel=1e-12)


def test_iter_full_tensors_gives_hf_names_and_copies_cast():
    model = tiny()
    named = dict(iter_full_tensors(model, dtype=torch.float32))
    assert set(named) == set(model.state_dict())
    assert all(t.dtype == torch.float32 for t in named.values())
    assert hf_name("model.layers.0._checkpoint_wrapped_module.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight"
    assert hf_name("_orig_mod.lm_head.weight") == "lm_head.weight"


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_save_and_load_sharded_in_one_process(tmp_path):
    model, other = tiny(0), tiny(1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    D.save_sharded(model, opt, tmp_path / "ck", extra={"update": 7})
    opt2 = torch.optim.AdamW(other.parameters(), lr=1e-2)
    assert D.load_sharded(other, opt2, tmp_path / "ck") == {"update": 7}
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values()))
    s1, s2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert all(torch.equal(s1[k]["exp_avg"], s2[k]["exp_avg"]) for k in s1)
    with pytest.raises(FileNotFoundError, match="metadata"):
        D.load_sharded(other, opt2, tmp_path)
