"""The analysis notebooks execute headless on a small experiment and write their PNGs: a synthetic one
(every diagnostic present, an unfinished run) and a real tiny grid trained by the test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from analysis.run_notebooks import NotebookFailed, run_notebooks  # noqa: E402
from analysis.synthetic import write_experiment  # noqa: E402

FIGURES = {
    "tables": ["table_mean.png"],
    "curves": ["accuracy_vs_update.png", "train_curves.png"],
    "diagnostics": ["diagnostics_zero_variance.png", "diagnostics_replay.png", "diagnostics_importance_weights.png",
                    "diagnostics_ledger.png"],
}


def test_notebooks_write_their_figures(tmp_path):
    exp = write_experiment(tmp_path / "runs", experiment="tiny_demo", orders=(0, 1), updates=10,
                           unfinished=("ropd", "tiny_long", 1))
    figures = tmp_path / "figures"
    times = run_notebooks(exp, figures, executed_dir=tmp_path / "executed")
    assert set(times) == set(FIGURES)
    for name, pngs in FIGURES.items():
        for png in pngs:
            path = figures / png
            assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", (name, png)
    executed = (tmp_path / "executed" / "tables.ipynb").read_text()
    assert "failed/running" in executed  # the table cell rendered the unfinished run's mark


def test_notebooks_run_on_a_real_tiny_grid(run_train, tmp_path):
    root = tmp_path / "runs"
    for strategy in ("current", "ropd"):
        for order in (0, 1):
            extra = (["trainer.warmup_updates=0", "strategy.burn_in=0", "strategy.window=1"] if strategy == "ropd"
                     else ["trainer.eval_every=2"])
            run_train([f"strategy={strategy}", f"order={order}", "experiment=tiny_grid", *extra, "budget.max_updates=4"],
                      output_root=root)
    times = run_notebooks(root / "tiny_grid", tmp_path / "figures", executed_dir=tmp_path / "executed")
    assert set(times) == set(FIGURES)
    for png in FIGURES["tables"] + FIGURES["curves"] + ["diagnostics_probe.png"]:  # real runs carry probe rows
        assert (tmp_path / "figures" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    assert "ropd" in (tmp_path / "executed" / "tables.ipynb").read_text()


def test_a_failing_cell_fails_loudly(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotebookFailed, match="(?s)tables.ipynb.*no rows found"):
        run_notebooks(tmp_path / "empty", tmp_path / "figures", names=("tables",))
