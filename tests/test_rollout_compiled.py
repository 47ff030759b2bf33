"""rollout.compile: the inductor-compiled decode step samples what the trainer assumes, like the eager one.

Greedy decoding equals rollout=hf token for token, sampled behaviour log-probs equal the trainer's
recomputation, the same seed gives the same samples, no step reads a cache slot not yet written, and
one compiled graph serves batches that shrink as rows finish and other cache lengths from the first call
on (a recompile per shape would cost seconds per generate call).
Then through the real call path: a training run with rollout.compile=true (the config error for it
under another engine is in tests/test_config_checks.py). Compiling takes ~10-20 s per model shape on
2 cores; the models are the ones tests/test_rollout_fast.py builds."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from replaylab.models.batching import score_logprobs
from replaylab.rollout.base import SamplingParams
from replaylab.rollout.fast import FastGenerator
from replaylab.rollout.hf import HFGenerator
from replaylab.types import Prompt
from conftest import load_rows
from test_rollout_fast import _model, _prompts, tok  # noqa: F401  (tok is a fixture)

_dynamo = pytest.importorskip("torch._dynamo")
# inductor's own import of TorchScript helpers warns; nothing this project calls
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


def _flat(groups):
    return [s for g in groups for s in g]


# q/k norms under both weight layouts (oneDNN's (out, in), BLAS's (in, out)); q/k/v biases without norms.
# Each case compiles a graph (~20 s cold on 2 cores), so not every combination runs.
@pytest.mark.parametrize("kind, kernel", [("qwen3", "onednn"), ("qwen3", "blas"), ("qwen2", "blas")])
def test_compiled_greedy_equals_hf_token_for_token(tok, kind, kernel):
    from replaylab.models import kernels

    if kernel == "onednn" and not kernels.onednn_available():
        pytest.skip("this torch build has no oneDNN linear kernel")
    kernels.use(kernel)
    model = _model(kind, tok)
    params = SamplingParams(max_new_tokens=20, temperature=0, n=2)
    hf = _flat(HFGenerator(model, tok).generate(_prompts(tok), params, seed=0))
    compiled = _flat(FastGenerator(model, tok, compile=True).generate(_prompts(tok), params, seed=0))
    for a, b in zip(hf, compiled):
        assert torch.equal(a.response_ids, b.response_ids)
        torch.testing.assert_close(a.behaviour_logprobs, b.behaviour_logprobs, atol=1e-5, rtol=1e-5)
    assert len({s.num_tokens for s in compiled}) > 1, "no row stopped early: the shrinking batch went untested"


def test_compiled_logprobs_equal_the_trainers_recomputation_and_are_seeded(tok):
    model = _model("qwen3", tok)
    gen = FastGenerator(model, tok, compile=True)
    params = SamplingParams(24, temperature=0.8, top_p=0.95, n=3)
    a, b = (_flat(gen.generate(_prompts(tok), params, seed=7)) for _ in range(2))
    recomputed = score_logprobs(model, a, tok.pad_token_id, 64, params.temperature)
    for s, (logp, _) in zip(a, recomputed):
        torch.testing.assert_close(s.behaviour_logprobs, logp, atol=1e-5, rtol=1e-5)
    assert [s.response_ids.tolist() for s in a] == [s.response_ids.tolist() for s in b]
    assert all(torch.equal(x.behaviour_logprobs, y.behaviour_logprobs) for x, y in zip(a, b))
    eager = _flat(FastGenerator(model, tok).generate(_prompts(tok), params, seed=7))
    assert sum(torch.equal(x.response_ids, y.response_ids) for x, y in zip(a, eager)) >= 0.9 * len(a), \
        "the compiled step samples another distribution than the eager one"


@pytest.mark.parametrize("compile", [False, True])
def test_decoding_reads_only_the_cache_slots_written_so_far(tok, monkeypatch, compile):
    """The KV cache is allocated uninitialised: a step that read a slot not yet written (even masked,
    0 x NaN is NaN) would not give these tokens. Every fresh cache is filled with NaN here."""
    from replaylab.rollout.decoder import LeanDecoder

    new_cache = LeanDecoder.new_cache

    def poisoned(self, batch, length):
        cache = new_cache(self, batch, length)
        for t in cache.k + cache.v:
            t.fill_(float("nan"))
        return cache

    model = _model("qwen3", tok)
    params = SamplingParams(max_new_tokens=20, temperature=0, n=2)
    clean = _flat(FastGenerator(model, tok, compile=compile).generate(_prompts(tok), params, seed=0))
    monkeypatch.setattr(LeanDecoder, "new_cache", poisoned)
    out = _flat(FastGenerator(model, tok, compile=compile).generate(_prompts(tok), params, seed=0))
    assert [s.response_ids.tolist() for s in out] == [s.response_ids.tolist() for s in clean]
    assert all(torch.isfinite(s.behaviour_logprobs).all() for s in out)
    assert len({s.num_tokens for s in out}) > 1, "no row stopped early: compaction's copies went untested"


def test_one_graph_serves_shrinking_batches_and_other_cache_lengths(tok, monkeypatch):
    """One graph from the first call on, even when that call's first key mask is as wide as its batch
    (12 prompts of width 11): dynamo's duck sizing would otherwise tie the two sizes and compile again."""
    from replaylab.rollout import compiled

    _dynamo.reset()  # trace afresh in this test (inductor's disk cache keeps it to seconds)
    monkeypatch.setattr(compiled, "_steps", {})
    model = _model("qwen3", tok)
    gen = FastGenerator(model, tok, compile=True)
    graphs = _dynamo.utils.counters["stats"]["unique_graphs"]
    same_width = [Prompt(f"w{i}", "x", (5 + i % 7,) * 11, "0") for i in range(12)]
    gen.generate(same_width, SamplingParams(12, temperature=1.0), seed=0)
    lengths = set()
    for n, budget, seed in [(12, 30, 1), (7, 18, 2), (3, 40, 3)]:  # other batch sizes, cache lengths and stops
        out = _flat(gen.generate(_prompts(tok, n), SamplingParams(budget, temperature=1.0), seed=seed))
        lengths |= {s.num_tokens for s in out}
    assert len(lengths) > 3
    assert _dynamo.utils.counters["stats"]["unique_graphs"] == graphs + 1, "a batch or cache shape compiled the step again"


def test_a_training_run_with_rollout_compile(run_train):
    """Through the trainer: rollouts and the update-0 evaluation come from the compiled step, and the
    run trains on them (finite losses) with the flag recorded in its config."""
    summary, run_dir = run_train(["rollout.compile=true", "eval.at_start=true"])
    rows = load_rows(run_dir)
    losses = [r["value"] for r in rows if r["split"] == "train" and r["metric"] == "loss"]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
    assert any(r["split"] == "eval" and r["update"] == 0 for r in rows)
    assert OmegaConf.load(run_dir / "config.yaml").rollout.compile is True
