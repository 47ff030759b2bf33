"""Tidy result rows: the source of truth of every run, one metric value per row, on disk.

Every row carries the run's identity (config hash, strategy, trainer, model, budget, data order,
seed), the step it was measured at, software versions and the budget ledger at that moment, so
any table can be rebuilt from rows alone and compared at matched budgets.
"""

from __future__ import annotations

import hashlib
import json
import platform
from functools import lru_cache
from pathlib import Path
from typing import Any

from replaylab.storage import atomic_write


class RowsMismatch(RuntimeError):
    """rows.jsonl does not hold the rows a checkpoint says were written."""


@lru_cache(maxsize=1)
def code_digest() -> str:
    """12 hex digits of a hash over replaylab's own source files: changes with any code change,
    committed or not, editable or installed."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def versions() -> str:
    """Software versions, the CPU, the matmul kernel that ran (`trainer.matmul=auto` resolves per
    machine) and the GPU if the run used one. The CPU is part of it because CPU float results are
    bitwise reproducible only on the same CPU model: kernels block and vectorise sums per instruction
    set and cache sizes, so the same config and seed give other numbers on another CPU
    (docs/testbed.md measures by how much)."""
    from replaylab.models import kernels

    return f"{_package_versions()} cpu={cpu_model()} matmul={kernels.active()}{gpu_model()}"


def gpu_model() -> str:
    """` gpu=<name>/cuda<version>` (e.g. ` gpu=NVIDIA_H200/cuda13.0`) once this process has put work on
    a CUDA device, else empty: a CPU run on a machine that has a GPU says nothing of it."""
    import torch

    if not torch.cuda.is_initialized():
        return ""
    return f" gpu={'_'.join(torch.cuda.get_device_name().split())}/cuda{torch.version.cuda}"


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name and the vector instruction set torch dispatches to, with no spaces
    (e.g. `AMD_EPYC_9R45/AVX512`)."""
    import torch

    from replaylab.models import cpu

    return f"{'_'.join(cpu.model_name().split())}/{torch.backends.cpu.get_cpu_capability()}"


@lru_cache(maxsize=1)
def _package_versions() -> str:
    import importlib.metadata as md

    parts = [f"python={platform.python_version()}", f"replaylab_code={code_digest()}"]
    for pkg in ("replaylab", "torch", "transformers", "math-verify", "vllm"):
        try:
            parts.append(f"{pkg}={md.version(pkg)}")
        except md.PackageNotFoundError:
            pass
    return " ".join(parts)


