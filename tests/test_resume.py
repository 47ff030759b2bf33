"""Checkpoint / resume through the real entry point: a SIGKILLed run, rerun with the same command,
writes the same rows as an uninterrupted one; a diverged run keeps its last good checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import FAST_RUN, MICRO_WORLD, comparable, load_rows
from replaylab.training.trainer import TrainingDiverged


def train_cmd(root, extra):
    overrides = MICRO_WORLD + FAST_RUN + [f"output_root={root}", "budget.max_updates=10",
                                          "trainer.checkpoint_every=2", "trainer.eval_every=4"] + extra
    return [sys.executable, "-m", "replaylab.train", *overrides]


def only_run(root):
    runs = [p.parent for p in (root / "default").glob("*/config.yaml")]
    assert len(runs) == 1
    return runs[0]


# R-OPD: every comparison hits; windows of one update after no warm-up: replay from iteration 3.
# ReOPD: a teacher-written prefix pool in the strategy state, continuations in every batch.
@pytest.mark.parametrize("extra", [["trainer=opd"], ["trainer=opd", "strategy=ropd", "strategy.tolerance=1e9",
                                                     "trainer.warmup_updates=0", "strategy.window=1"],
                                   ["trainer=opd", "strategy=reopd"]],
                         ids=["opd-current", "ropd-mid-replay", "reopd-prefix-pool"])
def test_sigkill_then_rerun_reproduces_rows(tmp_path, extra):
    expected, got = uninterrupted_and_resumed_rows(tmp_path, extra)
    assert got == expected


def uninterrupted_and_resumed_rows(tmp_path, extra) -> tuple[list[dict], list[dict]]:
    """The comparable rows of an uninterrupted run, and of the same run SIGKILLed once its update-6
    checkpoint exists and then rerun with the same command."""
    full = tmp_path / "full"
    subprocess.run(train_cmd(full, extra), check=True, capture_output=True)
    expected = comparable(load_rows(only_run(full)))

    killed = tmp_path / "killed"
    proc = subprocess.Popen(train_cmd(killed, extra), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:  # kill as soon as a mid-run checkpoint (update 6) exists
        latest = list(killed.glob("default/*/checkpoints/latest"))
        if latest and latest[0].read_text().strip() >= "update_0000006.pt":
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    run = only_run(killed)
    assert not (run / "done.json").exists(), "the run finished before it could be killed"
    subprocess.run(train_cmd(killed, extra), check=True, capture_output=True)
    return expected, comparable(load_rows(run))


def test_nan_loss_stops_with_clear_error_and_keeps_checkpoint(run_train, monkeypatch):
    from replaylab.objectives.opd import OPDFullReverseKL

    real = OPDFullReverseKL.loss
    calls = {"n": 0}

    def poisoned(self, *args, **kwargs):
        loss, metrics = real(self, *args, **kwargs)
        calls["n"] += 1
        # update 3: one backward per update (current reads no gradient groups)
        return (loss * float("nan") if calls["n"] > 2 else loss), metrics

    monkeypatch.setattr(OPDFullReverseKL, "loss", poisoned)
    overrides = ["budget.max_updates=5", "trainer.checkpoint_every=1"]
    with pytest.raises(TrainingDiverged, match="non-finite loss .* update 3"):
        run_train(overrides)
    run = run_train.run_dir(overrides)
    assert (run / "checkpoints" / "latest").read_text() == "update_0000002.pt"
    assert not (run / "done.json").exists()
