"""The packed lean forward (models/lean.py) computes what the transformers module computes: response
logits and parameter gradients on left-padded contexts and right-padded responses of mixed lengths
(Qwen3 / Qwen2 / Llama), and a real training run takes the same first update either way."""

from __future__ import annotations

import copy
import random

import pytest
import torch
from torch import nn

from conftest import load_rows
from replaylab.models import lean
from replaylab.models.batching import collate, response_logits
from replaylab.types import Prompt, Sample
from test_rollout_fast import _model


@pytest.fixture(scope="module")
def tok():
    from replaylab.models.tiny_tokenizer import build_tiny_tokenizer

    return build_tiny_tokenizer()


def _samples(vocab: int, pad_id: int, n: int = 12) -> list[Sample]:
    rng = random.Random(0)
    out = []
    prompt = ()
    for i in range(n):  # prompts of 3-14 tokens, responses of 1-20: both sides padded
        if i % 4 in (0, 3):  # rows 0-2 of every four share a prompt (a GRPO group: its context is computed
            prompt = tuple(rng.randrange(4, vocab) for _ in range(rng.randint(3, 14)))  # once); row 3 has its own
        response = torch.tensor([rng.randrange(4, vocab) for _ in range(rng.randint(1, 20))])
        if i == 0:  # a sampled pad token is a real token, but its embedding row takes no gradient from it
            response[0] = pad_id
        out.append(Sample(prompt=Prompt(str(i), "", prompt, "0"), response_ids=response,
                          behaviour_logprobs=torch.zeros(len(response)), policy_version=0, source="fresh",
                          truncated=False, sample_id=str(i)))
    return out


def _loss(model: nn.Module, batch) -> tuple[torch.Tensor, torch.Tensor]:
    logits = response_logits(model, batch)
    logp = torch.log_softmax(logits, -1)
    mask = batch.response_mask.bool()
    return logits, (logp.exp() * logp)[mask].sum()  # negative entropy over the real response tokens


@pytest.mark.parametrize("kind", ["qwen3", "qwen2", "llama"])
def test_lean_logits_and_gradients_equal_the_modules(tok, kind, matmul_kernel):
    module = _model(kind, tok).train()
    packed = copy.deepcopy(module)
    assert lean.attach(packed) and lean.lean_forward_of(module) is None
    batch = collate(_samples(len(tok), tok.pad_token_id), tok.pad_token_id)
    plan = lean._Packing(batch.input_ids, batch.attention_mask.bool(), batch.prompt_width)
    assert len(plan.computed) < len(plan.real) < batch.input_ids.numel()  # shared contexts, padding: both skipped
    ref_logits, ref_loss = _loss(module, batch)
    logits, loss = _loss(packed, batch)
    P, L = batch.prompt_width, batch.response_ids.shape[1]
    real = batch.attention_mask[:, P - 1 : P + L - 1].bool()  # every response token's logits, and one past the last
    assert real.sum() > batch.response_mask.sum()
    torch.testing.assert_close(logits[real], ref_logits[real], atol=1e-5, rtol=1e-5)
    assert not logits[~real].any()  # padding positions are zeros, not garbage
    ref_loss.backward()
    loss.backward()
    for (name, p), q in zip(module.named_parameters(), packed.parameters()):
        # equal up to float summation order (a weight's gradient sums over tokens: packed, not padded)
        scale = p.grad.abs().max()
        assert scale > 0 and (q.grad - p.grad).abs().max() <= 1e-5 * scale, name


def test_attach_refuses_what_the_forward_does_not_implement(tok):
    class Wrapper(nn.Module):  # what DDP looks like from outside: the model inside another module
        def __init__(self, inner):
            super().__init__()
            self.module = inner

    model = _model("qwen3", tok)
    assert "not a plain transformers causal LM" in lean.trainable_reason(Wrapper(model))
    assert "float32" in lean.trainable_reason(copy.deepcopy(model).to(torch.bfloat16))
    dropout = copy.deepcopy(model)
    dropout.config.attention_dropout = 0.1
    assert "dropout" in lean.trainable_reason(dropout)
    checkpointed = copy.deepcopy(model)
    checkpointed.gradient_checkpointing_enable()
    assert "checkpointing" in lean.trainable_reason(checkpointed)
    assert lean.trainable_reason(model) is None
    for refused in (Wrapper(model), dropout, checkpointed):
        assert not lean.attach(refused) and lean.lean_forward_of(refused) is None


# OPD scores with the teacher and trains on one sample per prompt; GRPO trains on groups of 4 samples of
# a prompt (their shared context computed once; DAPO's overlong term gives the micro world's groups
# reward variance, as in test_micro_batch.py).
RUNS = {"opd": ([], "reverse_kl"), "grpo": (["trainer=grpo", "teacher=none", "trainer.prompts_per_iteration=4",
                                              "trainer.samples_per_prompt=4", "trainer.overlong_cache=20"], "abs_advantage")}


@pytest.mark.parametrize("objective", sorted(RUNS))
def test_a_training_run_takes_the_same_first_update_with_either_forward(run_train, tmp_path, monkeypatch, objective):
    overrides, metric = RUNS[objective]
    calls, shared = [], []
    real, packing = lean.LeanForward.logits, lean._Packing.__init__
    monkeypatch.setattr(lean.LeanForward, "logits", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    monkeypatch.setattr(lean._Packing, "__init__", lambda self, *a: packing(self, *a) or shared.append(self.gather is not None))
    _, module_dir = run_train(overrides + ["trainer.forward=module", "budget.max_updates=1"], output_root=tmp_path / "module")
    assert not calls
    _, lean_dir = run_train(overrides + ["budget.max_updates=1"], output_root=tmp_path / "lean")
    assert calls  # auto took the lean forward (teacher scoring and the loss)
    assert any(shared) == (objective == "grpo")  # a group's context was computed once

    def first_update(run_dir):
        return {r["metric"]: r["value"] for r in load_rows(run_dir) if r["split"] == "train" and r["update"] == 1}

    a, b = first_update(module_dir), first_update(lean_dir)
    assert a.keys() == b.keys() and {"loss", "grad_norm", metric} <= a.keys() and a["grad_norm"] > 0
    for key in ("loss", "grad_norm", metric):
        assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-7), key


def test_forward_must_be_a_known_choice(run_train):
    from replaylab.config import ConfigError

    with pytest.raises(ConfigError, match="trainer.forward"):
        run_train(["trainer.forward=lean_please"])
