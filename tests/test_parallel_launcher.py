"""launcher=parallel: sweep cells side by side on one machine (Hydra's joblib launcher), threads split.

A real 2-cell sweep through the CLI: both cells finish, each in a worker process of its own (their
pids differ from each other and from the launcher's), with one torch thread each."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import MICRO_WORLD
from omegaconf import OmegaConf
from test_slurm_launcher import compose_with_hydra


def test_parallel_preset_splits_the_cores():
    cfg = compose_with_hydra(["launcher=parallel"])
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["_target_"].endswith("JoblibLauncher") and launcher["n_jobs"] == 2
    assert cfg.trainer.threads == 1


def test_two_cells_run_in_two_worker_processes(tmp_path):
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "replaylab.train", "-m", "launcher=parallel", "strategy=current,initial",
           "budget.max_updates=1", "trainer.prompts_per_iteration=4", "budget.max_response_tokens=8",
           "eval=none", "eval.probe_size=0", "wandb.enabled=false", "progress=false",
           f"output_root={out}", *MICRO_WORLD]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dirs = sorted((out / "default").glob("*/done.json"))
    dirs = [d.parent for d in dirs]
    assert [d.name.split("-")[1] for d in dirs] == ["current", "initial"]
    pids = {json.loads((d / "done.json").read_text())["pid"] for d in dirs}
    assert len(pids) == 2 and os.getpid() not in pids


@pytest.mark.parametrize("launcher", ["local", "parallel"])
def test_a_failing_cell_does_not_stop_the_sweep(tmp_path, launcher):
    """A cell that stops as a single run would (exit 5: lr=1e10 diverges at its first update) is reported naming
    the cell, and the sweep's other cell still runs to its done marker; the sweep exits non-zero. Before, the
    stop's sys.exit ended the sweep: the basic launcher never started the next cell and the parallel one lost
    its running sibling."""
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "replaylab.train", "-m", f"launcher={launcher}", "trainer.lr=1e10,0.001",
           "trainer.warmup_updates=0", "budget.max_updates=2", "trainer.prompts_per_iteration=4",
           "budget.max_response_tokens=8", "eval=none", "eval.probe_size=0", "wandb.enabled=false", "progress=false",
           "trainer.threads=1", f"output_root={out}", *MICRO_WORLD]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    failed = [line for line in proc.stderr.splitlines() if line.startswith("replaylab: sweep cell #0 (")]
    assert len(failed) == 1 and "trainer.lr=10000000000.0," in failed[0], proc.stderr[-3000:]
    assert "failed (exit code 5 as a single run): training diverged: " in failed[0], failed[0]
    done = list((out / "default").glob("*/done.json"))
    assert len(done) == 1, proc.stderr[-3000:]
    assert OmegaConf.load(done[0].parent / "config.yaml").trainer.lr == 0.001


def test_a_cell_with_a_config_error_stops_the_sweep_before_any_cell_runs(tmp_path):
    """Hydra composes a cell only at its turn: a config error in a later cell surfaced after the cells before it
    had trained (hours, in a real sweep). Every cell is now checked first (cli/sweep_check.py): exit 2 naming
    the cell and the key, nothing run."""
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "replaylab.train", "-m", "trainer.lr=0.001,-1", "budget.max_updates=1", "eval=none",
           "eval.probe_size=0", "wandb.enabled=false", "progress=false", f"output_root={out}", *MICRO_WORLD]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == ("replaylab: invalid config: sweep cell trainer.lr=-1 of 2: trainer.lr: "
                                                    "must be a positive finite number, got -1.0; no cell was run")
    assert not (out / "default").exists()
