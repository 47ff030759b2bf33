"""A lean full-sequence forward for Llama-family causal LMs (Qwen3, Qwen2, Llama), with autograd.

Why: on the tiny world's 2-layer, 128-wide models the transformers module tree spends a large share
of a training forward/backward outside the matmuls: RMSNorm as six elementwise ops (each with its own
backward over a (rows x tokens x width) tensor), three q/k/v and two gate/up projections where one
each would do, mask construction per call, and the output head over every position although only
response positions are read. This forward computes the same function from the module's own
parameters (so gradients reach them, and an optimizer step is seen at once) with torch's fused RMSNorm,
q/k/v and gate/up concatenated into one matmul each, q and k normalised and rotated as one tensor,
scaled-dot-product attention with grouped-query heads, and the final norm and head applied to the
requested positions only. Tests (tests/test_lean_forward.py) check logits and parameter gradients
against the transformers forward.

It reads the module's parameters directly, so it is only for a plain float32 module: a DDP or FSDP2
wrapper must run its own forward (its hooks sync and gather), which `attach` leaves alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from replaylab.models import kernels

SUPPORTED = ("qwen3", "qwen2", "llama")
ATTR = "_replaylab_lean_forward"  # set on a module by `attach`; batching.response_logits reads it


# When the last layer runs its output projection and MLP on the positions whose logits are read only
# (`LeanForward.prune`): "no_grad" (trainer.forward=auto) in forwards without autograd (teacher scoring,
# proximal and reference log-probs, probes), whose logits are then the full layer's to the bit (a dense
# product's row does not depend on the other rows once there are a few of them: MIN_PRUNED_ROWS);
# "always" (trainer.forward=pruned) in the loss forward too, whose weight gradients of that layer then sum
# over fewer rows (another float order: a run differs from auto's in the last bits); "never" (tests).
# MKL and oneDNN compute a product of 1-5 rows by another path than a larger one (measured on the Intel
# Xeon: different last bits), so a pruned layer keeps at least this many rows or is not pruned.
MIN_PRUNED_ROWS = 16


class UnsupportedModel(ValueError):
    pass


def supports(model: nn.Module) -> str | None:
    """None if the model's maths is the one this module (and rollout/decoder.py) implements, else why not."""
    cfg = getattr(model, "config", None)
    kind = getattr(cfg, "model_type", None)
    if kind not in SUPPORTED:
        return f"model_type {kind!r} is not one of {SUPPORTED}"
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or ["full_attention"])):
        return "sliding-window attention layers are not supported"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"hidden_act {cfg.hidden_act!r} (only silu)"
    layer = model.model.layers[0]
    biased = [name for name, mod in (("o_proj", layer.self_attn.o_proj), ("gate_proj", layer.mlp.gate_proj),
                                     ("up_proj", layer.mlp.up_proj), ("down_proj", layer.mlp.down_proj))
              if mod.bias is not None]
    if biased:
        return f"biases on {', '.join(biased)} (only q/k/v projections may carry one)"
    return None


def float32_reason(model: nn.Module) -> str | None:
    """None for a float32 model, else why this module's maths (and rollout/decoder.py's) does not apply:
    it computes in the parameters' dtype where transformers upcasts RMSNorm and softmax, so in bfloat16 its
    log-probs drift from the trainer's recomputation (the audit of 2026-12-07 measured 2.4x rollout=hf's gap
    for the decoder's behaviour log-probs, up to 0.19 nats on one token)."""
    if any(p.dtype != torch.float32 for p in model.parameters()):
        return "its parameters are not float32 (transformers upcasts RMSNorm and softmax internally; this code does not)"
    return None


def trainable_reason(model: nn.Module) -> str | None:
    """None if `attach` may give this module the lean forward, else why not."""
    if not hasattr(model, "config") or not hasattr(model, "model"):
        return f"{type(model).__name__} is not a plain transformers causal LM (a DDP/FSDP2 wrapper runs its own forward)"
    why = supports(model)
    if why:
        return why
    why = float32_reason(model)
    if why:
        return why
    if getattr(model.config, "attention_dropout", 0.0):
        return "attention dropout is on (this forward has none)"
    if getattr(model, "is_gradient_checkpointing", False):
        return "gradient checkpointing is on"
    return None


