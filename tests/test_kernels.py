"""The matmul kernel choice (models/kernels.py, `trainer.matmul`): oneDNN's linear computes F.linear's
forward and gradients, the choice is checked, and a real run uses (and records) the kernel it names."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import load_rows
from replaylab.models import kernels

pytestmark = pytest.mark.skipif(not kernels.onednn_available(), reason="this torch build has no oneDNN linear kernel")


@pytest.mark.parametrize("shape", [
    ((3, 40, 384), 96),   # 3-D input, inner dimension over 128 (another summation order than MKL's)
    ((200, 64), 768),     # x narrower than dy: dW is computed as (x^T dy)^T
    ((50, 512), 32),      # x wider than dy: dW = dy^T x
])
@pytest.mark.parametrize("bias", [False, True])
def test_onednn_linear_computes_f_linears_forward_and_gradients(shape, bias):
    (x_shape, out) = shape
    torch.manual_seed(0)
    x = torch.randn(*x_shape, dtype=torch.float64)
    w = torch.randn(out, x_shape[-1], dtype=torch.float64) / x_shape[-1] ** 0.5
    b = torch.randn(out, dtype=torch.float64) if bias else None
    dy = torch.randn(*x_shape[:-1], out, dtype=torch.float64)
    # the float64 reference, and the float32 operands the kernel sees
    ref_params = [t.clone().requires_grad_() for t in (x, w) + ((b,) if bias else ())]
    ref = F.linear(*ref_params[:2], ref_params[2] if bias else None)
    ref_grads = torch.autograd.grad(ref, ref_params, dy)
    params = [t.float().requires_grad_() for t in (x, w) + ((b,) if bias else ())]
    kernels.use("onednn")
    y = kernels.linear(*params[:2], params[2] if bias else None)
    assert y.grad_fn is not None and "OneDNN" in type(y.grad_fn).__name__  # the kernel ran, not a fallback
    grads = torch.autograd.grad(y, params, dy.float())
    torch.testing.assert_close(y.double(), ref, atol=1e-5 * ref.abs().max().item(), rtol=0)
    for g, r in zip(grads, ref_grads):
        assert g.shape == r.shape
        torch.testing.assert_close(g.double(), r, atol=1e-5 * r.abs().max().item(), rtol=0)


def test_dense_products_equal_the_trainers_linear_under_either_kernel():
    torch.manual_seed(0)
    x, w, r, b = torch.randn(5, 384), torch.randn(96, 384) / 384**0.5, torch.randn(5, 96), torch.randn(96)
    for kernel in ("onednn", "blas"):
        kernels.use(kernel)
        p = kernels.pack(w)
        assert p.kernel == kernel
        torch.testing.assert_close(kernels.dense(x, p, b), F.linear(x, w, b))
        torch.testing.assert_close(kernels.dense_add(r, x, p), r + F.linear(x, w))
    kernels.use("blas")  # blas keeps the decoder's earlier layout: x @ W^T through a contiguous W^T, bit for bit
    assert torch.equal(kernels.dense(x, kernels.pack(w)), x @ w.t().contiguous())


def test_the_choice_is_checked():
    with pytest.raises(ValueError, match="trainer.matmul"):
        kernels.use("mkl")
    for choice in ("onednn", "blas"):
        with pytest.raises(ValueError, match=f"trainer.matmul={choice}.*no effect"):
            kernels.use(choice, "cuda")
    assert kernels.use("auto", "cuda") == "blas"


def test_auto_picks_the_kernel_by_cpu_vendor(monkeypatch):
    """oneDNN on AMD (where MKL runs AVX2 code), MKL on Intel (its own AVX-512 path): measured in
    docs/speed.md. The vendor is read from the same /proc/cpuinfo field a real machine has."""
    from replaylab.models import cpu

    for vendor, expected in (("AuthenticAMD", "onednn"), ("GenuineIntel", "blas"), (None, "onednn")):
        monkeypatch.setattr(cpu, "cpuinfo", lambda field, v=vendor: v if field == "vendor_id" else None)
        assert kernels.use("auto", "cpu") == expected, vendor
        assert kernels.active() == expected
    monkeypatch.setattr(kernels, "onednn_available", lambda: False)
    assert kernels.use("auto", "cpu") == "blas"  # no oneDNN in this torch: BLAS whatever the vendor


def test_cpuinfo_reads_the_vendor_and_model_of_this_machine():
    from replaylab.models import cpu

    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if "vendor_id" not in text:
        pytest.skip("no vendor_id in /proc/cpuinfo on this machine")
    first = next(line for line in text.splitlines() if line.startswith("vendor_id"))
    assert cpu.vendor() == first.split(":", 1)[1].strip()
    assert cpu.model_name() and cpu.model_name() != "unknown"


@pytest.mark.parametrize("choice", ["onednn", "blas", "auto"])
def test_a_run_uses_and_records_the_kernel_it_names(run_train, monkeypatch, choice):
    kernel = kernels.auto_cpu_kernel() if choice == "auto" else choice  # auto: this machine's vendor decides
    calls = []
    real = kernels._mm
    monkeypatch.setattr(kernels, "_mm", lambda *a: calls.append(1) or real(*a))
    _, run_dir = run_train([f"trainer.matmul={choice}", "budget.max_updates=1"])
    assert bool(calls) == (kernel == "onednn")  # decoding, scoring and the update all went through it, or none did
    rows = load_rows(run_dir)
    assert rows and all(r["versions"].endswith(f"matmul={kernel}") for r in rows)


def test_an_unknown_choice_is_a_config_error(run_train):
    from replaylab.config import ConfigError

    with pytest.raises(ConfigError, match="trainer.matmul"):
        run_train(["trainer.matmul=mkl"])
