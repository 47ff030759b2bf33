"""Turn samples into padded tensors and score their tokens under a model.

Layout: contexts left-padded to a common width P, responses right-padded to a common width L, so
every response token sits at columns P..P+L-1 and its logit at columns P-1..P+L-2, whatever the
prompt length. A context is the prompt, plus the stored prefix when the sample continues one
(prefix replay): the prefix is conditioned on, never trained on. Position ids follow the attention mask, as in `generate` with left padding, so the
log-probs recomputed here equal the behaviour log-probs of a freshly sampled response.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from replaylab.models.lean import lean_forward_of
from replaylab.types import Sample


@dataclass
class TokenBatch:
    input_ids: torch.Tensor  # (B, P+L)
    attention_mask: torch.Tensor  # (B, P+L)
    position_ids: torch.Tensor  # (B, P+L)
    response_ids: torch.Tensor  # (B, L)
    response_mask: torch.Tensor  # (B, L) float, 1 on valid response tokens (EOS included)
    prompt_width: int

    def to(self, device: torch.device) -> "TokenBatch":
        return TokenBatch(
            self.input_ids.to(device), self.attention_mask.to(device), self.position_ids.to(device),
            self.response_ids.to(device), self.response_mask.to(device), self.prompt_width,
        )


def collate(samples: list[Sample], pad_id: int) -> TokenBatch:
    contexts = [s.context_ids for s in samples]  # the prompt, plus a replayed prefix (context, not trained)
    P = max(len(c) for c in contexts)
    L = max(s.num_tokens for s in samples)
    B = len(samples)
    ids = torch.full((B, P + L), pad_id, dtype=torch.long)
    att = torch.zeros((B, P + L), dtype=torch.long)
    rmask = torch.zeros((B, L), dtype=torch.float32)
    for i, s in enumerate(samples):
        p = len(contexts[i])
        ids[i, P - p : P] = torch.tensor(contexts[i])
        ids[i, P : P + s.num_tokens] = s.response_ids
        att[i, P - p : P + s.num_tokens] = 1
        rmask[i, : s.num_tokens] = 1
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    return TokenBatch(ids, att, pos, ids[:, P:], rmask, P)


def pad_per_token(values: list[torch.Tensor], width: int, fill: float = 0.0) -> torch.Tensor:
    """Stack per-sample (L_i,) or (L_i, V) tensors into (B, width[, V]) with `fill` padding."""
    shape = (len(values), width) + tuple(values[0].shape[1:])
    out = torch.full(shape, fill, dtype=values[0].dtype)
    for i, v in enumerate(values):
        out[i, : v.shape[0]] = v
    return out


def response_logits(model: torch.nn.Module, batch: TokenBatch) -> torch.Tensor:
    """(B, L, V) logits predicting each response token: through the lean forward when `models.lean.attach`
    gave the module one (the same function, fewer ops), else through the module."""
    P, L = batch.prompt_width, batch.response_ids.shape[1]
    lean = lean_forward_of(model)
    if lean is not None:
        return lean.logits(batch.input_ids, batch.attention_mask, batch.position_ids, P - 1, P + L - 1, context=P)
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids)
    return out.logits[:, P - 1 : P + L - 1].float()


def token_logprobs(logits: torch.Tensor, response_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """(B, L) log-probs of the response tokens under softmax(logits / temperature)."""
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def score_logprobs(
    model: torch.nn.Module, samples: list[Sample], pad_id: int, micro_batch: int, temperature: float = 1.0,
    full: bool = False,
) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """Per-sample log-probs of each response under `model` (no grad), in micro-batches.

    Returns (sampled-token log-probs (L_i,), full log-probs (L_i, V) if `full` else None).
    """
    device = next(model.parameters()).device
    out: list[tuple[torch.Tensor, torch.Tensor | None]] = []
    for start in range(0, len(samples), micro_batch):
        chunk = samples[start : start + micro_batch]
        batch = collate(chunk, pad_id).to(device)
        logits = response_logits(model, batch)
        logp_full = torch.log_softmax(logits / temperature, dim=-1)
        logp = logp_full.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1).cpu()
        logp_full = logp_full.cpu() if full else None
        for i, s in enumerate(chunk):
            n = s.num_tokens
            out.append((logp[i, :n].clone(), logp_full[i, :n].clone() if full else None))
    return out
