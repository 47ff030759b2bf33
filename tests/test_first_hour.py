"""What a new user sees (issue 15): a redirected log a person can read, a run that reports its
result, `replaylab show`, labels in run directories and listings, wandb organised by strategy and
read back offline into the same table, and `python -m replaylab.plan` behaving like Hydra."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FAST_RUN, MICRO_WORLD, compose
from replaylab.config import to_object
from replaylab.results.frame import load_experiment
from replaylab.results.report import accuracy_by_update
from replaylab.results.rows import read_rows
from replaylab.results.table import build_table
from replaylab.results.wandb_export import load_wandb_offline

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, cwd: Path | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd or ROOT, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, **kw)


def test_a_redirected_run_log_is_short_readable_and_ends_with_its_result(tmp_path):
    overrides = [o for o in MICRO_WORLD + FAST_RUN if not o.startswith(("budget.max_updates", "trainer.eval_every",
                                                                           "progress"))]
    log = tmp_path / "log.txt"
    with open(log, "w") as out:
        proc = subprocess.run([sys.executable, "-m", "replaylab.train", *overrides, "budget.max_updates=20",
                               "trainer.eval_every=10", f"output_root={tmp_path / 'runs'}"],
                              stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    lines = text.splitlines()
    assert len(lines) <= 200 and "\r" not in text
    assert not any("Loading weights" in x or "it/s]" in x for x in lines), "third-party progress bars in the log"
    evals = [x for x in lines if "eval at update" in x]
    assert [re.search(r"eval at update (\d+)", x).group(1) for x in evals] == ["0", "10", "20"]
    assert all("tiny8 mean" in x for x in evals)
    assert any("update 10/20" in x for x in lines), "no periodic status line"
    [run_dir] = [p.parent for p in (tmp_path / "runs" / "default").glob("*/config.yaml")]
    acc = accuracy_by_update(read_rows(run_dir / "rows.jsonl"))["mean"]
    before, after = f"{100 * acc[0][0]:.1f}%", f"{100 * acc[20][0]:.1f}%"
    summary = text[text.index("replaylab: done"):]
    assert str(run_dir) in summary and re.search(rf"tiny8 mean\s+{re.escape(before)}\s+{re.escape(after)}", summary)
    assert f"update {20}: tiny8 mean" not in summary  # the table, not another eval line
    # Hydra's job log holds the same messages
    [job_log] = (tmp_path / "runs" / "hydra").glob("*/train.log")
    assert "eval at update 20" in job_log.read_text() and "replaylab: done" in job_log.read_text()

    shown = cli("-m", "replaylab.cli.main", "show", str(run_dir))
    assert shown.returncode == 0, shown.stderr
    assert re.search(rf"tiny8 mean\s+{re.escape(before)}\s+{re.escape(after)}", shown.stdout)
    png = run_dir / "accuracy.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    missing = cli("-m", "replaylab.cli.main", "show", str(tmp_path))
    assert missing.returncode == 2 and "rows.jsonl: no such file" in missing.stderr


def test_wandb_offline_runs_read_back_give_the_local_table(run_train, tmp_path):
    """A 2-strategy x 2-order sweep mirrored to wandb offline; its transaction logs, read back, give
    the table the local rows give (ledger budget columns included)."""
    root = tmp_path / "runs"
    for strategy in ("current", "initial"):
        for order in (0, 1):
            run_train(["wandb.enabled=true", "wandb.mode=offline", f"strategy={strategy}", f"order={order}",
                       "experiment=wb", "eval.at_start=true", "budget.max_updates=2", "trainer.eval_every=1"], root)
    local = load_experiment(root / "wb")
    offline = load_wandb_offline(root / "wb")
    assert offline["run"].nunique() == 4 and set(offline["strategy"]) == {"current", "initial"}
    same = ["budget", "strategy", "benchmark", "metric", "mean", "sd", "ci_low", "ci_high", "n", "n_runs", "orders",
            "updates", "trajectories", "teacher_tokens"]
    for update in ("final", 1):
        a = build_table(local, update=update).reset_index(drop=True)
        b = build_table(offline, update=update).reset_index(drop=True)
        assert len(a) > 0
        assert a[same].equals(b[same]), f"update {update}:\n{a[same]}\n{b[same]}"
    # the notebooks read the same source
    sys.path.insert(0, str(ROOT))
    from analysis.run_notebooks import run_notebooks

    run_notebooks(f"wandb-offline:{root / 'wb'}", tmp_path / "figures", names=("tables",))
    assert (tmp_path / "figures" / "table_mean.png").exists()


def test_wandb_runs_are_grouped_by_strategy_label_and_change_id_with_the_code(monkeypatch):
    from replaylab.results.wandb_mirror import wandb_identity

    obj = to_object(compose(["trainer=grpo", "teacher=none", "strategy=repo_recent", "order=2", "experiment=tiny_repo"]))
    ident = wandb_identity(obj, "0123456789abcdef", "code1")
    assert (ident.project, ident.group, ident.job_type) == ("replaylab-tiny_repo", "repo-recent", "tiny")
    assert {"repo-recent", "order=2", "seed=0", "budget=tiny"} <= set(ident.tags)
    assert ident.name == "repo-recent order=2 seed=0 tiny 01234567"
    assert wandb_identity(obj, "0123456789abcdef", "code2").run_id != ident.run_id


def test_code_digest_changes_with_a_source_file(tmp_path, monkeypatch):
    import replaylab.results.rows as rows

    fake = tmp_path / "replaylab" / "results"
    fake.mkdir(parents=True)
    (fake / "rows.py").write_text("x = 1\n")
    monkeypatch.setattr(rows, "__file__", str(fake / "rows.py"))
    rows.code_digest.cache_clear()
    first = rows.code_digest()
    (fake.parent / "other.py").write_text("y = 2\n")
    rows.code_digest.cache_clear()
    assert rows.code_digest() != first
    rows.code_digest.cache_clear()


def test_a_presets_label_names_its_run_directory_and_its_plan_row():
    from replaylab.training.runs import run_dir

    cfg = compose(["trainer=grpo", "teacher=none", "strategy=repo_recent"])
    assert run_dir(cfg).name.startswith("grpo-repo-recent-")
    out = cli("-m", "replaylab.plan", "+sweep=tiny_repo", "order=0")
    assert out.returncode == 0, out.stderr
    header, *rows, total = out.stdout.strip().splitlines()
    assert header.split()[:3] == ["#", "strategy", "model"]
    assert [r.split()[1] for r in rows] == ["current", "repo", "repo-recent", "repo-maxvar"]
    assert total == "4 cells, 0 done"


def test_plan_names_a_stale_twin_of_a_cell_left_beside_the_sweep(tmp_path):
    """A sweep re-run after a config change leaves the old run directories beside the new ones; tables
    and claims over the directory would meet both. The plan says which cell each one duplicates."""
    import contextlib
    import io

    from omegaconf import OmegaConf

    from replaylab.cli.plan import main, plan

    args = ["+sweep=tiny_repo", "order=0", f"output_root={tmp_path}"]
    cells = plan(args)
    experiment = Path(cells[1]["run_dir"]).parent
    # the repo cell under an older learning rate, and another sweep's cell (order 7) of the same experiment
    stale = compose(["trainer=grpo", "teacher=none", "+sweep=tiny_repo", "strategy=repo", "order=0", "trainer.lr=7e-5"])
    other = compose(["trainer=grpo", "teacher=none", "+sweep=tiny_repo", "strategy=repo", "order=7"])
    # and a cell of another batch shape (a budget-axes-like sweep): a table keeps it apart, so no twin either
    shape = compose(["trainer=grpo", "teacher=none", "+sweep=tiny_repo", "strategy=repo", "order=0",
                     "trainer.prompts_per_iteration=16"])
    for name, cfg in (("grpo-repo-" + "0" * 16, stale), ("grpo-repo-" + "1" * 16, other), ("grpo-repo-" + "2" * 16, shape)):
        (experiment / name).mkdir(parents=True)
        OmegaConf.save(cfg, experiment / name / "config.yaml")
    def listed() -> list[str]:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert main(args) == 0
        return printed.getvalue().splitlines()

    stale_dir = str(experiment / ("grpo-repo-" + "0" * 16))
    # the cell itself was not run here: the other run is its run under another config, not a stale twin
    lines = listed()
    assert not [ln for ln in lines if ln.startswith("stale:")]
    assert [ln.split()[:5] for ln in lines if ln.startswith("elsewhere:")] == [["elsewhere:", stale_dir, "is", "cell", "#1"]]
    assert lines[-1].startswith("2 other run directories beside these cells belong to no cell of this plan")
    # once the cell's own run directory is there too, tables would meet both: a stale twin
    Path(cells[1]["run_dir"]).mkdir()
    lines = listed()
    assert [ln.split()[:5] for ln in lines if ln.startswith("stale:")] == [["stale:", stale_dir, "is", "cell", "#1"]]
    assert not [ln for ln in lines if ln.startswith("elsewhere:")]


def test_plan_behaves_like_hydra():
    helped = cli("-m", "replaylab.plan", "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: python -m replaylab.plan")
    # an override of a sweep axis replaces it; a comma list adds an axis
    out = cli("-m", "replaylab.plan", "+sweep=tiny_repo", "strategy=repo", "order=1", "trainer.lr=1e-4,3e-4")
    assert out.returncode == 0, out.stderr
    rows = out.stdout.strip().splitlines()[1:-1]
    assert len(rows) == 2 and all(r.split()[1] == "repo" and r.split()[6] == "1" for r in rows)
    assert len({r.split()[-1] for r in rows}) == 2  # two learning rates, two run directories
    wrong = cli("-m", "replaylab.plan", "+sweep=tiny_repo", "strategy=ropd")
    assert wrong.returncode == 2 and "strategy: 'ropd' works with trainer kinds ['opd']" in wrong.stderr
    # Hydra's own flags (a copied `-m`, `--cfg job`): a usage line naming them, not a parser traceback
    flagged = cli("-m", "replaylab.plan", "-m", "+sweep=tiny_repo")
    assert flagged.returncode == 2 and "replaylab plan: -m: not an option of plan" in flagged.stderr
    assert "Traceback" not in flagged.stderr


@pytest.mark.parametrize("label", ["a/b", "../x", "with space"])
def test_a_label_that_is_not_a_plain_name_is_a_config_error(label):
    from replaylab.config import ConfigError

    with pytest.raises(ConfigError, match="strategy.label"):
        to_object(compose([f"strategy.label='{label}'"]))
