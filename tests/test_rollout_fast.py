"""rollout=fast samples what the trainer assumes: greedy decoding equals rollout=hf token for token,
behaviour log-probs equal the trainer's recomputation, top-k/top-p draw from transformers' warped
distribution, and runs are seeded. Random-init Qwen3 / Qwen2 / Llama models on the tiny tokenizer."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from replaylab.models.batching import score_logprobs
from replaylab.models.tiny_tokenizer import build_tiny_tokenizer
from replaylab.rollout.base import NonFiniteLogits, SamplingParams
from replaylab.models.lean import MIN_PRUNED_ROWS, UnsupportedModel
from replaylab.rollout.fast import FastGenerator
from replaylab.rollout.hf import HFGenerator
from replaylab.rollout.sampling import sample_next
from replaylab.types import Prompt


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def _model(kind: str, tok):
    common = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    torch.manual_seed(0)
    if kind == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=16, **common))
    elif kind == "qwen2":  # biases on q/k/v, no q/k norm
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common))
    with torch.no_grad():  # sharper than init so greedy has no near-ties
        for p in model.parameters():
            p.mul_(6.0 if p.ndim == 2 else 1.0)
        # EOS along the mean final hidden state: likely at some positions, so rows stop at different steps
        ids = torch.randint(4, len(tok), (8, 12))
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[-1]
        model.lm_head.weight[tok.eos_token_id] = hidden.mean((0, 1)) * 0.9
    return model.eval()


def _prompts(tok, n: int = 12) -> list[Prompt]:
    out = []
    for i in range(n):
        text = f"{i * 7 % 50}+{i * 3 + 1}*{i % 4 + 2}=?"[: 4 + i % 6]  # varying lengths: left padding
        ids = tuple(tok(text, add_special_tokens=False)["input_ids"])
        out.append(Prompt(f"p{i}", text, ids, "0"))
    return out


@pytest.mark.parametrize("kind", ["qwen3", "qwen2", "llama"])
def test_greedy_equals_hf_token_for_token(tok, kind, matmul_kernel):
    model = _model(kind, tok)
    prompts = _prompts(tok)
    params = SamplingParams(max_new_tokens=20, temperature=0, n=2)
    hf = HFGenerator(model, tok).generate(prompts, params, seed=0)
    fast = FastGenerator(model, tok).generate(prompts, params, seed=0)
    for a, b in zip([s for g in hf for s in g], [s for g in fast for s in g]):
        assert torch.equal(a.response_ids, b.response_ids)
        assert a.truncated == b.truncated
        torch.testing.assert_close(a.behaviour_logprobs, b.behaviour_logprobs, atol=1e-5, rtol=1e-5)
    lengths = {s.num_tokens for g in fast for s in g}
    assert len(lengths) > 1, "no row stopped early: the EOS / row-dropping path went untested"


@pytest.mark.parametrize("kind", ["qwen3", "qwen2"])
@pytest.mark.parametrize("params", [SamplingParams(24, temperature=1.0, n=3), SamplingParams(24, temperature=0.7, top_p=0.9, top_k=20)])
def test_behaviour_logprobs_equal_the_trainers_recomputation(tok, kind, params, matmul_kernel):
    model = _model(kind, tok)
    samples = [s for g in FastGenerator(model, tok).generate(_prompts(tok), params, seed=3) for s in g]
    recomputed = score_logprobs(model, samples, tok.pad_token_id, 64, params.temperature)
    for s, (logp, _) in zip(samples, recomputed):
        torch.testing.assert_close(s.behaviour_logprobs, logp, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["qwen3", "qwen2"])
def test_the_pruned_prefill_computes_the_full_prefills_numbers(tok, kind, monkeypatch, matmul_kernel):
    """A prefill of at least MIN_PRUNED_ROWS prompts runs its last layer's MLP on the last position only;
    the logits, every cached key and value and the sampled rows are the full layer's to the bit."""
    from replaylab.rollout import decoder as decoder_module

    gen = FastGenerator(_model(kind, tok), tok)
    gen.decoder.ensure_packed()
    prompts, params = _prompts(tok, 20), SamplingParams(16, temperature=1.0, n=2)
    P = max(len(p.token_ids) for p in prompts)
    assert len({p.token_ids for p in prompts}) >= MIN_PRUNED_ROWS and P > 1
    rows, dense_add = [], decoder_module.kernels.dense_add
    monkeypatch.setattr(decoder_module.kernels, "dense_add",
                        lambda r, x, w: (rows.append(len(x)) if w is gen.decoder.layers[-1].down else None) or dense_add(r, x, w))
    out = {}
    for prune in (False, True):
        gen.decoder.prune_prefill = prune
        rows.clear()
        cache, logits, _, _ = gen._prefill(prompts, 8)
        assert rows == [len(prompts) * (1 if prune else P)]
        sampled = [(s.response_ids, s.behaviour_logprobs) for g in gen.generate(prompts, params, seed=1) for s in g]
        out[prune] = (logits, [k[:, :, :P] for k in cache.k] + [v[:, :P] for v in cache.v], sampled)
    (full, full_cache, full_rows), (pruned, pruned_cache, pruned_rows) = out[False], out[True]
    assert torch.equal(full, pruned)
    assert all(torch.equal(a, b) for a, b in zip(full_cache, pruned_cache))
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(full_rows, pruned_rows))


