"""What the rollout engines promise beyond their own maths (an audit of 2026-12-07): rollout=hf samples with
none of a checkpoint's hidden generation settings, rollout=fast refuses models it would decode imprecisely,
the inverse-CDF draw gives every token of a real vocabulary its share, and a vLLM request for full-length
rows does not stop at EOS."""

from __future__ import annotations

import copy

import pytest
import torch

from replaylab.config import ConfigError, to_object
from replaylab.models.batching import score_logprobs
from replaylab.models.lean import UnsupportedModel
from replaylab.rollout import sampling
from replaylab.rollout.base import SamplingParams
from replaylab.rollout.fast import FastGenerator
from replaylab.rollout.hf import HFGenerator
from test_rollout_fast import _model, _prompts, tok  # noqa: F401  (tok is a fixture)


def _ids(groups) -> list[list[int]]:
    return [s.response_ids.tolist() for g in groups for s in g]


def test_hf_samples_with_none_of_the_checkpoints_own_generation_settings(tok):
    """A checkpoint whose generation_config carries a repetition penalty, min-p, a minimum length and an
    n-gram ban: transformers would apply them to every generate call, while the behaviour log-probs (and
    rollout=fast) know nothing of them. rollout=hf must sample exactly as from a clean checkpoint."""
    clean = _model("qwen3", tok)
    dressed = copy.deepcopy(clean)
    g = dressed.generation_config
    g.repetition_penalty, g.min_p, g.min_new_tokens, g.no_repeat_ngram_size = 1.5, 0.3, 6, 2
    prompts = _prompts(tok)
    for params in (SamplingParams(20, temperature=0, n=2), SamplingParams(20, temperature=1.0, n=2)):
        want = HFGenerator(clean, tok).generate(prompts, params, seed=4)
        got = HFGenerator(dressed, tok).generate(prompts, params, seed=4)
        assert _ids(got) == _ids(want), params
        if params.temperature == 0:
            assert _ids(got) == _ids(FastGenerator(dressed, tok).generate(prompts, params, seed=4))
        else:  # and the log-probs are those of what was sampled
            samples = [s for grp in got for s in grp]
            for s, (logp, _) in zip(samples, score_logprobs(dressed, samples, tok.pad_token_id, 64, 1.0)):
                torch.testing.assert_close(s.behaviour_logprobs, logp, atol=1e-5, rtol=1e-5)
    assert dressed.generation_config.repetition_penalty == 1.5  # the checkpoint's own config is left as it was


def test_rollout_fast_refuses_a_bfloat16_model_by_config_and_by_construction(tok):
    from conftest import compose

    with pytest.raises(ConfigError, match=r"rollout\.engine.*model\.dtype=bfloat16"):
        to_object(compose(["model.dtype=bfloat16"]))
    to_object(compose(["model.dtype=bfloat16", "rollout=hf"]))  # rollout=hf decodes it
    with pytest.raises(UnsupportedModel, match="not float32.*rollout=hf"):
        FastGenerator(_model("qwen3", tok).to(torch.bfloat16), tok)


def test_every_token_of_a_real_vocabulary_can_be_drawn(monkeypatch):
    """151,936 entries, one token holding almost all the mass and the rest a long tail: a uniform aimed at
    the middle of a tail token's exact interval must draw that token. A float32 running sum gives such a
    token no interval at all (checked below: this test has power against the old sampler)."""
    V, tail = 151_936, [100_000, 140_000, 151_935]
    logits = torch.full((1, V), -16.0)
    logits[0, 7] = 4.0
    probs = torch.softmax(logits.double(), -1)[0]
    widths32 = probs.float().cumsum(-1).diff()
    assert all(widths32[t - 1] == 0 for t in tail)  # the old float32 sum: these tokens are never drawn
    cdf = probs.cumsum(-1)
    for token in tail:
        aim = (cdf[token - 1] + probs[token] / 2) / cdf[-1]
        monkeypatch.setattr(sampling.torch, "rand", lambda *shape, dtype, device, a=aim: torch.full(shape, float(a), dtype=dtype))
        drawn, logp = sampling.sample_next(logits, SamplingParams(1, temperature=1.0))
        assert int(drawn) == token
        torch.testing.assert_close(logp, torch.log_softmax(logits, -1)[0, [token]])


def test_a_vllm_request_for_full_length_rows_does_not_stop_at_eos(monkeypatch):
    import os
    import sys

    from replaylab.rollout.vllm import VLLMGenerator
    from replaylab.types import Prompt
    from test_vllm_gpu import FakeVLLM

    fake = FakeVLLM()
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(os, "environ", dict(os.environ))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(key, None)

    class Tok:
        eos_token_id = FakeVLLM.EOS

    gen = VLLMGenerator("/models/student", Tok(), dtype="float32", seed=0)
    gen.device = torch.device("cpu")
    prompts = [Prompt(f"u{i}", "", (1, 2, i + 4), "0") for i in range(4)]
    full = gen.generate(prompts, SamplingParams(30, temperature=1.0, ignore_eos=True), seed=1)
    assert all(s.num_tokens == 30 and s.truncated for g in full for s in g)
    natural = gen.generate(prompts, SamplingParams(30, temperature=1.0), seed=1)
    assert any(s.num_tokens < 30 and not s.truncated for g in natural for s in g)