def attach(model: nn.Module) -> bool:
    """Give `model` the lean forward if it can take it; True if it did."""
    if trainable_reason(model) is not None:
        return False
    setattr(model, ATTR, LeanForward(model))
    return True


def lean_forward_of(model: nn.Module) -> "LeanForward | None":
    return getattr(model, ATTR, None)


class LeanForward:
    def __init__(self, model: nn.Module):
        c = model.config
        self.model = model
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.eps = c.rms_norm_eps
        self.prune = "no_grad"  # no_grad | always | never: when the last layer runs on the read positions only

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
               start: int, stop: int, context: int = 0) -> torch.Tensor:
        """(B, stop - start, V) float logits at positions start..stop-1 of (B, S) inputs; zeros at padding.

        Packed: every projection, norm and MLP runs over the real tokens only (T of them, not B x S:
        a batch of left-padded prompts and right-padded responses of mixed lengths is often 40%
        padding), and columns 0..context-1 (the left-padded contexts) are computed once for rows
        with the same context (a GRPO group's n samples: causal attention never lets a context token
        see its row's response, so its activations are the same in every row of the group; the rows'
        gradients into it add up). Attention alone runs on the padded layout, every row's context
        keys and values read from the row that computed them; a query sees the real keys up to itself
        and always itself (a padding query then has a finite softmax and gradient; no real query ever
        sees a padding key)."""
        base = self.model.model
        B, S = input_ids.shape
        H, Hk, D = self.heads, self.kv_heads, self.head_dim
        device = input_ids.device
        real = attention_mask.bool()
        plan = _Packing(input_ids, real, context)
        causal = torch.ones(S, S, dtype=torch.bool, device=device).tril()
        visible = (real[:, None, :] & causal) | torch.eye(S, dtype=torch.bool, device=device)
        # padding_idx as the module has it: a sampled pad token's lookup adds no gradient to its row
        x = F.embedding(input_ids.flatten()[plan.computed], base.embed_tokens.weight,
                        padding_idx=base.embed_tokens.padding_idx)  # (T, hidden) throughout
        cos, sin = base.rotary_emb(x[None], position_ids.flatten()[plan.computed][None])  # (1, T, D)
        half = D // 2
        # rotate_half(x) * sin == roll(x, D/2) * (sin with its first half negated)
        cos, sin = cos[0, :, None], torch.cat([-sin[0, :, :half], sin[0, :, half:]], dim=-1)[:, None]
        width = (H + 2 * Hk) * D
        # the requested positions that are real tokens, as rows of x and as rows of the (B * (stop - start)) output
        window = real[:, start:stop]
        rows = plan.source.view(B, S)[:, start:stop][window]
        last = -1
        if self.prune == "always" or (self.prune == "no_grad" and not torch.is_grad_enabled()):
            # the last layer runs on the distinct packed rows read (a shared context's last slot once)
            distinct, reread = torch.unique(rows, sorted=True, return_inverse=True)
            if len(distinct) >= MIN_PRUNED_ROWS and len(distinct) < len(plan.computed):
                last, rows = len(base.layers) - 1, distinct
                read = plan.computed.index_select(0, rows)  # their slots in the (B * S) layout
        for i, layer in enumerate(base.layers):
            a, m = layer.self_attn, layer.mlp
            h = F.rms_norm(x, (x.shape[-1],), layer.input_layernorm.weight, self.eps)
            bias = torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]) if a.q_proj.bias is not None else None
            qkv = kernels.linear(h, torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), bias)
            qk, v = qkv[:, : (H + Hk) * D].view(-1, H + Hk, D), qkv[:, (H + Hk) * D :]
            if hasattr(a, "q_norm"):
                scale = torch.cat([a.q_norm.weight.expand(H, D), a.k_norm.weight.expand(Hk, D)])
                qk = F.rms_norm(qk, (D,), None, self.eps) * scale
            qk = qk * cos + qk.roll(half, dims=-1) * sin
            padded = qkv.new_zeros(B * S, width).index_copy(0, plan.real, plan.spread(torch.cat([qk.flatten(1), v], dim=-1)))
            padded = padded.view(B, S, H + 2 * Hk, D).transpose(1, 2)  # (B, heads, S, D)
            att = F.scaled_dot_product_attention(padded[:, :H], padded[:, H : H + Hk], padded[:, H + Hk :],
                                                 attn_mask=visible[:, None], scale=a.scaling, enable_gqa=H != Hk)
            att = att.transpose(1, 2).reshape(B * S, H * D)
            if i == last:
                # Nothing reads the last layer's output at a position whose logits are not asked for (only
                # its keys and values, above), so o_proj and the MLP run on the read positions alone.
                # Attention keeps its full shape: its kernels round a query differently when there are
                # fewer of them, the dense products do not, so the logits stay the full layer's.
                att, x = att.index_select(0, read), x.index_select(0, rows)
            else:
                att = att.index_select(0, plan.computed)
            x = x + kernels.linear(att, a.o_proj.weight)
            h = F.rms_norm(x, (x.shape[-1],), layer.post_attention_layernorm.weight, self.eps)
            gate, up = kernels.linear(h, torch.cat([m.gate_proj.weight, m.up_proj.weight])).chunk(2, dim=-1)
            x = x + kernels.linear(F.silu(gate) * up, m.down_proj.weight)
        x = x.index_select(0, rows if last < 0 else reread)
        x = F.rms_norm(x, (x.shape[-1],), base.norm.weight, self.eps)
        logits = kernels.linear(x, self.model.lm_head.weight, getattr(self.model.lm_head, "bias", None)).float()
        out = logits.new_zeros(B * (stop - start), logits.shape[-1])
        return out.index_copy(0, window.flatten().nonzero().squeeze(-1), logits).view(B, stop - start, -1)


