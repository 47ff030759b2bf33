"""Both OPD objectives train the policy that samples (an audit of 2026-12-07): at a rollout temperature T the
student is pi_S^T, whose log-probs are the behaviour log-probs. opd_sampled takes its log-probs at T;
opd_full_rkl took its KL of the untempered student, so at T != 1 the two minimised different divergences.
The invariance that pins it: an objective at T on a model equals the objective at 1 on the model whose
logits are divided by T (its output head scaled by 1/T)."""

from __future__ import annotations

import copy

import pytest
import torch

from replaylab.config import TrainerConfig
from replaylab.objectives.base import build_objective
from replaylab.rollout.base import SamplingParams
from replaylab.rollout.fast import FastGenerator
from test_rollout_fast import _model, _prompts, tok  # noqa: F401  (tok is a fixture)

T = 0.5


@pytest.mark.parametrize("objective", ["opd_full_rkl", "opd_sampled"])
def test_an_opd_objective_at_temperature_t_trains_the_tempered_student(tok, objective):
    student, teacher = _model("qwen3", tok), _model("llama", tok)
    samples = [s for g in FastGenerator(student, tok).generate(_prompts(tok, 6), SamplingParams(12, temperature=T), 0)
               for s in g]
    for s in samples:  # the teacher's full distribution at each response position (T = 1, as the teacher scores)
        ids = torch.tensor([list(s.prompt.token_ids) + s.response_ids.tolist()])
        with torch.no_grad():
            logp = torch.log_softmax(teacher(input_ids=ids).logits[0, len(s.prompt.token_ids) - 1 : -1], -1)
        s.teacher_full_logprobs, s.teacher_logprobs = logp, logp.gather(-1, s.response_ids[:, None]).squeeze(-1)
    tempered = copy.deepcopy(student)
    with torch.no_grad():
        tempered.lm_head.weight.div_(T)
    cfg = TrainerConfig(objective=objective, kind="opd")
    at_t, _ = build_objective(cfg, 12, T).loss(student, samples, tok.pad_token_id)
    at_one, _ = build_objective(cfg, 12, 1.0).loss(tempered, samples, tok.pad_token_id)
    torch.testing.assert_close(at_t, at_one, rtol=1e-5, atol=1e-6)
    untempered, _ = build_objective(cfg, 12, 1.0).loss(student, samples, tok.pad_token_id)
    assert abs(at_t.item() - untempered.item()) > 1e-3  # the temperature changes the loss: the check has power
