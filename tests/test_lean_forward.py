"""The packed lean forward (models/lean.py) computes what the transformers module computes: response
logits and parameter gradients on left-padded contexts and right-padded responses of mixed lengths
(Qwen3 / Qwen2 / Llama), with and without its pruned last layer (`trainer.forward=pruned`), and a real
training run takes the same first update either way."""

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


@pytest.mark.parametrize("prune", ["never", "always"])
@pytest.mark.parametrize("kind", ["qwen3", "qwen2", "llama"])
def test_lean_logits_and_gradients_equal_the_modules(tok, kind, prune, matmul_kernel):
    module = _model(kind, tok).train()
    packed = copy.deepcopy(module)
    assert lean.attach(packed) and lean.lean_forward_of(module) is None
    lean.lean_forward_of(packed).prune = prune
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


@pytest.mark.parametrize("kind", ["qwen3", "qwen2"])
def test_the_pruned_last_layer_changes_no_logit_and_only_its_own_weight_gradients(tok, kind, monkeypatch, matmul_kernel):
    """The last layer's o_proj and MLP run on the read positions only (a response token's predecessor, a
    shared context's last slot once): without autograd (`no_grad`, the default: teacher scoring and other
    log-prob forwards) and in the loss forward (`always`, trainer.forward=pruned). Logits are the full
    layer's to the bit; so are the weight gradients but for that layer's o_proj, MLP and norm (a sum over
    fewer rows)."""
    model = _model(kind, tok).train()
    assert lean.attach(model)
    batch = collate(_samples(len(tok), tok.pad_token_id), tok.pad_token_id)
    P, L = batch.prompt_width, batch.response_ids.shape[1]
    plan = lean._Packing(batch.input_ids, batch.attention_mask.bool(), P)
    window = batch.attention_mask[:, P - 1 : P + L - 1].bool()
    read = len(torch.unique(plan.source.view(batch.input_ids.shape)[:, P - 1 : P + L - 1][window]))
    down, rows = model.model.layers[-1].mlp.down_proj.weight, []
    real_linear = lean.kernels.linear

    def counting(x, weight, bias=None):
        if weight is down:
            rows.append(len(x))
        return real_linear(x, weight, bias)

    monkeypatch.setattr(lean.kernels, "linear", counting)

    def run(prune, grad):
        lean.lean_forward_of(model).prune = prune
        model.zero_grad()
        rows.clear()
        with torch.set_grad_enabled(grad):
            logits, loss = _loss(model, batch)
        if grad:
            loss.backward()
        return logits.detach(), rows[0], {n: p.grad.clone() for n, p in model.named_parameters() if grad}

    full, computed, full_grads = run("never", True)
    assert lean.MIN_PRUNED_ROWS <= read < computed == len(plan.computed)
    for prune, grad, pruned_rows in (("no_grad", True, computed), ("no_grad", False, read), ("always", True, read)):
        logits, n_rows, grads = run(prune, grad)
        assert n_rows == pruned_rows and torch.equal(logits, full), (prune, grad)
    last = f"model.layers.{len(model.model.layers) - 1}."
    own = {last + k for k in ("self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                              "mlp.down_proj.weight", "post_attention_layernorm.weight")}
    assert grads.keys() == full_grads.keys()
    for name, g in grads.items():
        scale = full_grads[name].abs().max()
        assert torch.equal(g, full_grads[name]) or (name in own and (g - full_grads[name]).abs().max() <= 1e-6 * scale), name


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


@pytest.mark.parametrize("forward", ["auto", "pruned"])
@pytest.mark.parametrize("objective", sorted(RUNS))
def test_a_training_run_takes_the_same_first_update_with_either_forward(run_train, tmp_path, monkeypatch, objective, forward):
    overrides, metric = RUNS[objective]
    calls, shared = [], []
    real, packing = lean.LeanForward.logits, lean._Packing.__init__
    monkeypatch.setattr(lean.LeanForward, "logits", lambda self, *a, **k: calls.append(self.prune) or real(self, *a, **k))
    monkeypatch.setattr(lean._Packing, "__init__", lambda self, *a: packing(self, *a) or shared.append(self.gather is not None))
    _, module_dir = run_train(overrides + ["trainer.forward=module", "budget.max_updates=1"], output_root=tmp_path / "module")
    assert not calls
    _, lean_dir = run_train(overrides + [f"trainer.forward={forward}", "budget.max_updates=1"], output_root=tmp_path / "lean")
    assert calls and set(calls) == {"always" if forward == "pruned" else "no_grad"}  # teacher scoring and the loss
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


def test_pruned_is_an_error_where_the_policy_cannot_take_the_lean_forward(run_train):
    from replaylab.config import ConfigError

    with pytest.raises(ConfigError, match="trainer.forward: 'pruned' needs the lean forward.*checkpointing"):
        run_train(["trainer.forward=pruned", "model.gradient_checkpointing=true"])
