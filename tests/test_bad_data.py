"""A bad data file stops a run in seconds, before any model loads, with exit 2 naming file:line; and a failed
`replaylab evaluate` leaves the earlier evaluation's rows as they were (bad-input audit, F1 and F11)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import MICRO_WORLD
from replaylab.tasks.data_root import DATA_ROOT_ENV, DataError, default_data_root

shared_root = default_data_root()
needs_data = pytest.mark.skipif(shared_root is None, reason="no math data root (../shared/data/math)")


def corrupted_copy(tmp_path, name: str, line: int):
    """A data root holding `name` with line `line` cut short (invalid JSON)."""
    root = tmp_path / "bad_root"
    root.mkdir()
    lines = (shared_root / name).read_text().splitlines(keepends=True)
    lines[line - 1] = lines[line - 1][:20] + "\n"
    (root / name).write_text("".join(lines))
    return root


@needs_data
def test_a_bad_training_file_is_named_before_the_model_loads(run_train, tmp_path, monkeypatch):
    import replaylab.training.build as build

    root = corrupted_copy(tmp_path, "aime_1983_2023.jsonl", 3)

    def no_model(*_a, **_k):
        raise AssertionError("the policy loaded before the data was read")

    monkeypatch.setattr(build, "load_policy", no_model)
    with pytest.raises(DataError, match=r"aime_1983_2023.jsonl:3: not valid JSON"):
        run_train(["trainer=grpo", "teacher=none", "data=aime_1983_2023", f"data.data_root={root}", "eval=none"])
    proc = subprocess.run([sys.executable, "-m", "replaylab.train", "trainer=grpo", "teacher=none", "data=aime_1983_2023",
                           f"data.data_root={root}", "eval=none", "wandb.enabled=false", f"output_root={tmp_path / 'runs'}",
                           *MICRO_WORLD], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(f"replaylab: invalid data: {root}/aime_1983_2023.jsonl:3: "
                                                           "not valid JSON"), proc.stderr[-2000:]


@needs_data
def test_a_failed_evaluation_keeps_the_rows_of_the_last_one(tmp_path):
    """The data root comes from the environment (not part of the config hash), so both calls write to one
    eval-<hash> directory. The second fails on a bad line: exit 2 naming it, and the first call's rows and
    summary are untouched (they were emptied before the benchmarks were read)."""
    good = tmp_path / "good_root"
    good.mkdir()
    shutil.copy(shared_root / "aime2024.jsonl", good)
    bad = corrupted_copy(tmp_path, "aime2024.jsonl", 5)
    cmd = [sys.executable, "-m", "replaylab.evaluate", "model.name_or_path=tiny://student", "eval.benchmarks=[aime2024]",
           "eval.max_problems=2", "eval.max_new_tokens=8", "wandb.enabled=false", f"output_root={tmp_path / 'out'}",
           "trainer.threads=1", *MICRO_WORLD]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, DATA_ROOT_ENV: str(good)})
    assert first.returncode == 0, first.stderr[-2000:]
    (run,) = (tmp_path / "out" / "default").glob("eval-*")
    rows, summary = (run / "rows.jsonl").read_text(), (run / "summary.json").read_text()
    assert any(json.loads(line)["benchmark"] == "aime2024" for line in rows.splitlines())
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, DATA_ROOT_ENV: str(bad)})
    assert second.returncode == 2, second.stderr[-2000:]
    assert f"replaylab: invalid data: {bad}/aime2024.jsonl:5: not valid JSON" in second.stderr, second.stderr[-2000:]
    assert (run / "rows.jsonl").read_text() == rows and (run / "summary.json").read_text() == summary
    assert not (run / "rows.jsonl.new").exists()


def test_an_evaluation_checkpoint_that_is_not_one_is_a_config_error_before_the_model_loads(tmp_path):
    """A directory without checkpoints/ was loaded as a sharded checkpoint after the model: a traceback about
    a missing .metadata file."""
    (tmp_path / "not_a_run").mkdir()
    proc = subprocess.run([sys.executable, "-m", "replaylab.evaluate", f"eval.checkpoint={tmp_path / 'not_a_run'}",
                           "model.name_or_path=/nonexistent", f"output_root={tmp_path / 'out'}", "wandb.enabled=false"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("replaylab: invalid config: eval.checkpoint: no checkpoint found")


@pytest.mark.parametrize("override,key", [("teacher.name_or_path=tiny://foo", "teacher.name_or_path"),
                                          ("model.name_or_path=./no_such_model_dir", "model.name_or_path")])
def test_a_model_name_that_cannot_load_is_a_config_error_naming_its_key(run_train, override, key):
    """An unknown tiny model raised a ValueError traceback after the student had loaded, and a missing local
    directory transformers' OSError; neither named the key (bad-input audit, F12)."""
    from replaylab.config import ConfigError

    with pytest.raises(ConfigError) as err:
        run_train([override])
    assert str(err.value).startswith(f"{key}: "), str(err.value)
