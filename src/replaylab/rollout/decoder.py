"""A lean decoder for Llama-family causal LMs (Qwen3, Qwen2, Llama): the forward of a transformers
model, re-expressed as a handful of tensor ops over its own weights, with a preallocated KV cache.

Why: on a small model, one cached decode step through the transformers module tree costs far more
in per-call bookkeeping (module dispatch, mask construction, cache objects) than in arithmetic, and
`generate()` adds logits processors and stopping criteria on top. This decoder computes the same
function (the same weights, the same RMSNorm / rotary / grouped-query attention / SwiGLU maths, a
test checks log-probs against the transformers forward to 1e-5) with q/k/v and gate/up projections
fused into one matmul each, rotary tables computed once, and keys/values written in place.

Weights are read from the training module by reference and re-packed lazily (`refresh`) after the
optimizer changed them: packing is a few concatenations, cheaper than one decode step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from replaylab.models import kernels
from replaylab.models.lean import MIN_PRUNED_ROWS, UnsupportedModel, float32_reason, supports


@dataclass
class _Layer:
    """One decoder layer's weights, projections packed for the matmul kernel (`models.kernels`)."""

    ln1: torch.Tensor
    qkv: kernels.Packed  # q, k and v projections in one: hidden -> (H + 2 H_kv) D
    qkv_b: torch.Tensor | None
    qk_norm: torch.Tensor | None  # (H + H_kv, D): q_norm's weight for the query heads, k_norm's for the key heads
    o: kernels.Packed
    ln2: torch.Tensor
    gate_up: kernels.Packed  # gate and up projections in one: hidden -> 2 I
    down: kernels.Packed


