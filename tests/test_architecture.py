"""The architecture as a checked contract: import layers, module size, an objective-blind loop."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "replaylab"


def test_import_contracts_hold():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.fail("lint-imports is not installed: the dev extra installs import-linter")
    proc = subprocess.run([exe], capture_output=True, text=True, cwd=SRC.parents[1], timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_no_module_over_350_lines():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 350}
    assert not long, long


def test_the_loop_never_asks_which_objective_or_strategy_runs():
    loop = "".join((SRC / "training" / name).read_text() for name in ("trainer.py", "updates.py"))
    assert not re.findall(r"kind ==|objective ==|\.kind in|\.objective in|strategy\.name ==|getattr\(", loop)
