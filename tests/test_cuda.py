"""The CUDA path without vllm (gpu-marked; skipped where torch sees no GPU): the lean decoder on a GPU
decodes what transformers' generate decodes there and what it decodes on the CPU, its sampled
log-probs are the trainer's recomputation on the GPU, and OPD and GRPO train, resume and record the
GPU in their rows through the real entry point."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from conftest import load_rows
from replaylab.models.batching import score_logprobs
from replaylab.models.tiny_tokenizer import build_tiny_tokenizer
from replaylab.rollout.base import SamplingParams
from replaylab.rollout.fast import FastGenerator
from replaylab.rollout.hf import HFGenerator
from test_resume import uninterrupted_and_resumed_rows
from test_rollout_fast import _model, _prompts

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def _flat(groups):
    return [s for g in groups for s in g]


@pytest.mark.parametrize("kind", ["qwen3", "qwen2", "llama"])
def test_greedy_on_cuda_equals_generate_on_cuda_and_the_cpu(tok, kind):
    cpu_model = _model(kind, tok)
    gpu_model = copy.deepcopy(cpu_model).cuda()
    prompts, params = _prompts(tok), SamplingParams(max_new_tokens=20, temperature=0, n=2)
    hf = _flat(HFGenerator(gpu_model, tok).generate(prompts, params, seed=0))
    fast = _flat(FastGenerator(gpu_model, tok).generate(prompts, params, seed=0))
    cpu = _flat(FastGenerator(cpu_model, tok).generate(prompts, params, seed=0))
    for a, b, c in zip(hf, fast, cpu):
        assert torch.equal(a.response_ids, b.response_ids) and torch.equal(b.response_ids, c.response_ids)
        torch.testing.assert_close(a.behaviour_logprobs, b.behaviour_logprobs, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(b.behaviour_logprobs, c.behaviour_logprobs, atol=1e-4, rtol=1e-4)
    assert len({s.num_tokens for s in fast}) > 1, "no row stopped early: row dropping went untested on CUDA"


def test_sampled_logprobs_are_the_trainers_recomputation_on_cuda(tok):
    model = _model("qwen3", tok).cuda()
    prompts, params = _prompts(tok), SamplingParams(max_new_tokens=20, temperature=1.0, n=4)
    gen = FastGenerator(model, tok)
    state = torch.cuda.get_rng_state()
    samples = _flat(gen.generate(prompts, params, seed=3))
    assert torch.equal(torch.cuda.get_rng_state(), state), "generating changed the caller's CUDA random state"
    again = _flat(gen.generate(prompts, params, seed=3))
    assert all(torch.equal(a.response_ids, b.response_ids) for a, b in zip(samples, again)), "seeded CUDA sampling differs"
    recomputed = score_logprobs(model, samples, tok.pad_token_id, 64)
    for s, (lp, _) in zip(samples, recomputed):
        torch.testing.assert_close(s.behaviour_logprobs, lp.cpu(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("extra", [["trainer=opd"], ["trainer=grpo", "teacher=none", "trainer.samples_per_prompt=4"]],
                         ids=["opd", "grpo"])
def test_trains_on_cuda_and_records_the_gpu(run_train, extra):
    summary, path = run_train(extra + ["trainer.device=cuda"])
    assert summary["updates"] == 3
    rows = load_rows(path)
    train = [r["value"] for r in rows if r["split"] == "train" and r["metric"] in ("reverse_kl", "reward")]
    assert len(train) == 3 and all(math.isfinite(v) for v in train)
    gpu = "gpu=" + "_".join(torch.cuda.get_device_name().split())
    assert all(gpu in r["versions"] for r in rows), rows[0]["versions"]


def test_sigkill_then_rerun_on_cuda_continues_the_run(tmp_path):
    """test_resume's kill-and-rerun on CUDA: the rerun resumes from the mid-run checkpoint and writes
    the rows of an uninterrupted run. CUDA kernels may sum floats in another order from run to run
    (atomics), so values are compared to float tolerance and the keys exactly."""
    expected, got = uninterrupted_and_resumed_rows(tmp_path, ["trainer=opd", "trainer.device=cuda"])
    print(f"CUDA kill-and-rerun rows bitwise equal to the uninterrupted run's: {got == expected}")
    key = lambda r: {k: v for k, v in r.items() if k != "value"}  # noqa: E731
    assert [key(r) for r in got] == [key(r) for r in expected]
    for a, b in zip(got, expected):
        assert a["value"] == pytest.approx(b["value"], rel=1e-4, abs=1e-5), (a, b)
