"""Which kernel runs the float32 CPU matmuls of the lean forward and the lean decoder.

Why: torch's x86 CPU wheels send float32 `F.linear` to MKL's sgemm, which on AMD processors runs an
AVX2 code path; oneDNN (bundled in the same wheel, the kernels inductor's CPU backend uses) JIT-compiles
for the processor it finds. On the 2-core AMD EPYC (Zen 5, AVX-512) this project's CI and sessions
ran on, oneDNN ran the tiny models' projections at ~220 GFLOP/s per thread against MKL's ~90 (a
3600 x 128 x 768 forward 3.2 vs 8.1 ms on one thread; forward and backward 12 vs 23 ms; docs/speed.md).
On an Intel Xeon (AVX-512, 2 cores), where MKL runs its own AVX-512 code, it is the other way round:
BLAS took 0.82-0.86 of oneDNN's time per OPD, GRPO and tinylong iteration and 0.71 per decode step
(`benchmarks/bench_matmul_kernel.py`, docs/speed.md). So `auto` picks by vendor, which is a fixed
property of the machine: a timing probe would choose differently from run to run and so give the
same config and seed other numbers.

`onednn` computes the same products with another summation order: equal bit for bit when the inner
dimension is at most 128 and within float rounding (~1e-7 relative) above, so a run's numbers drift
from a `blas` run's after some updates, like any kernel change. It is deterministic for a given
shape (the same config and seed give the same numbers). The choice is process-wide, like torch's own
backend flags: the trainer sets it from `trainer.matmul` before it builds anything, and result rows
record the kernel that ran (`results.rows.versions`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from replaylab.models import cpu

CHOICES = ("auto", "onednn", "blas")


class KernelUnavailable(RuntimeError):
    pass


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def auto_cpu_kernel() -> str:
    """`auto` on a CPU: BLAS on Intel processors (MKL's own code path), oneDNN elsewhere where it exists."""
    return "onednn" if onednn_available() and cpu.vendor() != "GenuineIntel" else "blas"


# What a process that never calls `use` runs (a standalone evaluation, a benchmark): auto on a CPU.
_active = auto_cpu_kernel()


def use(choice: str, device: torch.device | str = "cpu") -> str:
    """Select the matmul kernel for `trainer.matmul=choice` on `device`; returns the one selected.
    auto: on a CPU `auto_cpu_kernel()` (by vendor), else torch's BLAS."""
    global _active
    if choice not in CHOICES:
        raise ValueError(f"trainer.matmul must be one of {CHOICES}, got {choice!r}")
    on_cpu = torch.device(device).type == "cpu"
    if choice != "auto" and not on_cpu:
        raise ValueError(f"trainer.matmul={choice} selects a CPU kernel, which has no effect on device {device}: use auto")
    if choice == "onednn":
        if not onednn_available():
            raise KernelUnavailable("trainer.matmul=onednn: this torch build has no oneDNN linear kernel "
                                    "(torch.ops.mkldnn._linear_pointwise); use auto or blas")
    _active = (auto_cpu_kernel() if on_cpu else "blas") if choice == "auto" else choice
    return _active


def active() -> str:
    return _active


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias), through oneDNN when it is selected and the operands are float32 CPU
    tensors; with autograd when any operand needs a gradient."""
    if not _onednn_applies(x, weight):
        return F.linear(x, weight, bias)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)):
        return _OneDNNLinear.apply(x, weight, bias)
    return _mm(x, weight, bias)


@dataclass(frozen=True)
class Packed:
    """A weight laid out for `dense` under the kernel active when it was packed: (out, in) as given
    for oneDNN, transposed to (in, out) and contiguous for BLAS (x @ W^T is then a plain matmul, the
    layout the decoder has always used, so `blas` reproduces earlier runs bit for bit)."""

    kernel: str
    tensor: torch.Tensor


def pack(weight: torch.Tensor) -> Packed:
    if _active == "onednn" and weight.device.type == "cpu" and weight.dtype == torch.float32:
        return Packed("onednn", weight)
    return Packed("blas", weight.t().contiguous())


def dense(x: torch.Tensor, w: Packed, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x W^T + b without autograd (the decoder's products)."""
    if w.kernel == "onednn":
        return _mm(x, w.tensor, bias)
    return torch.addmm(bias, x, w.tensor) if bias is not None else x @ w.tensor


def dense_add(residual: torch.Tensor, x: torch.Tensor, w: Packed) -> torch.Tensor:
    """residual + x W^T without autograd, the add fused into oneDNN's kernel when it runs."""
    if w.kernel == "onednn":
        return torch.ops.mkldnn._linear_pointwise.binary(x, residual, w.tensor, None, "add")
    return residual + x @ w.tensor


def _onednn_applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (_active == "onednn" and x.device.type == "cpu" and x.dtype == torch.float32
            and weight.dtype == torch.float32)


def _mm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    """y = x W^T + b; the backward's two products are linears too: dx = dy W, dW = dy^T x. Not twice
    differentiable (`once_differentiable` raises on create_graph=True instead of a silent wrong answer)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _mm(x, weight, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad2 = grad.reshape(-1, grad.shape[-1])
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = _mm(grad, weight.t(), None)
        if ctx.needs_input_grad[1]:
            # The kernel reads its weight operand through any strides but copies a transposed input to
            # rows, so the narrower of dy and x is the one transposed (a 3,600 x 768 transpose took
            # longer than the product itself): dW = (x^T dy)^T when x has fewer columns.
            x2 = x.reshape(-1, x.shape[-1])
            if x2.shape[1] < grad2.shape[1]:
                dw = _mm(x2.t(), grad2.t(), None).t()
            else:
                dw = _mm(grad2.t(), x2.t(), None)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = grad2.sum(0)
        return dx, dw, db
