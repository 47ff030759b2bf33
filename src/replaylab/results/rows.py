"""Tidy result rows: the source of truth of every run, one metric value per row, on disk.

Every row carries the run's identity (config hash, strategy, trainer, model, budget, data order,
seed), the step it was measured at, software versions and the budget ledger at that moment, so
any table can be rebuilt from rows alone and compared at matched budgets.
"""

from __future__ import annotations

import json
import platform
from functools import lru_cache
from pathlib import Path
from typing import Any


@lru_cache(maxsize=1)
def versions() -> str:
    import importlib.metadata as md

    parts = [f"python={platform.python_version()}"]
    for pkg in ("replaylab", "torch", "transformers", "math-verify", "vllm"):
        try:
            parts.append(f"{pkg}={md.version(pkg)}")
        except md.PackageNotFoundError:
            pass
    return " ".join(parts)


class RowWriter:
    """Appends rows to `rows.jsonl`; `truncate(n)` drops rows written after a checkpoint."""

    def __init__(self, path: Path, identity: dict[str, Any]):
        self.path = path
        self.identity = {**identity, "versions": versions()}
        self.count = sum(1 for _ in open(path)) if path.exists() else 0
        self.mirrors: list = []  # objects with log_rows(rows) (the wandb mirror)

    def truncate(self, n: int) -> None:
        if not self.path.exists():
            self.count = 0
            return
        lines = self.path.read_text().splitlines(keepends=True)[:n]
        self.path.write_text("".join(lines))
        self.count = len(lines)

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
            for r in rows:
                f.write(json.dumps(r) + "\n")
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

    def write(self, split: str, update: int, iteration: int, metrics: dict[str, float], ledger: dict,
              benchmark: str = "", n: dict[str, int] | None = None) -> list[dict]:
        self.count += sum(v is not None for v in metrics.values())
        return []


def read_rows(path: Path) -> list[dict]:
    """Rows of one run (or of every run under a directory)."""
    files = [path] if path.is_file() else sorted(path.rglob("rows.jsonl"))
    out = []
    for f in files:
        with open(f) as fh:
            for lineno, line in enumerate(fh, 1):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{f}:{lineno}: not a JSON row ({e})") from e
    return out
