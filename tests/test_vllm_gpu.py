"""VLLMGenerator against the transformers path, on the tiny world's student (gpu-marked).

Skipped (with the reason) when there is no CUDA device or the `vllm` extra is not installed; the
skip logic lives here so tests/conftest.py stays engine-agnostic. On CPU two tests run: the module
imports without vllm and constructing the generator names the extra; and the generator's glue
(requests, seeds, grouping, parsing, lazy weight push) runs against a fake `vllm` module.

What the GPU tests pin down, each against transformers on the same weights:
* behaviour log-probs equal log-softmax(logits / T) of the sampled tokens (T = 1 and T = 0.7),
  i.e. vLLM's `processed_logprobs` mode is the tempered distribution HFGenerator reports;
* greedy tokens equal HFGenerator's; truncation flags, versions and ids follow HFGenerator's rules;
* equal seeds give equal samples;
* `sync_weights` makes the engine sample from updated weights (greedy tokens and log-probs match
  the updated transformers model, and differ from the old ones).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from replaylab.rollout.base import SamplingParams

HAS_CUDA = torch.cuda.is_available()
HAS_VLLM = importlib.util.find_spec("vllm") is not None
gpu = [
    pytest.mark.gpu,
    pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU"),
    pytest.mark.skipif(not HAS_VLLM, reason="needs the vllm extra (pip install 'replaylab[vllm]')"),
]


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed: the missing-extra error cannot be shown")
def test_module_imports_without_vllm_and_names_the_extra():
    from replaylab.rollout import vllm as module  # importing needs no vllm

    with pytest.raises(ImportError, match=r"replaylab\[vllm\]"):
        module.VLLMGenerator("unused", tokenizer=None)
    assert module.request_seed(3, 0) != module.request_seed(3, 1) == module.request_seed(3, 1)


class FakeVLLM:
    """A stand-in `vllm` module with 0.33's call shapes (LLM.generate with per-request
    SamplingParams, CompletionOutput.token_ids/logprobs/finish_reason, collective_rpc with a
    callable, reset_prefix_cache). It checks replaylab's glue on CPU, not vLLM itself."""

    __version__ = "0.33.0"
    EOS = 3

    def __init__(self):
        self.engines = []
        fake = self

        class SamplingParams:
            def __init__(self, **kw):
                self.__dict__.update(kw)

        class LLM:
            def __init__(self, **kw):
                self.kwargs, self.loaded, self.cache_resets = kw, [], 0
                fake.engines.append(self)

            def generate(self, requests, sampling, use_tqdm=True):
                import random
                from types import SimpleNamespace as NS

                outs = []
                for req, sp in zip(requests, sampling, strict=True):
                    rng = random.Random(sp.seed)
                    ids = []
                    while len(ids) < sp.max_tokens:
                        ids.append(rng.choice([FakeVLLM.EOS, 7, 8, 9, 10]))
                        if ids[-1] in sp.stop_token_ids:
                            break
                    lps = [{t: NS(logprob=-0.1 * (j + 1), rank=1)} for j, t in enumerate(ids)]
                    # vLLM v1's check_stop tests the length cap before the stop tokens
                    reason = "length" if len(ids) >= sp.max_tokens else "stop"
                    outs.append(NS(prompt_token_ids=req["prompt_token_ids"],
                                   outputs=[NS(token_ids=ids, logprobs=lps, finish_reason=reason)]))
                return outs

            def collective_rpc(self, method, args=(), kwargs=None):
                from types import SimpleNamespace as NS

                engine = self
                worker = NS(model_runner=NS(model=NS(load_weights=lambda weights: engine.loaded.extend(weights))))
                return [method(worker, *args, **(kwargs or {}))]

            def reset_prefix_cache(self):
                self.cache_resets += 1

        self.SamplingParams, self.LLM = SamplingParams, LLM


