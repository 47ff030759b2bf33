"""Launching on SLURM without a cluster: the composed launcher node, the exact sbatch script the
launcher would submit, and a real 2-task job through submitit's local executor.

* The launcher presets compose with the right resources (tasks_per_node follows gpus_per_node in
  slurm_multigpu: one process per GPU).
* The real `SlurmLauncher.launch` runs on a 2-cell sweep with submission intercepted at
  `map_array` (nothing reaches sbatch): the executor it built renders, through submitit's own
  `_make_submission_file_text`, the job-array script sbatch would receive.
* `launcher=submitit_local hydra.launcher.tasks_per_node=2` really runs a trivial Hydra app
  (tests/scripts/submitit_probe.py) as 2 tasks per sweep cell; both tasks see submitit's
  environment and join one gloo process group through replaylab.parallel.init_from_env.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
import submitit  # noqa: E402

PROBE = Path(__file__).parent / "scripts" / "submitit_probe.py"


def compose_with_hydra(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from replaylab.paths import conf_dir
    from replaylab.cli.train import register_configs  # noqa: F401  (registers the schemas)

    with initialize_config_dir(config_dir=conf_dir(), version_base=None):
        return compose(config_name="config", overrides=overrides, return_hydra_config=True)


def launcher_node(overrides: list[str]) -> dict:
    return OmegaConf.to_container(compose_with_hydra(overrides).hydra.launcher, resolve=True)


def test_slurm_presets_compose_with_the_requested_resources():
    one = launcher_node(["launcher=slurm"])
    assert one["_target_"].endswith("SlurmLauncher")
    assert (one["tasks_per_node"], one["gpus_per_node"], one["timeout_min"]) == (1, 1, 1440)
    assert one["max_num_timeout"] > 0 and one["signal_delay_s"] == 120
    two = launcher_node(["launcher=slurm", "hydra.launcher.tasks_per_node=2", "hydra.launcher.gpus_per_node=2"])
    assert (two["tasks_per_node"], two["gpus_per_node"]) == (2, 2)
    multi = launcher_node(["launcher=slurm_multigpu", "hydra.launcher.gpus_per_node=2"])
    assert multi["tasks_per_node"] == 2  # one task per GPU follows from gpus_per_node
    assert multi["additional_parameters"] == {"requeue": True}
    local = launcher_node(["launcher=submitit_local", "hydra.launcher.tasks_per_node=2"])
    assert local["_target_"].endswith("LocalLauncher") and local["tasks_per_node"] == 2


@pytest.fixture
def fake_srun(tmp_path, monkeypatch):
    """submitit's SlurmExecutor refuses to exist where `srun` is not on PATH; it is never run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text("#!/bin/sh\necho 'fake srun: nothing is submitted in tests' >&2\nexit 1\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_slurm_launcher_renders_a_two_rank_job_array(tmp_path, fake_srun, monkeypatch):
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
    from submitit.slurm.slurm import SlurmExecutor

    cfg = compose_with_hydra(["launcher=slurm_multigpu", "hydra.launcher.gpus_per_node=2",
                              "hydra.launcher.timeout_min=720", "hydra.launcher.partition=gpu",
                              "hydra.launcher.setup=[source .venv/bin/activate]", f"output_root={tmp_path}"])
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    params.pop("_target_")
    captured: dict = {}

    def intercept_map_array(self, fn, *iterables):
        # Exactly what SlurmExecutor does for an array before calling sbatch (its
        # _internal_process_submissions): a copy of the executor with map_count set.
        inner = self._executor
        array_ex = SlurmExecutor(inner.folder, inner.max_num_timeout)
        array_ex.update_parameters(**inner.parameters)
        array_ex.parameters["map_count"] = len(iterables[0])
        captured["script"] = array_ex._make_submission_file_text(array_ex._submitit_command_str, "test")
        captured["max_num_timeout"] = inner.max_num_timeout
        captured["num_tasks"] = inner._num_tasks()

        class Done:
            def results(self):
                return [None]

        return [Done() for _ in iterables[0]]

    monkeypatch.setattr(submitit.AutoExecutor, "map_array", intercept_map_array)
    launcher = SlurmLauncher(**params)
    launcher.config, launcher.task_function, launcher.hydra_context = cfg, (lambda c: None), object()
    returns = launcher.launch([["order=0"], ["order=1"]], initial_job_idx=0)
    assert len(returns) == 2
    script = captured["script"]
    for line in ("#SBATCH --ntasks-per-node=2", "#SBATCH --gpus-per-node=2", "#SBATCH --nodes=1",
                 "#SBATCH --time=720", "#SBATCH --partition=gpu", "#SBATCH --cpus-per-task=8", "#SBATCH --mem=800GB",
                 "#SBATCH --array=0-1%2",  # two sweep cells, one job array
                 "#SBATCH --signal=USR2@120",  # submitit's pre-kill signal: checkpoint + requeue
                 "#SBATCH --requeue", "#SBATCH --open-mode=append", "source .venv/bin/activate"):
        assert line in script, f"{line!r} missing from:\n{script}"
    assert "srun --unbuffered" in script and "submitit.core._submit" in script
    assert captured["max_num_timeout"] == 3  # requeues after time-outs/preemptions
    assert captured["num_tasks"] == 2  # srun starts 2 tasks: 2 ranks


def test_submitit_local_runs_two_tasks_per_cell_that_form_a_process_group(tmp_path):
    out = tmp_path / "probe"
    env = {**os.environ, "PROBE_OUT": str(out), "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    proc = subprocess.run(
        [sys.executable, str(PROBE), "-m", "launcher=submitit_local", "hydra.launcher.tasks_per_node=2",
         f"output_root={tmp_path / 'runs'}", "order=0,1"],
        env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert sorted(records) == ["order0-rank0", "order0-rank1", "order1-rank0", "order1-rank1"]
    for order in (0, 1):
        r0, r1 = records[f"order{order}-rank0"], records[f"order{order}-rank1"]
        assert (r0["global_rank"], r1["global_rank"]) == (0, 1)
        assert r0["num_tasks"] == r1["num_tasks"] == 2 and r0["job_id"] == r1["job_id"]
        assert r0["env"]["WORLD_SIZE"] == "2" and (r0["env"]["RANK"], r1["env"]["RANK"]) == ("0", "1")
        assert r0["env"]["MASTER_PORT"] == r1["env"]["MASTER_PORT"]
        assert r0["backend"] == "gloo" and r0["dist_world"] == 2
        assert r0["rank_sum"] == r1["rank_sum"] == 3.0  # the all-reduce really crossed processes
        assert r0["order"] == order
    assert records["order0-rank0"]["job_id"] != records["order1-rank0"]["job_id"]  # one job per cell
