"""wandb read back tells what the local rows tell (an audit of 2026-12-07): cells that share a display name
stay separate runs, a run that raised is not a finished one, the budget that ended a run travels with it,
and a run killed and resumed has every evaluation, the final one included. Real runs mirrored offline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from test_resume import train_cmd

from replaylab.results.frame import DONE, UNFINISHED, load_experiment
from replaylab.results.table import build_table
from replaylab.results.wandb_export import load_wandb_offline
from replaylab.training.trainer import TrainingDiverged

WANDB = ["wandb.enabled=true", "wandb.mode=offline", "experiment=wb", "eval.probe_size=0"]
KEY = ["run", "split", "update", "benchmark", "metric"]


def test_cells_sharing_a_display_name_a_failed_run_and_how_runs_ended_read_back_as_local(run_train, tmp_path):
    root = tmp_path / "runs"
    run_train([*WANDB], root)
    run_train([*WANDB, "trainer.prompts_per_iteration=4"], root)  # same strategy, order, seed and budget
    with pytest.raises(TrainingDiverged):
        run_train([*WANDB, "trainer.lr=1e10", "trainer.warmup_updates=0"], root)
    local, offline = load_experiment(root / "wb"), load_wandb_offline(root / "wb")
    assert offline["run"].nunique() == local["run"].nunique() == 3
    assert set(offline["run"]) == set(local["run"])  # named as their run directories
    status = lambda frame: frame.drop_duplicates("run").set_index("run")["status"].sort_index()
    assert status(offline).equals(status(local)) and sorted(status(local)) == [DONE, DONE, UNFINISHED]
    ended = lambda frame: frame[frame["status"] == DONE].drop_duplicates("run").set_index("run")["ended_by"].sort_index()
    assert ended(offline).equals(ended(local)) and set(ended(local)) == {"max_updates"}
    merged = local[local["status"] == DONE].merge(offline, on=KEY, suffixes=("", "_wandb"), validate="one_to_one")
    assert len(merged) == (local["status"] == DONE).sum()
    for col in ("value", "prompts_per_iteration", "ledger_trajectories"):
        assert (merged[col] == merged[f"{col}_wandb"]).all(), col


def test_a_run_killed_after_a_checkpoint_and_resumed_reads_back_every_evaluation(tmp_path):
    """SIGKILL right after the update-4 checkpoint: wandb never got update 4's evaluation (a step is committed
    when the next one is logged); the resumed process logs the rows its checkpoint kept again."""
    root = tmp_path / "runs"
    extra = [*WANDB, "budget.max_updates=8", "trainer.eval_every=2", "trainer.keep_checkpoints=4"]
    script = ("import os, signal, sys\nfrom replaylab.training.trainer import Trainer\n"
              "orig = Trainer.checkpoint\n"
              "def checkpoint(self):\n    orig(self)\n    if self.update == 4:\n        os.kill(os.getpid(), signal.SIGKILL)\n"
              "Trainer.checkpoint = checkpoint\nsys.argv = ['train', *sys.argv[1:]]\n"
              "from replaylab.cli.train import main\nmain()\n")
    # each process its own wandb service, as on a cluster (an earlier in-process run leaves WANDB_SERVICE set,
    # and a shared service still holds the killed process's run id)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}, "WANDB_MODE": "offline"}
    killed = subprocess.run([sys.executable, "-c", script, *train_cmd(root, extra)[3:]], capture_output=True, env=env,
                            check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = subprocess.run(train_cmd(root, extra), capture_output=True, text=True, env=env, check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    local, offline = load_experiment(root / "wb"), load_wandb_offline(root / "wb")
    updates = lambda frame: sorted(set(frame.loc[frame["split"] == "eval", "update"].astype(int)))
    assert updates(offline) == updates(local) == [0, 2, 4, 6, 8]
    same = ["strategy", "benchmark", "metric", "mean", "updates", "trajectories"]
    assert build_table(offline)[same].equals(build_table(local)[same])
    assert set(offline["status"]) == {DONE}