def test_vllm_generator_glue_on_a_fake_engine(monkeypatch):
    """CPU: prompts x n requests with per-request seeds, grouping, truncation, log-prob extraction,
    version tags and ids, engine options, lazy weight push of HF-named full tensors."""
    import os
    import sys

    from transformers import Qwen3Config, Qwen3ForCausalLM

    from replaylab.rollout.vllm import LOGPROBS_MODE, VLLMGenerator, request_seed
    from replaylab.types import Prompt

    fake = FakeVLLM()
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(os, "environ", dict(os.environ))  # _colocated_env writes; restored after
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(key, None)

    class Tok:
        eos_token_id = FakeVLLM.EOS

    gen = VLLMGenerator("/models/student", Tok(), dtype="float32", seed=0)
    gen.device = torch.device("cpu")  # the fake engine lives on the CPU
    llm = fake.engines[0]
    assert llm.kwargs["logprobs_mode"] == LOGPROBS_MODE == "processed_logprobs"
    assert llm.kwargs["distributed_executor_backend"] == "external_launcher" and llm.kwargs["tensor_parallel_size"] == 1
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and os.environ["WORLD_SIZE"] == "1"

    prompts = [Prompt(f"u{i}", "", (1, 2, i + 4), "0") for i in range(3)]
    params = SamplingParams(max_new_tokens=5, temperature=0.8, n=2)
    groups = gen.generate(prompts, params, seed=9)
    assert [len(g) for g in groups] == [2, 2, 2] and all(s.prompt is p for g, p in zip(groups, prompts) for s in g)
    flat = [s for g in groups for s in g]
    for i, s in enumerate(flat):
        assert s.sample_id == f"fresh-v0-s9-{i}" and s.policy_version == 0
        assert s.truncated == (s.response_ids[-1].item() != FakeVLLM.EOS)
        assert s.truncated == (s.num_tokens == 5 and FakeVLLM.EOS not in s.response_ids.tolist())
        assert torch.allclose(s.behaviour_logprobs, -0.1 * torch.arange(1, s.num_tokens + 1, dtype=torch.float32))
    again = [s.response_ids.tolist() for g in gen.generate(prompts, params, seed=9) for s in g]
    assert again == [s.response_ids.tolist() for s in flat]
    assert gen.tokens_generated == 2 * sum(s.num_tokens for s in flat)
    assert request_seed(9, 0) != request_seed(9, 1)
    # an EOS drawn as the budget's last token: finish_reason "length", yet a complete response
    at_budget = [s for seed in range(20) for g in gen.generate(prompts, params, seed=seed) for s in g
                 if s.num_tokens == 5 and s.response_ids[-1].item() == FakeVLLM.EOS]
    assert at_budget and not any(s.truncated for s in at_budget)

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, head_dim=4))
    gen.sync_weights(model, 3)
    gen.sync_weights(model, 4)  # two updates, one push
    assert llm.loaded == [] and llm.cache_resets == 0  # lazy: nothing pushed yet
    groups = gen.generate(prompts[:1], params, seed=1)
    assert [name for name, _ in llm.loaded] == list(model.state_dict())
    assert all(torch.equal(t, model.state_dict()[n]) for n, t in llm.loaded)
    assert llm.cache_resets == 1 and groups[0][0].sample_id.startswith("fresh-v4-")
    assert gen.generate([], params, seed=1) == [] and llm.cache_resets == 1

    with pytest.warns(UserWarning, match="truncated"):
        gen.generate(prompts[:1], SamplingParams(max_new_tokens=3, temperature=1.0, top_k=5), seed=0)
    with pytest.raises(ValueError, match="tensor_parallel_size=2"):
        VLLMGenerator("/models/student", Tok(), tensor_parallel_size=2)


def apply(marks):
    def deco(fn):
        for m in marks:
            fn = m(fn)
        return fn

    return deco


@pytest.fixture(scope="module")
def world():
    """The micro tiny world (student + tokenizer), the student in transformers on the GPU, one
    colocated engine for the module (vLLM's external launcher wants one engine per process)."""
    from replaylab.models.loading import load_causal_lm, load_tokenizer, resolve_path
    from replaylab.models.tiny_spec import TinyWorldConfig
    from replaylab.rollout.vllm import VLLMGenerator
    from replaylab.tasks.datasets import render_prompts, training_rows

    path = resolve_path("tiny://student", TinyWorldConfig(teacher_steps=60, student_step=30), progress=False)
    tok = load_tokenizer(path)
    model = load_causal_lm(path, "float32").cuda().eval()
    gen = VLLMGenerator(path, tok, dtype="float32", gpu_memory_utilization=0.3, enforce_eager=True, seed=0)
    prompts = render_prompts(training_rows("tiny_arith", 16, 1, None)[0], tok, "", False)
    return {"path": path, "tok": tok, "model": model, "gen": gen, "prompts": prompts}


def hf_logprobs(model, samples, pad_id, temperature):
    from replaylab.models.batching import score_logprobs

    return [lp for lp, _ in score_logprobs(model, samples, pad_id, 64, temperature)]


