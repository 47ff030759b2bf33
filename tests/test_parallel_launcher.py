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
    """A cell refused as a single run would be (exit 2: here a negative learning rate) is reported naming the
    cell, and the sweep's other cell still runs to its done marker; the sweep exits non-zero. Before, the
    refusal's sys.exit ended the sweep: the basic launcher never started the next cell and the parallel one
    lost its running sibling."""
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "replaylab.train", "-m", f"launcher={launcher}", "trainer.lr=-1,0.001",
           "budget.max_updates=1", "trainer.prompts_per_iteration=4", "budget.max_response_tokens=8",
           "eval=none", "eval.probe_size=0", "wandb.enabled=false", "progress=false", "trainer.threads=1",
           f"output_root={out}", *MICRO_WORLD]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    failed = [line for line in proc.stderr.splitlines() if line.startswith("replaylab: sweep cell #0 (")]
    assert len(failed) == 1 and "trainer.lr=-1," in failed[0], proc.stderr[-3000:]
    assert failed[0].endswith("failed (exit code 2 as a single run): invalid config: trainer.lr: must be a positive "
                              "finite number, got -1.0"), failed[0]
    done = list((out / "default").glob("*/done.json"))
    assert len(done) == 1, proc.stderr[-3000:]
    assert OmegaConf.load(done[0].parent / "config.yaml").trainer.lr == 0.001
