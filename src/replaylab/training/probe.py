"""A fixed probe set of initial-policy rollouts: the R-OPD study's premise, measured.

The premise: as OPD trains on its own rollouts, the response prefixes the *initial* student
produced become less likely under the current student, although the teacher still disagrees with
the student on them. So every run draws one probe set before its first update (the same prompts
and seeds whatever the strategy or data order, from `eval.probe_seed`), and at every evaluation
measures on those fixed tokens:

  probe_student_logprob  mean per-token log pi_theta(y_t | s_t)               (falls if forgotten)
  probe_reverse_kl       mean per-token KL(pi_theta(.|s_t) || pi_T(.|s_t))    (teacher-student
                         disagreement on those prefixes; needs a teacher with full distributions)

Both at temperature 1 (the distributions themselves, not the sampling temperature). The probe is
part of the checkpoint as plain data (prompt indices and response tokens), so a resumed run
measures the same tokens; it is never trained on and never counted in the budget ledger.
"""

from __future__ import annotations

import random

import torch

from replaylab.models.batching import collate, response_logits
from replaylab.rollout.base import SamplingParams
from replaylab.types import Prompt, Sample


class ProbeSet:
    def __init__(self, prompt_indices: list[int], samples: list[Sample]):
        self.prompt_indices = prompt_indices
        self.samples = samples

    @classmethod
    def draw(cls, prompts: list[Prompt], size: int, seed: int, generator, params: SamplingParams) -> "ProbeSet":
        """`size` prompts drawn without replacement by `seed`, one rollout each from `generator`
        (the policy before its first update)."""
        indices = random.Random(seed).sample(range(len(prompts)), min(size, len(prompts)))
        chosen = [prompts[i] for i in indices]
        one = SamplingParams(params.max_new_tokens, params.temperature, params.top_p, params.top_k, 1)
        per_prompt = generator.generate(chosen, one, seed=seed, source="initial")
        return cls(indices, [s for samples in per_prompt for s in samples])

    @torch.no_grad()
    def measure(self, student: torch.nn.Module, teacher_model: torch.nn.Module | None, pad_id: int,
                micro_batch: int) -> dict[str, float]:
        was_training = student.training
        student.eval()
        tokens, logp_sum, kl_sum = 0, 0.0, 0.0
        device = next(student.parameters()).device
        for start in range(0, len(self.samples), micro_batch):
            batch = collate(self.samples[start : start + micro_batch], pad_id).to(device)
            mask = batch.response_mask
            logp = torch.log_softmax(response_logits(student, batch), dim=-1)
            logp_sum += float((logp.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1) * mask).sum())
            tokens += int(mask.sum())
            if teacher_model is not None:
                t_device = next(teacher_model.parameters()).device
                t_logp = torch.log_softmax(response_logits(teacher_model, batch.to(t_device)), dim=-1).to(device)
                kl = (logp.exp() * (logp - t_logp)).sum(-1)
                kl_sum += float((kl * mask).sum())
        student.train(was_training)
        out = {"probe_student_logprob": logp_sum / max(1, tokens), "probe_tokens": float(tokens)}
        if teacher_model is not None:
            out["probe_reverse_kl"] = kl_sum / max(1, tokens)
        return out

    def state_dict(self) -> dict:
        """Plain data: which prompts, which tokens (behaviour log-probs are not needed to measure)."""
        return {"prompt_indices": list(self.prompt_indices),
                "responses": [s.response_ids.clone() for s in self.samples],
                "truncated": [bool(s.truncated) for s in self.samples]}

    @classmethod
    def from_state(cls, state: dict, prompts: list[Prompt]) -> "ProbeSet":
        samples = [
            Sample(prompt=prompts[i], response_ids=ids, behaviour_logprobs=torch.zeros(ids.numel()), policy_version=0,
                   source="initial", truncated=trunc, sample_id=f"probe-{n}")
            for n, (i, ids, trunc) in enumerate(zip(state["prompt_indices"], state["responses"], state["truncated"]))
        ]
        return cls(list(state["prompt_indices"]), samples)