class KVCache:
    """Keys (B * H_kv, D, S) and values (B * H_kv, S, D) of every layer, preallocated for prompt +
    response: the batched matmuls of attention read a slice of them in place (no copy). Keys are
    stored transposed because the score matmul q @ K^T then reads contiguous rows (measured: a
    decode step's score matmul about a quarter faster than through a transposed view). The buffers are
    uninitialised: a reader slices them to the slots written so far (prefill writes every prompt slot,
    left padding included, and each step its own)."""

    def __init__(self, layers: int, batch: int, heads: int, length: int, dim: int, dtype, device):
        self.heads = heads
        self.k = [torch.empty(batch * heads, dim, length, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.empty(batch * heads, length, dim, dtype=dtype, device=device) for _ in range(layers)]
        self.key_bias = torch.full((batch, 1, length), float("-inf"), dtype=dtype, device=device)
        # a decode step's attention mask: 0 on keys it may attend to (real tokens), -inf on left
        # padding and on slots not written yet

    def keep(self, rows: torch.Tensor) -> None:
        """Drop finished rows: the batch shrinks to `rows` (an index tensor)."""
        flat = (rows[:, None] * self.heads + torch.arange(self.heads, device=rows.device)).flatten()

        def take(t: torch.Tensor) -> torch.Tensor:  # a fresh tensor, not a view (compiled steps guard on that)
            return t.index_select(0, flat)
        self.k = [take(k) for k in self.k]
        self.v = [take(v) for v in self.v]
        self.key_bias = self.key_bias.index_select(0, rows)


class LeanDecoder:
    def __init__(self, model: nn.Module):
        why = supports(model) or float32_reason(model)
        if why:
            raise UnsupportedModel(f"rollout=fast cannot run this model: {why}; use rollout=hf")
        self.model = model
        c = model.config
        self.heads = c.num_attention_heads
        self.kv_heads = c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.eps = c.rms_norm_eps
        self.scale = self.head_dim**-0.5
        self.rotary = model.model.rotary_emb
        self.layers: list[_Layer] = []
        self.stale = True
        self.packed_for: str | None = None  # the matmul kernel the weights are packed for
        self.prune_prefill = True  # a prefill's last layer on the last position only (tests turn it off)

    def ensure_packed(self) -> None:
        """Re-pack if an optimizer step changed the weights (`stale`) or another kernel was selected."""
        if self.stale or self.packed_for != kernels.active():
            self.refresh()

    def refresh(self) -> None:
        """Re-pack the weights from the model (after an optimizer step changed them)."""
        base = self.model.model
        with torch.no_grad():
            self.embed = base.embed_tokens.weight.detach()
            self.norm = base.norm.weight.detach()
            self.lm_head = kernels.pack(self.model.lm_head.weight.detach())
            self.layers = []
            for layer in base.layers:
                a, m = layer.self_attn, layer.mlp
                bias = a.q_proj.bias
                self.layers.append(_Layer(
                    ln1=layer.input_layernorm.weight.detach(),
                    qkv=kernels.pack(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).detach()),
                    qkv_b=torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]).detach() if bias is not None else None,
                    qk_norm=torch.cat([a.q_norm.weight.detach().expand(self.heads, -1),
                                       a.k_norm.weight.detach().expand(self.kv_heads, -1)]) if hasattr(a, "q_norm") else None,
                    o=kernels.pack(a.o_proj.weight.detach()),
                    ln2=layer.post_attention_layernorm.weight.detach(),
                    gate_up=kernels.pack(torch.cat([m.gate_proj.weight, m.up_proj.weight]).detach()),
                    down=kernels.pack(m.down_proj.weight.detach()),
                ))
        self.stale = False
        self.packed_for = kernels.active()

    @property
    def device(self) -> torch.device:
        return self.embed.device

    def rotary_tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for (B, S) position ids through the model's own rotary module (so any rope
        scaling it implements is honoured), shaped (B, S, 1, D) for broadcasting over heads."""
        dummy = self.embed[:1].unsqueeze(0)
        cos, sin = self.rotary(dummy, positions)
        # rotate_half(x) * sin == roll(x, D/2) * (sin with its first half negated): one op less per use
        half = sin.shape[-1] // 2
        sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
        return cos.unsqueeze(2), sin.unsqueeze(2)

    def new_cache(self, batch: int, length: int) -> KVCache:
        return KVCache(len(self.layers), batch, self.kv_heads, length, self.head_dim, self.embed.dtype, self.device)

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache, start: int,
                bias: torch.Tensor) -> torch.Tensor:
        """Logits of the last position for tokens `ids` (B, S) written at cache slots start..start+S-1.

        `cos`/`sin` (B, S, 1, D) are the rotary tables of those positions, `sin` with the sign of
        rotate-half folded in (`rotary_tables`); `bias` (B, S | 1, start+S) is the additive attention
        mask of the new queries over every key so far (0 visible, -inf hidden)."""
        B, S = ids.shape
        H, Hk, D = self.heads, self.kv_heads, self.head_dim
        G, end = H // Hk, start + S
        x = F.embedding(ids.reshape(-1), self.embed)  # (B * S, hidden) throughout
        # (B, S|1, end) -> (B * H_kv, G * S | 1, end), the score layout below
        bias = bias.unsqueeze(1).expand(B, Hk, bias.shape[1], end)
        bias = bias.reshape(B * Hk, bias.shape[2], end)
        if S > 1:  # one row per (query head of the group, position): the group-major order of qg
            bias = bias.repeat(1, G, 1)
        last = len(self.layers) - 1
        for i, w in enumerate(self.layers):
            h = _rms_norm(x, w.ln1, self.eps)
            qkv = kernels.dense(h, w.qkv, w.qkv_b).view(B, S, H + 2 * Hk, D)
            # q and k are normalised and rotated together: one op per step of the maths for both
            qk, v = qkv[:, :, : H + Hk], qkv[:, :, H + Hk :]
            if w.qk_norm is not None:
                qk = F.rms_norm(qk, (D,), None, self.eps) * w.qk_norm
            qk = qk * cos + qk.roll(D // 2, dims=-1) * sin  # (B, S, H + H_kv, D)
            q, k = qk[:, :, :H].transpose(1, 2), qk[:, :, H:]  # q: (B, H, S, D)
            cache.k[i].unflatten(0, (B, Hk))[:, :, :, start:end] = k.permute(0, 2, 3, 1)
            cache.v[i].unflatten(0, (B, Hk))[:, :, start:end] = v.transpose(1, 2)
            keys_t, values = cache.k[i][:, :, :end], cache.v[i][:, :end]  # (B * H_kv, D | end, end | D), views
            # Grouped-query attention without repeating keys: the G query heads of a kv head are rows
            # of one matrix, (B * H_kv, G * S, D).
            qg = q.reshape(B * Hk, G * S, D)
            scores = torch.baddbmm(bias, qg, keys_t, alpha=self.scale)
            att = torch.bmm(torch.softmax(scores, dim=-1), values)  # (B * H_kv, G * S, D)
            att = att.view(B, H, S, D).transpose(1, 2).reshape(B * S, H * D)
            if i == last and S > 1 and B >= MIN_PRUNED_ROWS and self.prune_prefill:
                # Only the last position's logits are read, so the last layer's output projection and
                # MLP run on it alone. Attention keeps its full shape: batched matmuls round a row
                # differently when the batch has fewer rows, and the dense products do not, so every
                # number stays the full layer's.
                att, x, S = att.view(B, S, -1)[:, -1], x.view(B, S, -1)[:, -1], 1
            x = kernels.dense_add(x, att, w.o)
            h = _rms_norm(x, w.ln2, self.eps)
            gate, up = kernels.dense(h, w.gate_up).chunk(2, dim=-1)
            x = kernels.dense_add(x, F.silu(gate) * up, w.down)
        last = _rms_norm(x.view(B, S, -1)[:, -1], self.norm, self.eps)
        return kernels.dense(last, self.lm_head).float()


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' RMSNorm for float32 weights, as torch's fused kernel (one op instead of six;
    equal to transformers' op-by-op version in float32, which the decoder's tests check through
    greedy decoding and log-probs)."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)
