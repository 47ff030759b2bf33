"""Next-token sampling in a few tensor ops, with the semantics of transformers' logits warpers.

Temperature first, then top-k, then top-p (the order `generate()` applies them), then one uniform
per row inverted through the cumulative distribution (a token truncation removed has an empty
interval and is never drawn; one random number per row instead of one per vocabulary entry). The
returned log-prob is log softmax(logits / T) of the drawn token, before top-k/top-p truncation,
which is the behaviour log-prob the trainer recomputes (rollout/hf.py says why).

Non-finite logits are not checked here, once per token: a NaN or +inf logit makes the whole row's
log-softmax NaN (through its max and normaliser), so the returned log-prob is non-finite and the
caller checks those once per batch (`check_finite`).
"""

from __future__ import annotations

import torch

from replaylab.rollout.base import NonFiniteLogits, SamplingParams


EXACT_SUM_ABOVE = 4096  # vocabulary size from which the inverse-CDF draw sums in float64


def check_finite(logprobs: torch.Tensor) -> None:
    """Raise NonFiniteLogits if any sampled token's log-prob (B, L) is NaN or infinite."""
    bad = ~torch.isfinite(logprobs)
    if bool(bad.any()):
        raise NonFiniteLogits(f"non-finite logits in {int(bad.any(-1).sum())} of {len(logprobs)} rows")


def sample_next(logits: torch.Tensor, params: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, V) float logits -> (tokens (B,), behaviour log-probs (B,)). Greedy when temperature is 0
    (the log-prob is then under temperature 1, like rollout=hf)."""
    if params.temperature == 0:
        tokens = logits.argmax(-1)
        return tokens, torch.log_softmax(logits, -1).gather(-1, tokens[:, None]).squeeze(-1)
    scaled = logits / params.temperature if params.temperature != 1 else logits
    logp = torch.log_softmax(scaled, dim=-1)
    probs = logp.exp()
    if params.top_k or params.top_p < 1:
        probs = _truncate(scaled, probs, params)
    # float32 partial sums (and float32 uniforms, 24 bits) step by ~6e-8 near 1: over a real vocabulary
    # (151,936 entries) tokens below that get no interval, a total variation of ~1e-3 per token (measured), so
    # both run in float64 there. A small vocabulary (the tiny worlds' 128) keeps float32, where the rounding
    # moves each boundary by ~1e-7, and its runs stay bitwise what they were.
    if probs.shape[-1] > EXACT_SUM_ABOVE:
        probs = probs.double()
    cdf = probs.cumsum(-1)
    u = torch.rand(cdf.shape[0], 1, dtype=cdf.dtype, device=cdf.device) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


def _truncate(scaled: torch.Tensor, probs: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Zero the probabilities top-k / top-p remove (the draw needs no renormalisation)."""
    keep = torch.ones_like(probs, dtype=torch.bool)
    if params.top_k and params.top_k < scaled.shape[-1]:
        kth = scaled.topk(params.top_k, dim=-1).values[:, -1:]
        keep &= scaled >= kth
    if params.top_p < 1:
        # transformers' TopPLogitsWarper: drop the smallest tokens whose cumulative mass (in
        # ascending order, over the top-k survivors) is at most 1 - top_p; the largest always stays.
        masked = torch.where(keep, scaled, torch.finfo(scaled.dtype).min)
        ascending, order = masked.sort(dim=-1)
        cumulative = ascending.softmax(-1).cumsum(-1)
        drop = cumulative <= 1 - params.top_p
        drop[:, -1] = False
        keep &= ~drop.scatter(-1, order, drop)
    return probs * keep