class RowWriter:
    """Appends rows to `rows.jsonl`. A checkpoint keeps a copy of the rows written so far
    (`snapshot`); on resume `restore` checks the file against it before trusting it."""

    def __init__(self, path: Path, identity: dict[str, Any]):
        self.path = path
        self.identity = {**identity, "versions": versions()}
        self.count = sum(1 for _ in open(path, "rb")) if path.exists() else 0
        self.mirrors: list = []  # objects with log_rows(rows) (the wandb mirror)

    def _lines(self) -> list[str]:
        return self.path.read_bytes().decode("utf-8", errors="replace").splitlines(keepends=True) if self.path.exists() else []

    def truncate(self, n: int) -> None:
        """Keep the first `n` rows (atomically: a kill during the rewrite leaves the old file)."""
        lines = self._lines()[:n]
        if self.path.exists():
            atomic_write(self.path, "".join(lines))
        self.count = len(lines)

    def snapshot(self) -> str:
        """The rows written so far, as text (kept in each checkpoint)."""
        return "".join(self._lines()[: self.count])

    def restore(self, n: int, snapshot: str | None, rebuild: bool = False) -> None:
        """Resume at a checkpoint that had written `n` rows: the file must start with exactly those
        rows (its copy `snapshot`); later rows are dropped. A short or different file stops the run,
        naming the first line that differs, unless `rebuild`, which rewrites the rows from the copy."""
        lines = self._lines()
        if snapshot is None:  # a checkpoint from before snapshots: the count is all there is to check
            expected = None
            bad = next((i for i, line in enumerate(lines[:n]) if not _is_row(line)), None)
            if bad is None and len(lines) < n:
                bad = len(lines)
        else:
            expected = snapshot.splitlines(keepends=True)
            bad = next((i for i, (a, b) in enumerate(zip(lines, expected)) if a != b), None)
            if bad is None and len(lines) < len(expected):
                bad = len(lines)
        if bad is not None:
            if rebuild and expected is not None:
                atomic_write(self.path, snapshot)
                self.count = len(expected)
                return
            found = "ends" if bad >= len(lines) else "differs from the checkpoint's copy"
            hint = ("rerun with resume_rows=rebuild to rewrite the rows from the checkpoint's copy"
                    if expected is not None else "this checkpoint has no copy of the rows; remove the run directory to start over")
            raise RowsMismatch(f"{self.path}:{bad + 1}: the checkpoint wrote {n} rows but the file {found} at line "
                               f"{bad + 1}; {hint}")
        self.truncate(n)

    def verify(self) -> None:
        """Every row parses and there are exactly as many as were written (before marking done)."""
        lines = self._lines()
        for i, line in enumerate(lines):
            if not _is_row(line):
                raise RowsMismatch(f"{self.path}:{i + 1}: not a JSON row; the run is not marked done")
        if len(lines) != self.count:
            raise RowsMismatch(f"{self.path}: {len(lines)} rows on disk, {self.count} written by this run; "
                               "another process wrote to it? The run is not marked done")

    def mirror_again(self) -> None:
        """Hand every row on disk to the mirrors again (after a resume): a killed process never sent its last
        steps to wandb (a step is committed when the next one is logged), and an offline resume writes a new
        log. The wandb mirror skips steps its run already holds."""
        if self.mirrors:
            rows = read_rows(self.path) if self.path.exists() else []
            for m in self.mirrors:
                m.log_rows(rows)

    def write(self, split: str, update: int, iteration: int, metrics: dict[str, float], ledger: dict,
              benchmark: str = "", n: dict[str, int] | None = None) -> list[dict]:
        rows = []
        for metric, value in metrics.items():
            if value is None:
                continue
            rows.append({
                **self.identity, "split": split, "update": update, "iteration": iteration,
                "benchmark": benchmark, "metric": metric, "value": float(value),
                "n": (n or {}).get(metric), **{f"ledger_{k}": v for k, v in ledger.items()},
            })
        with open(self.path, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        self.count += len(rows)
        for m in self.mirrors:
            m.log_rows(rows)
        return rows


class NullRows:
    """What ranks other than 0 write to: nothing, but the same row count, so checkpoints agree."""

    def __init__(self):
        self.count = 0
        self.mirrors: list = []

    def truncate(self, n: int) -> None:
        self.count = n

    def snapshot(self) -> str:
        return ""

    def restore(self, n: int, snapshot: str | None, rebuild: bool = False) -> None:
        self.count = n

    def verify(self) -> None:
        pass

    def mirror_again(self) -> None:
        pass

    def write(self, split: str, update: int, iteration: int, metrics: dict[str, float], ledger: dict,
              benchmark: str = "", n: dict[str, int] | None = None) -> list[dict]:
        self.count += sum(v is not None for v in metrics.values())
        return []


def _is_row(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict) and line.endswith("\n")
    except json.JSONDecodeError:
        return False


def read_rows(path: Path) -> list[dict]:
    """Rows of one run (or of every run under a directory)."""
    files = [path] if path.is_file() else sorted(path.rglob("rows.jsonl"))
    out = []
    for f in files:
        with open(f, "rb") as fh:  # bytes, so that a byte that is not UTF-8 is named with its line
            for lineno, raw in enumerate(fh, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise ValueError(f"{f}:{lineno}: not UTF-8 text (byte {raw[e.start]:#04x} at offset {e.start} of the line); "
                                     "rows.jsonl is written as UTF-8 JSON: the file was damaged after") from e
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{f}:{lineno}: not a JSON row ({e})") from e
                if not isinstance(row, dict):
                    raise ValueError(f"{f}:{lineno}: not a JSON row (a JSON {type(row).__name__}, not an object)")
                out.append(row)
    return out
