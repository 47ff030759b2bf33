"""Prefix continuation (`rollout.base.continue_prefixes`), the mechanism of prefix replay: the policy
continues a stored prefix and only the suffix is its sample. The behaviour log-probs of the suffix
equal a teacher-forced recomputation over prompt + prefix + suffix, on both in-process engines; the
response budget covers prefix + suffix; the prefix is context in every later pass (collate)."""

from __future__ import annotations

import pytest
import torch

from replaylab.models.batching import collate, score_logprobs
from replaylab.rollout.base import SamplingParams, continue_prefixes
from replaylab.rollout.fast import FastGenerator
from replaylab.rollout.hf import HFGenerator
from replaylab.types import Prefix, Sample
from test_rollout_fast import _model, _prompts, tok  # noqa: F401  (the module fixture)


def _teacher_forced(model, prompt_ids, prefix_ids, suffix_ids, temperature):
    """log p(suffix_t | prompt, prefix, suffix_<t) from one plain forward over the whole sequence."""
    ids = torch.tensor([list(prompt_ids) + prefix_ids.tolist() + suffix_ids.tolist()])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float() / temperature
    start = len(prompt_ids) + prefix_ids.numel()
    logp = torch.log_softmax(logits[start - 1 : start - 1 + suffix_ids.numel()], -1)
    return logp.gather(-1, suffix_ids.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("engine", ["fast", "hf"])
def test_suffix_logprobs_equal_teacher_forcing(tok, engine):  # noqa: F811
    model = _model("qwen3", tok)
    gen = (FastGenerator if engine == "fast" else HFGenerator)(model, tok, micro_batch=16)
    prompts = _prompts(tok, 6)
    torch.manual_seed(1)
    prefixes = [Prefix(torch.randint(4, len(tok), (k,)), "teacher", None, f"pool-{i}") for i, k in enumerate([0, 1, 3, 5, 2, 7])]
    params = SamplingParams(max_new_tokens=12, temperature=0.8, n=3)
    groups = continue_prefixes(gen, prompts, prefixes, params, seed=5)
    assert [len(g) for g in groups] == [3] * 6
    checked = 0
    for prompt, prefix, group in zip(prompts, prefixes, groups):
        for s in group:
            assert s.prompt == prompt and s.prefix is prefix and s.sample_id.startswith("cont-")
            assert s.num_tokens <= params.max_new_tokens - prefix.num_tokens  # the budget covers the whole answer
            assert s.behaviour_logprobs.shape == s.response_ids.shape
            expected = _teacher_forced(model, prompt.token_ids, prefix.ids, s.response_ids, params.temperature)
            torch.testing.assert_close(s.behaviour_logprobs, expected, atol=1e-4, rtol=0)
            # the same log-probs conditioned on the prompt alone differ: the prefix really is context
            if prefix.num_tokens:
                alone = _teacher_forced(model, prompt.token_ids, prefix.ids[:0], s.response_ids, params.temperature)
                assert (alone - expected).abs().max() > 1e-3
            checked += 1
    assert checked == 18
    # the trainer's batched recomputation (collate puts the prefix in the left-padded context) agrees too
    flat = [s for g in groups for s in g]
    for s, (logp, _) in zip(flat, score_logprobs(model, flat, tok.pad_token_id, 8, params.temperature)):
        torch.testing.assert_close(logp, s.behaviour_logprobs, atol=1e-4, rtol=0)


def test_budget_cut_and_context_layout(tok):  # noqa: F811
    model = _model("qwen3", tok)
    gen = FastGenerator(model, tok, micro_batch=16)
    prompts = _prompts(tok, 2)
    prefixes = [Prefix(torch.full((9,), 7), "initial", 0, "a"), Prefix(torch.full((1,), 7), "initial", 0, "b")]
    params = SamplingParams(max_new_tokens=10, temperature=1.0, n=4, ignore_eos=True)
    long, short = continue_prefixes(gen, prompts, prefixes, params, seed=0)
    assert all(s.num_tokens == 1 and s.truncated for s in long)  # 10 - 9 tokens left, cut there
    assert all(s.num_tokens == 9 and s.truncated for s in short)
    s = long[0]
    assert torch.equal(s.full_response_ids, torch.cat([prefixes[0].ids, s.response_ids]))
    batch = collate([s, short[0]], tok.pad_token_id)
    width = batch.prompt_width
    assert width == max(len(prompts[0].token_ids) + 9, len(prompts[1].token_ids) + 1)  # prompt + prefix: the context
    assert batch.response_mask.sum().item() == 1 + 9  # only suffix tokens are response (the loss mask)
    replayed = s.replayed()
    assert replayed.prefix is s.prefix and replayed.context_ids == s.context_ids
    with pytest.raises(ValueError, match="no room"):
        continue_prefixes(gen, prompts[:1], [Prefix(torch.full((10,), 7), "initial", 0, "c")], params, seed=0)


def test_sample_without_prefix_is_unchanged(tok):  # noqa: F811
    p = _prompts(tok, 1)[0]
    s = Sample(p, torch.tensor([5, 6]), torch.zeros(2), 0, "fresh", False, "x")
    assert s.context_ids == p.token_ids and torch.equal(s.full_response_ids, s.response_ids)
