"""`FastGenerator` (`rollout=fast`): batched sampling through `LeanDecoder`, one forward per token
for the whole batch, sampling and EOS bookkeeping in a few tensor ops.

It samples from the distribution the trainer assumes (tests: behaviour log-probs equal the
trainer's recomputation to 1e-5; greedy decoding equals `rollout=hf` token for token), and returns
the same `Sample`s as `HFGenerator`. Rows that finished are dropped from the batch once at most
`compact_at` of it is still running: compaction copies the KV cache, so it pays only when a good
share of the rows is done. With `compile` the one-token steps run through the inductor-compiled step
of rollout/compiled.py (prefill stays eager).
"""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerBase

from replaylab.rollout.base import SamplingParams, generate_in_chunks
from replaylab.rollout.compiled import decode_step, step_weights
from replaylab.rollout.decoder import LeanDecoder
from replaylab.rollout.sampling import check_finite, sample_next
from replaylab.types import Prompt, Sample, Source


class FastGenerator:
    def __init__(self, model: torch.nn.Module | None, tokenizer: PreTrainedTokenizerBase, micro_batch: int = 256,
                 compact_at: float = 0.5, compile: bool = False):
        self.tokenizer = tokenizer
        self.compile = compile
        self.micro_batch = micro_batch  # sequences per decoding batch (prompts x n)
        self.compact_at = compact_at
        self.policy_version = 0
        self.tokens_generated = 0
        self.model = model  # None until a gathered copy arrives (FSDP2, rollout/gathered.py)
        self.decoder = LeanDecoder(model) if model is not None else None

    def sync_weights(self, model: torch.nn.Module, version: int) -> None:
        # The decoder reads the training module's weights; they changed in place, so re-pack lazily.
        if model is not self.model:
            self.model, self.decoder = model, LeanDecoder(model)
        self.decoder.stale = True
        self.policy_version = version

    def model_for_scoring(self) -> torch.nn.Module:
        return self.model

    @torch.no_grad()
    def generate(
        self, prompts: list[Prompt], params: SamplingParams, seed: int, source: Source = "fresh"
    ) -> list[list[Sample]]:
        if self.decoder is None:
            raise RuntimeError("FastGenerator has no weights yet: sync_weights(model, version) first")
        self.decoder.ensure_packed()
        flat = step_weights(self.decoder) if self.compile else None  # the compiled step's view of the packed weights
        return generate_in_chunks(prompts, params, seed, self.micro_batch,
                                  lambda chunk, offset: self._decode(chunk, params, source, seed, offset, flat))

    def _prefill(self, prompts: list[Prompt], L: int):
        """Run the prompts through the decoder: (KV cache sized for L more tokens, last-position
        logits, prompt lengths, padded prompt width). Identical prompts (the n samples of a GRPO
        group) are run once and their cache rows copied."""
        dec, device = self.decoder, self.decoder.device
        distinct: dict[tuple[int, ...], int] = {}
        which = torch.tensor([distinct.setdefault(p.token_ids, len(distinct)) for p in prompts], device=device)
        U, P = len(distinct), max(len(t) for t in distinct)
        pad = self.tokenizer.pad_token_id
        # Left padding (every prompt ends where generation starts), built as lists: one tensor each
        # instead of a few small copies per prompt (about 150 ops per 64-prompt call).
        ids = torch.tensor([[pad] * (P - len(t)) + list(t) for t in distinct], dtype=torch.long, device=device)
        real = torch.tensor([[False] * (P - len(t)) + [True] * len(t) for t in distinct], device=device)
        cache = dec.new_cache(U, P + L)
        cache.key_bias[:, 0, :P].masked_fill_(real, 0.0)
        # Each prompt token sees the real tokens up to itself; a padding query sees only itself, so
        # its (never attended) keys stay finite.
        causal = torch.ones(P, P, dtype=torch.bool, device=device).tril()
        visible = (real[:, None, :] & causal) | torch.eye(P, dtype=torch.bool, device=device)
        bias = torch.zeros(U, P, P, dtype=cache.key_bias.dtype, device=device).masked_fill_(~visible, float("-inf"))
        cos, sin = dec.rotary_tables((real.long().cumsum(-1) - 1).clamp(min=0))
        logits = dec.forward(ids, cos, sin, cache, 0, bias)
        prompt_len = real.sum(-1)
        if U < len(prompts):
            cache.keep(which)
            logits, prompt_len = logits[which], prompt_len[which]
        return cache, logits, prompt_len, P

    def _decode(self, prompts: list[Prompt], params: SamplingParams, source: Source, seed: int, offset: int,
                flat: list[torch.Tensor] | None) -> list[Sample]:
        dec, L = self.decoder, params.max_new_tokens
        eos = -1 if params.ignore_eos else self.tokenizer.eos_token_id  # -1: no token ends a row
        cache, logits, prompt_len, P = self._prefill(prompts, L)
        B, device = len(prompts), dec.device
        # Response token t sits at position prompt_len + t (what the trainer's position ids give it).
        cos, sin = dec.rotary_tables(prompt_len[:, None] + torch.arange(L, device=device))
        tokens = torch.full((B, L), self.tokenizer.pad_token_id, dtype=torch.long, device=device)
        logps = torch.zeros((B, L), dtype=torch.float32, device=device)
        rows = None  # original index of each row in the batch, once finished rows were dropped
        alive = torch.ones(B, dtype=torch.bool, device=device)
        for t in range(L):
            nxt, lp = sample_next(logits, params)
            # A row keeps sampling after its EOS until it is dropped: those tokens are cut below.
            if rows is None:
                tokens[:, t], logps[:, t] = nxt, lp
            else:
                tokens[rows, t], logps[rows, t] = nxt, lp
            alive &= nxt != eos
            n_alive = int(alive.sum())
            if n_alive == 0 or t == L - 1:
                break
            # A compiled step keeps at least 2 rows: dynamo specialises a batch of 1 (a second compilation)
            if n_alive <= self.compact_at * len(alive) and (n_alive > 1 or not self.compile):
                keep = alive.nonzero().squeeze(-1)
                cache.keep(keep)
                rows = keep if rows is None else rows[keep]
                nxt, alive, cos, sin = nxt[keep], alive[keep], cos[keep], sin[keep]
            cache.key_bias[:, :, P + t] = 0.0
            if self.compile:
                logits = decode_step(dec, flat, nxt, P + t, cos[:, t], sin[:, t], cache)
            else:
                logits = dec.forward(nxt[:, None], cos[:, t : t + 1], sin[:, t : t + 1], cache, P + t,
                                     cache.key_bias[:, :, : P + t + 1])
        check_finite(logps)
        tokens, logps = tokens.cpu(), logps.cpu()
        is_eos = tokens == eos
        ended = is_eos.any(-1)
        length = torch.where(ended, is_eos.int().argmax(-1) + 1, L)  # EOS included
        samples = []
        for i, p in enumerate(prompts):
            n = int(length[i])
            self.tokens_generated += n
            samples.append(Sample(
                prompt=p, response_ids=tokens[i, :n].clone(), behaviour_logprobs=logps[i, :n].clone(),
                policy_version=self.policy_version, source=source, truncated=not bool(ended[i]),
                sample_id=f"{source}-v{self.policy_version}-s{seed}-{offset + i}",
            ))
        return samples
