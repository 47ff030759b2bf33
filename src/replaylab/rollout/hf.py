"""`HFGenerator`: batched sampling with transformers `generate` (KV cache), CPU or GPU.

Behaviour log-probs are those of the distribution actually sampled from: log-softmax of the logits
divided by the temperature (before top-k/top-p truncation, as verl and vLLM report them), so
importance ratios against a trainer that applies the same temperature are exact.

`generate` runs with none of the checkpoint's own generation settings: transformers fills every setting a
call leaves unset from `model.generation_config`, so a checkpoint that ships a repetition penalty, min-p
or a minimum length would sample from a distribution the behaviour log-probs (and rollout=fast) never see.
"""

from __future__ import annotations

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from replaylab.rollout.base import NonFiniteLogits, SamplingParams, generate_in_chunks
from replaylab.types import Prompt, Sample, Source


class HFGenerator:
    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, micro_batch: int = 256):
        self.model = model
        self.tokenizer = tokenizer
        self.micro_batch = micro_batch  # sequences per generate call (prompts x n)
        self.policy_version = 0
        self.tokens_generated = 0

    def sync_weights(self, model: torch.nn.Module, version: int) -> None:
        # The HF generator samples from the training module itself: nothing to copy.
        self.model = model
        self.policy_version = version

    def model_for_scoring(self) -> torch.nn.Module:
        return self.model

    @torch.no_grad()
    def generate(
        self, prompts: list[Prompt], params: SamplingParams, seed: int, source: Source = "fresh"
    ) -> list[list[Sample]]:
        was_training = self.model.training
        self.model.eval()
        out = generate_in_chunks(prompts, params, seed, self.micro_batch,
                                 lambda chunk, offset: self._generate_chunk(chunk, params, source, seed, offset))
        if was_training:
            self.model.train()
        return out

    def _generate_chunk(
        self, prompts: list[Prompt], params: SamplingParams, source: Source, seed: int, offset: int
    ) -> list[Sample]:
        tok = self.tokenizer
        width = max(len(p.token_ids) for p in prompts)
        ids = torch.full((len(prompts), width), tok.pad_token_id, dtype=torch.long)
        att = torch.zeros_like(ids)
        for i, p in enumerate(prompts):  # left padding: every prompt ends where generation starts
            ids[i, width - len(p.token_ids) :] = torch.tensor(p.token_ids)
            att[i, width - len(p.token_ids) :] = 1
        device = next(self.model.parameters()).device
        greedy = params.temperature == 0
        try:
            res = self._call_generate(ids.to(device), att.to(device), params, greedy)
        except RuntimeError as e:  # torch.multinomial's refusal of an inf/NaN distribution
            if "probability tensor" in str(e):
                raise NonFiniteLogits(str(e)) from e
            raise
        resp = res.sequences[:, width:].cpu()
        logits = torch.stack(res.logits, dim=1).float().cpu()  # (B, L, V) raw logits
        if not bool(torch.isfinite(logits).all()):  # greedy never calls multinomial
            raise NonFiniteLogits("non-finite logits while generating")
        return self._samples(prompts, resp, logits, params, greedy, source, seed, offset)

    def _call_generate(self, ids, att, params: SamplingParams, greedy: bool):
        tok = self.tokenizer
        own = self.model.generation_config
        self.model.generation_config = GenerationConfig()  # only what this call sets (module docstring)
        try:
            return self._generate(ids, att, params, greedy, tok)
        finally:
            self.model.generation_config = own

    def _generate(self, ids, att, params: SamplingParams, greedy: bool, tok):
        return self.model.generate(
            input_ids=ids,
            attention_mask=att,
            do_sample=not greedy,
            temperature=None if greedy else params.temperature,
            top_p=None if greedy else params.top_p,
            top_k=None if greedy else params.top_k,  # 0 disables top-k in transformers
            max_new_tokens=params.max_new_tokens,
            eos_token_id=[] if params.ignore_eos else tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            output_logits=True,
            return_dict_in_generate=True,
        )

    def _samples(self, prompts, resp, logits, params: SamplingParams, greedy: bool, source, seed: int, offset: int):
        tok = self.tokenizer
        temp = 1.0 if greedy else params.temperature
        logp = torch.log_softmax(logits / temp, dim=-1).gather(-1, resp.unsqueeze(-1)).squeeze(-1)
        samples = []
        for i, p in enumerate(prompts):
            is_eos = (resp[i] == tok.eos_token_id).nonzero() if not params.ignore_eos else resp[i, :0]
            length = int(is_eos[0]) + 1 if len(is_eos) else resp.shape[1]
            self.tokens_generated += length
            samples.append(
                Sample(
                    prompt=p,
                    response_ids=resp[i, :length].clone(),
                    behaviour_logprobs=logp[i, :length].clone(),
                    policy_version=self.policy_version,
                    source=source,
                    truncated=not len(is_eos),
                    sample_id=f"{source}-v{self.policy_version}-s{seed}-{offset + i}",
                )
            )
        return samples