@apply(gpu)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_behaviour_logprobs_equal_transformers(world, temperature):
    gen, tok = world["gen"], world["tok"]
    groups = gen.generate(world["prompts"], SamplingParams(max_new_tokens=32, temperature=temperature, n=2), seed=11)
    samples = [s for g in groups for s in g]
    assert len(groups) == len(world["prompts"]) and all(len(g) == 2 for g in groups)
    ref = hf_logprobs(world["model"], samples, tok.pad_token_id, temperature)
    for s, r in zip(samples, ref):
        assert s.behaviour_logprobs.shape == (s.num_tokens,)
        assert torch.allclose(s.behaviour_logprobs, r, atol=2e-3), (s.behaviour_logprobs, r)
        eos = (s.response_ids == tok.eos_token_id).nonzero()
        assert s.truncated == (len(eos) == 0)  # HFGenerator's rule
        if len(eos):
            assert int(eos[0]) == s.num_tokens - 1  # stops right after the first EOS
        else:
            assert s.num_tokens == 32
        assert s.policy_version == gen.policy_version and s.source == "fresh"
    assert len({s.sample_id for s in samples}) == len(samples)


@apply(gpu)
def test_seeded_sampling_is_deterministic(world):
    params = SamplingParams(max_new_tokens=24, temperature=1.0, n=3)
    a = world["gen"].generate(world["prompts"][:4], params, seed=5)
    b = world["gen"].generate(world["prompts"][:4], params, seed=5)
    c = world["gen"].generate(world["prompts"][:4], params, seed=6)
    flat = lambda gs: [s.response_ids.tolist() for g in gs for s in g]  # noqa: E731
    assert flat(a) == flat(b)
    assert flat(a) != flat(c)


def greedy_hf(model, tok, prompts, n_tokens):
    from replaylab.rollout.hf import HFGenerator

    groups = HFGenerator(model, tok).generate(prompts, SamplingParams(max_new_tokens=n_tokens, temperature=0.0), seed=0)
    return [g[0].response_ids.tolist() for g in groups]


@apply(gpu)
def test_greedy_matches_transformers_and_sync_weights_updates_the_engine(world):
    gen, tok, model = world["gen"], world["tok"], world["model"]
    prompts = world["prompts"][:8]
    greedy = SamplingParams(max_new_tokens=24, temperature=0.0)
    before = [g[0].response_ids.tolist() for g in gen.generate(prompts, greedy, seed=0)]
    assert before == greedy_hf(model, tok, prompts, 24)

    original = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        with torch.no_grad():  # a large, deterministic change of every weight
            g = torch.Generator(device="cuda").manual_seed(0)
            for p in model.parameters():
                p.add_(0.5 * p.std() * torch.randn(p.shape, generator=g, device="cuda"))
        updated_hf = greedy_hf(model, tok, prompts, 24)
        assert updated_hf != before, "the perturbation should change greedy outputs"
        gen.sync_weights(model, version=1)
        groups = gen.generate(prompts, greedy, seed=0)
        assert [g[0].response_ids.tolist() for g in groups] == updated_hf
        samples = [g[0] for g in groups]
        assert all(s.policy_version == 1 and "-v1-" in s.sample_id for s in samples)
        ref = hf_logprobs(model, samples, tok.pad_token_id, 1.0)
        assert all(torch.allclose(s.behaviour_logprobs, r, atol=2e-3) for s, r in zip(samples, ref))
    finally:
        model.load_state_dict(original)
        gen.sync_weights(model, version=0)
        gen.flush()
    assert [g[0].response_ids.tolist() for g in gen.generate(prompts, greedy, seed=0)] == before


def test_rank0_evaluates_alone_after_a_sync_under_fsdp2(tmp_path):
    """rollout=vllm with trainer.distributed=fsdp2: model_for_scoring returned the sharded module and left the
    weight push pending, so rank 0's evaluation pushed (an all-gather) and probed (a sharded forward) alone while
    the other rank waited at the barrier: a hang until the process-group timeout at every evaluation (scale-out
    audit, item 2). Now every rank's call pushes and gathers a plain copy, which scores as the full model does."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = Path(__file__).parent / "scripts" / "vllm_fsdp_eval_check.py"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}",
                           str(script), "--out", str(tmp_path)], env={**env, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    logits = torch.load(tmp_path / "logits.pt")
    assert torch.allclose(logits["scoring"], logits["full"], atol=1e-6)