class _Packing:
    """Which (row, column) slots of a (B, S) batch are computed, and where each real slot reads from.

    `computed`: flat indices of the slots computed, in order (their rank is a token's row in the
    packed activations); `real`: flat indices of every real slot; `source`: for every flat slot, the
    packed row holding its activations (its own, or for a context slot of a row whose context equals
    an earlier row's, that row's slot in the same column; -1 at padding)."""

    def __init__(self, input_ids: torch.Tensor, real: torch.Tensor, context: int):
        B, S = input_ids.shape
        device = input_ids.device
        self.real = real.flatten().nonzero().squeeze(-1)
        rows = torch.arange(B, device=device)
        canonical = rows
        if context > 0 and B > 1:
            contexts = input_ids[:, :context].masked_fill(~real[:, :context], -1)
            _, inverse = torch.unique(contexts, dim=0, return_inverse=True)
            first = torch.full((int(inverse.max()) + 1,), B, device=device).scatter_reduce(0, inverse, rows, "amin")
            canonical = first[inverse]  # the first row with the same context
        repeated = canonical != rows
        own = real.clone()
        own[:, :context] &= ~repeated[:, None]
        self.computed = own.flatten().nonzero().squeeze(-1)
        rank = torch.full((B * S,), -1, dtype=torch.long, device=device)
        rank[self.computed] = torch.arange(len(self.computed), device=device)
        slot = rows[:, None] * S + torch.arange(S, device=device)
        slot[:, :context] = canonical[:, None] * S + torch.arange(context, device=device)
        self.source = torch.where(real, rank[slot], -1).flatten()
        # every real slot's packed row; None when each real slot is computed in place (no context shared)
        self.gather = self.source[self.real] if bool(repeated.any()) else None

    def spread(self, packed: torch.Tensor) -> torch.Tensor:
        """Packed rows (T, ...) -> one per real slot (R, ...), shared context rows repeated."""
        return packed if self.gather is None else packed.index_select(0, self.gather)
