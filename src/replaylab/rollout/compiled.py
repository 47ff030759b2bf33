"""`rollout.compile`: the lean decoder's one-token step compiled by inductor (`torch.compile`).

Why: a decode step of a tiny model on a CPU is a few dozen small ops (norms, rotary, SwiGLU, cache
writes, attention's softmax) around nine small matmuls, and eager PyTorch spends about as long
dispatching the small ops as computing the matmuls. Inductor fuses the elementwise ops into a handful of
generated C++ kernels and calls everything from generated C++ (`cpp_wrapper`), without per-op dispatch.
On the 2-core AMD Zen 4, 64-row generate calls ran 1.2-1.3x faster than with the eager
`LeanDecoder.forward`, and a training run's generation phase 1.25-1.5x (docs/speed.md). It costs a
compilation per process (13-22 s on 2 cores the first time; inductor caches the generated code on disk,
so later processes take about 7 s), so it is opt-in.

One trace serves every batch and cache length: the batch (it shrinks when finished rows are dropped),
the cache length (prompt width + response budget) and the number of slots written so far are symbolic,
the model's sizes are constants. Like the eager step, it attends over the slots written so far (the key
mask's width), not the whole preallocated cache, whose other slots are uninitialised. Prefill stays on
the eager forward (one call per batch). The maths is the eager step's (the same weights, norms, rotary,
grouped-query attention); the fused kernels sum in another order, so log-probs agree within float
rounding, not bit for bit, and a run's samples part from a `compile=false` run's once a near-tie falls
the other way (the flag is in the config hash).
tests/test_rollout_compiled.py checks greedy tokens against `rollout=hf`, behaviour log-probs against
the trainer's recomputation, repeatability, that a NaN-filled cache gives the same tokens (no unwritten
slot is read), and that one graph serves every call from the first, shrinking batches included.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_steps: dict[tuple, object] = {}  # compiled steps by model geometry, shared by every decoder of the process


def step_weights(dec) -> list[torch.Tensor]:
    """The decoder's packed weights as (in, out) matrices (`x @ W`), per layer: ln1, qkv, qkv bias, q/k
    norm, o, ln2, gate_up, down; then the final norm and the output head. A model without q/k projection
    biases (Qwen3, Llama) or q/k norms (Qwen2, Llama) gets an empty tensor there (the trace branches on
    its size; a None entry broke dynamo's guards)."""
    def t(p):  # a blas-packed weight is already (in, out); a oneDNN one is (out, in)
        return p.tensor if p.kernel == "blas" else p.tensor.t()
    none = dec.embed.new_empty(0)
    flat = []
    for w in dec.layers:
        flat += [w.ln1, t(w.qkv), none if w.qkv_b is None else w.qkv_b, none if w.qk_norm is None else w.qk_norm,
                 t(w.o), w.ln2, t(w.gate_up), t(w.down)]
    flat += [dec.norm, t(dec.lm_head)]
    # The model's sizes are constants of the trace. Left symbolic they would share a symbol with any
    # batch size that happens to equal one (dynamo's duck sizing) and recompile when the batch shrinks.
    for w in flat + [dec.embed]:
        for x in (w, w._base):
            if x is not None:
                torch._dynamo.mark_static(x)
    return flat


def decode_step(dec, flat: list[torch.Tensor], ids: torch.Tensor, slot: int, cos: torch.Tensor, sin: torch.Tensor,
                cache) -> torch.Tensor:
    """Float logits (B, V) of one new token per row, as `dec.forward(ids[:, None], ...)` computes them:
    ids (B,) written at cache slot `slot`, cos/sin (B, 1, D) its rotary tables (`dec.rotary_tables`)."""
    key = (dec.heads, dec.kv_heads, dec.eps, dec.scale)
    if key not in _steps:
        # cpp.threads=1: the generated kernels run on one thread (the matmuls they call still use torch's
        # threads). With inductor's own parallel regions, the eager phases of a training run (the loss's
        # forward/backward, teacher scoring) ran 8-13% slower once the step had run in the process.
        step = torch.compile(_make_step(*key), dynamic=True, fullgraph=True,
                             options={"cpp_wrapper": True, "cpp.threads": 1})
        _trace_on_distinct_sizes(step, dec, flat)
        _steps[key] = step
    # Fresh tensors, never views: dynamo guards on an input's base, so a view in one call and a fresh
    # tensor in the next (after the batch shrank) would recompile.
    # The key mask up to the new slot, a fresh copy: its width is how many cache slots the step attends over.
    return _steps[key](flat, dec.embed, ids.clone(), torch.tensor([slot], device=ids.device), cos.contiguous(),
                       sin.contiguous(), cache.k, cache.v, cache.key_bias[:, :, : slot + 1].clone())


def _trace_on_distinct_sizes(step, dec, flat: list[torch.Tensor]) -> None:
    """Trace the step once on sizes that equal no other (3 rows, 6 key rows, 5 of 7 slots written).
    Dynamo's duck sizing gives sizes that are equal at the first trace one symbol: a first real step
    whose key mask is as wide as its batch (prompt width + 1 = rows) or as the head size would tie
    them, and the next step would compile again (seconds). The graph traced here serves every later
    call; the throwaway cache is zero-filled so the call reads no uninitialised memory."""
    device = dec.device
    cache = dec.new_cache(3, 7)
    for t in cache.k + cache.v:
        t.zero_()
    rotary = torch.zeros(3, 1, dec.head_dim, dtype=dec.embed.dtype, device=device)
    step(flat, dec.embed, torch.zeros(3, dtype=torch.long, device=device), torch.tensor([4], device=device),
         rotary, rotary.clone(), cache.k, cache.v, torch.zeros(3, 1, 5, dtype=dec.embed.dtype, device=device))


def _make_step(heads: int, kv_heads: int, eps: float, scale: float):
    H, Hk = heads, kv_heads  # constants of the trace (closure cells), not symbolic inputs
    G = H // Hk

    def step(flat: list, embed: torch.Tensor, ids: torch.Tensor, slot: torch.Tensor, cos: torch.Tensor,
             sin: torch.Tensor, keys: list, values: list, key_bias: torch.Tensor) -> torch.Tensor:
        # keys (B * H_kv, D, S_max) and values (B * H_kv, S_max, D) per layer: KVCache's layout; key_bias
        # (B, 1, S) masks the S slots written so far (the new one included), the only ones attended over.
        B, D, S = ids.shape[0], cos.shape[-1], key_bias.shape[-1]
        x = F.embedding(ids, embed)
        bias = key_bias.unsqueeze(1).expand(B, Hk, 1, S).reshape(B * Hk, 1, S)
        for i in range(len(keys)):
            ln1, qkv_w, qkv_b, qk_norm, o, ln2, gate_up, down = flat[8 * i : 8 * i + 8]
            qkv = F.rms_norm(x, (x.shape[-1],), ln1, eps) @ qkv_w
            if qkv_b.numel():
                qkv = qkv + qkv_b
            qkv = qkv.view(B, H + 2 * Hk, D)
            qk, v = qkv[:, : H + Hk], qkv[:, H + Hk :]
            if qk_norm.numel():
                qk = F.rms_norm(qk, (D,), None, eps) * qk_norm
            qk = qk * cos + qk.roll(D // 2, dims=-1) * sin
            q, k = qk[:, :H], qk[:, H:]
            keys[i].index_copy_(2, slot, k.reshape(B * Hk, D, 1))
            values[i].index_copy_(1, slot, v.reshape(B * Hk, 1, D))
            scores = torch.baddbmm(bias, q.reshape(B * Hk, G, D), keys[i][:, :, :S], alpha=scale)
            att = torch.bmm(torch.softmax(scores, dim=-1), values[i][:, :S]).reshape(B, H * D)
            x = x + att @ o
            gate, up = (F.rms_norm(x, (x.shape[-1],), ln2, eps) @ gate_up).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ down
        norm, head = flat[-2], flat[-1]
        return (F.rms_norm(x, (x.shape[-1],), norm, eps) @ head).float()

    return step