def test_weights_follow_the_optimizer(tok):
    """After an in-place update the generator must sample from the new weights, not a stale pack."""
    model = _model("qwen3", tok)
    gen = FastGenerator(model, tok)
    params = SamplingParams(16, temperature=0)
    before = gen.generate(_prompts(tok), params, seed=0)
    with torch.no_grad():
        model.lm_head.weight.add_(torch.randn_like(model.lm_head.weight) * 3)
    gen.sync_weights(model, 1)
    after = gen.generate(_prompts(tok), params, seed=0)
    reference = HFGenerator(model, tok).generate(_prompts(tok), params, seed=0)
    assert [g[0].response_ids.tolist() for g in after] == [g[0].response_ids.tolist() for g in reference]
    assert [g[0].response_ids.tolist() for g in after] != [g[0].response_ids.tolist() for g in before]
    assert after[0][0].policy_version == 1


def test_seeded(tok):
    model = _model("qwen3", tok)
    gen = FastGenerator(model, tok)
    params = SamplingParams(16, temperature=1.0, n=2)
    a, b, c = (gen.generate(_prompts(tok), params, seed=s) for s in (5, 5, 6))
    ids = lambda out: [s.response_ids.tolist() for g in out for s in g]
    assert ids(a) == ids(b) and ids(a) != ids(c)


@pytest.mark.parametrize("params", [SamplingParams(1, temperature=0.8), SamplingParams(1, temperature=1.3, top_k=5),
                                    SamplingParams(1, temperature=1.0, top_p=0.7), SamplingParams(1, temperature=0.9, top_k=8, top_p=0.8)])
def test_draws_follow_transformers_warped_distribution(params):
    """Empirical frequencies over many draws match the distribution transformers' warpers define
    (total variation < 0.01), and the log-prob returned is the untruncated log-softmax(logits / T)."""
    torch.manual_seed(0)
    logits = torch.randn(1, 16) * 2
    warped = TemperatureLogitsWarper(params.temperature)(None, logits.clone())
    if params.top_k:
        warped = TopKLogitsWarper(params.top_k)(None, warped)
    if params.top_p < 1:
        warped = TopPLogitsWarper(params.top_p)(None, warped)
    target = torch.softmax(warped, -1)[0]
    draws = 200_000
    tokens, logp = sample_next(logits.expand(draws, 16).contiguous(), params)
    freq = torch.bincount(tokens, minlength=16).float() / draws
    assert 0.5 * (freq - target).abs().sum() < 0.01
    assert freq[target == 0].sum() == 0  # nothing outside top-k/top-p is ever drawn
    torch.testing.assert_close(logp[:50], torch.log_softmax(logits / params.temperature, -1)[0, tokens[:50]])


def test_a_wrong_distribution_fails_the_frequency_check():
    """The check above has power: draws at the wrong temperature are far outside its bound."""
    torch.manual_seed(0)
    logits = torch.randn(1, 16) * 2
    tokens, _ = sample_next(logits.expand(200_000, 16).contiguous(), SamplingParams(1, temperature=1.0))
    freq = torch.bincount(tokens, minlength=16).float() / 200_000
    assert 0.5 * (freq - torch.softmax(logits / 0.8, -1)[0]).abs().sum() > 0.01


def test_unsupported_architecture_names_the_fallback(tok):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2))
    with pytest.raises(UnsupportedModel, match="rollout=hf"):
        FastGenerator(model, tok)


@pytest.mark.parametrize("temperature", [0, 1.0])
def test_non_finite_weights_raise_non_finite_logits(tok, temperature):
    """A policy whose weights went NaN must not hand out samples: the check runs once per batch on
    the sampled log-probs (a NaN logit makes the whole row's log-softmax NaN), through generate()."""
    model = _model("qwen3", tok)
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteLogits, match="non-finite logits in 12 of 12 rows"):
        FastGenerator(model, tok).generate(_prompts(tok), SamplingParams(8, temperature=temperature), seed=0)
