"""The wandb loaders give the table builder the same numbers as the local rows.

The wandb side is produced the way a real sweep produces it: the real `WandbMirror.log_rows`
writes each run's rows into a fake run object, which then serves as the public API's run (config,
state, history) and as the source of the web UI's CSV export (config columns, final summary)."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from replaylab.results.frame import flatten, load_experiment
from replaylab.results.rows import read_rows
from replaylab.results.table import build_table
from replaylab.results.wandb_export import load_wandb_csv, parse_key, rows_from_wandb_runs
from replaylab.results.wandb_mirror import WandbMirror

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from analysis.synthetic import write_experiment  # noqa: E402

# What wandb has and the local rows have too: the ledger is mirrored as `ledger/*` at every step.
SAME = ["budget", "strategy", "benchmark", "metric", "mean", "sd", "ci_low", "ci_high", "n", "n_runs", "n_expected",
        "orders", "missing_orders", "updates", "trajectories", "teacher_tokens", "notes"]


class FakeRun:
    """Records `log(values, step)` like wandb.Run and answers like a public-API run."""

    def __init__(self, run_dir: Path, history_style: str = "scan"):
        self.name, self.id = run_dir.name, run_dir.name[-16:]
        self.state = "finished" if (run_dir / "done.json").exists() else "running"
        self.config = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))
        self.step, self.steps = 0, {}
        self.history_style = history_style

    def log(self, values: dict, step: int) -> None:
        self.steps.setdefault(step, {}).update(values)
        self.step = step

    def records(self) -> list[dict]:
        return [{"_step": s, "_runtime": 1.5 * s, **self.steps[s]} for s in sorted(self.steps)]

    def __getattr__(self, name):
        if name == "scan_history" and self.history_style == "scan":
            return lambda: iter(self.records())
        if name == "history" and self.history_style == "history":  # a DataFrame with NaN holes, as pandas=True gives
            return lambda samples=500, pandas=True: pd.DataFrame(self.records())
        raise AttributeError(name)


def mirrored_runs(exp: Path, history_style: str = "scan") -> list[FakeRun]:
    runs = []
    for run_dir in sorted(p.parent for p in exp.glob("*/config.yaml")):
        run = FakeRun(run_dir, history_style)
        mirror = WandbMirror.__new__(WandbMirror)  # the real log_rows, without wandb.init
        mirror.run = run
        mirror.log_rows(read_rows(run_dir / "rows.jsonl"))
        runs.append(run)
    return runs


def csv_export(runs: list[FakeRun], path: Path) -> Path:
    """The web UI's runs-table export: Name, State, ID, dotted config columns, summary columns."""
    lines = []
    for run in runs:
        summary = {}
        for record in run.records():
            summary.update({k: v for k, v in record.items() if not (isinstance(v, float) and math.isnan(v))})
        lines.append({"Name": run.name, "State": run.state, "ID": run.id, **flatten(run.config), **summary})
    pd.DataFrame(lines).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wandb")
    exp = write_experiment(root, experiment="exp", unfinished=("ropd", "tiny_long", 1), updates=20)
    missing = next(p for p in exp.iterdir() if p.name.startswith("opd-current-")
                   and json.loads((p / "rows.jsonl").open().readline())["order"] == 2
                   and "tiny_short" in (p / "config.yaml").read_text())
    shutil.rmtree(missing)  # an order other strategies have
    return exp


def compare(local: pd.DataFrame, remote: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(local[SAME].reset_index(drop=True), remote[SAME].reset_index(drop=True),
                                  check_dtype=False)


def test_parse_key_matches_mirror_format():
    assert parse_key("eval/tiny8/add2/avg@k") == ("eval", "tiny8/add2", "avg@k")
    assert parse_key("train/reverse_kl") == ("train", "", "reverse_kl")
    assert parse_key("_runtime") is None and parse_key("strategy.name") is None


@pytest.mark.parametrize("history_style", ["scan", "history"])
def test_api_runs_give_the_same_table(experiment, history_style):
    local = build_table(load_experiment(experiment))
    remote_rows = rows_from_wandb_runs(mirrored_runs(experiment, history_style))
    remote = build_table(remote_rows)
    assert local.attrs["keys"] == remote.attrs["keys"] == ["budget", "strategy"]
    compare(local, remote)
    assert {"order 2: no run", "order 1: failed/running"} <= set(local["notes"]) and local["n_runs"].min() == 2
    assert remote["trajectories"].notna().all()  # the mirrored ledger, read back at each row's step
    # every update's evaluation is there, so a fixed-update table matches too
    compare(build_table(load_experiment(experiment), update=0), build_table(remote_rows, update=0))


def test_api_rows_match_local_rows_value_for_value(experiment):
    local = load_experiment(experiment)
    remote = rows_from_wandb_runs(mirrored_runs(experiment))
    key = ["run", "split", "update", "benchmark", "metric"]
    merged = local.merge(remote, on=key, suffixes=("", "_wandb"), validate="one_to_one")
    assert len(merged) == len(local) == len(remote)
    assert (merged["value"] == merged["value_wandb"]).all()
    for col in ("strategy", "budget", "order", "model", "teacher", "trainer", "status", "ledger_updates",
                "ledger_trajectories", "ledger_teacher_tokens_scored"):
        assert (merged[col] == merged[f"{col}_wandb"]).all(), col


def test_csv_export_gives_the_same_final_table(experiment, tmp_path):
    path = csv_export(mirrored_runs(experiment), tmp_path / "wandb_export.csv")
    local = build_table(load_experiment(experiment))
    compare(local, build_table(load_wandb_csv(path)))
    budget_axes = dict(metrics=["avg@k", "mean_response_tokens"], benchmarks=["mean"])
    compare(build_table(load_experiment(experiment), **budget_axes), build_table(load_wandb_csv(path), **budget_axes))


def test_cli_reads_a_csv_export(experiment, tmp_path, capsys):
    from replaylab.cli.main import main

    path = csv_export(mirrored_runs(experiment), tmp_path / "export.csv")
    assert main(["table", str(path), "--format", "csv"]) == 0
    assert "order 1: failed/running" in capsys.readouterr().out
    assert (tmp_path / "tables" / "table_avg_at_k.csv").exists()


def test_a_csv_export_of_tail_runs_is_refused_naming_the_sources_that_work(tmp_path):
    """A runs-table export holds one value per metric: it cannot give a tail run's final value (the mean
    over its last eval.tail evaluations), and must not pass its last point off as one."""
    path = tmp_path / "tail.csv"
    pd.DataFrame({"Name": ["a"], "strategy.name": ["current"], "eval.tail": [5], "order": [0],
                  "eval/tiny8/mean/avg@k": [0.5]}).to_csv(path, index=False)
    with pytest.raises(ValueError, match="eval.tail=5.*wandb-offline:DIR"):
        load_wandb_csv(path)


def test_csv_without_name_column_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.csv"
    pd.DataFrame({"x": [1]}).to_csv(path, index=False)
    with pytest.raises(ValueError, match="no Name column"):
        load_wandb_csv(path)
