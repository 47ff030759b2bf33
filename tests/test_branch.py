"""Branching (training/branch.py): a fixed-schedule run that starts from the checkpoint of its config's
`current` run writes the rows of one trained from the start, without training the shared updates again."""

from __future__ import annotations

import pytest

from conftest import load_rows
from replaylab.training.trainer import Trainer

# 4 current-policy updates, then 2 of initial-policy replay; the current run keeps its checkpoints at 2, 4, 6.
SCHEDULE = ["strategy.current_updates=4", "strategy.replay_updates=2", "budget.max_updates=6", "trainer.eval_every=2",
            "trainer.checkpoint_every=2", "trainer.keep_checkpoints=3"]


def comparable(rows: list[dict]) -> list[dict]:
    """Rows without their wall-clock fields (seconds, tokens per second): everything else must be equal."""
    out = []
    for r in rows:
        r = {k: v for k, v in r.items() if k != "ledger_wall_time" and not k.startswith("ledger_seconds_")}
        if r["metric"] == "tokens_per_s":
            r["value"] = None
        out.append(r)
    return out


@pytest.fixture
def iterations(monkeypatch):
    """How many iterations the trainer trained in this process."""
    calls = []
    original = Trainer.run_iteration

    def counted(self):
        calls.append(self.update)
        return original(self)

    monkeypatch.setattr(Trainer, "run_iteration", counted)
    return calls


def test_branched_run_writes_the_rows_of_a_run_from_the_start(run_train, tmp_path, iterations):
    whole, whole_dir = run_train(["strategy=fixed_schedule", "branch=false", *SCHEDULE], tmp_path / "whole")
    assert len(iterations) == 6 and "branched_from" not in whole
    iterations.clear()
    _, donor = run_train(["strategy=current", *SCHEDULE[2:]], tmp_path / "branched")
    iterations.clear()
    branched, branched_dir = run_train(["strategy=fixed_schedule", *SCHEDULE], tmp_path / "branched")
    assert branched_dir.name == whole_dir.name  # `branch` is not part of the config hash
    assert branched["branched_from"] == f"{donor.name}@4"
    assert iterations == [4, 5]  # only the replay phase was trained here
    rows, expected = load_rows(branched_dir), load_rows(whole_dir)
    assert [r["split"] for r in rows if r["update"] <= 4].count("strategy") == 4  # phase_replay 0 of updates 1-4
    assert comparable(rows) == comparable(expected)
    counts = {k: v for k, v in whole.items() if k not in ("wall_time",) and not k.startswith("seconds_")}
    assert {k: branched[k] for k in counts} == counts


def test_without_a_donor_checkpoint_at_the_branch_point_the_run_starts_over(run_train, tmp_path, iterations):
    run_train(["strategy=current", *SCHEDULE[2:5], "trainer.keep_checkpoints=1"], tmp_path / "runs")  # keeps update 6 only
    iterations.clear()
    summary, _ = run_train(["strategy=fixed_schedule", *SCHEDULE], tmp_path / "runs")
    assert "branched_from" not in summary and len(iterations) == 6


def test_a_donor_written_by_other_code_is_not_branched_from(run_train, tmp_path, iterations, monkeypatch):
    import replaylab.results.rows as rows_module

    run_train(["strategy=current", *SCHEDULE[2:]], tmp_path / "runs")
    monkeypatch.setattr(rows_module, "versions", lambda: "replaylab_code=another")
    iterations.clear()
    summary, path = run_train(["strategy=fixed_schedule", *SCHEDULE], tmp_path / "runs")
    assert "branched_from" not in summary and len(iterations) == 6
    assert {r["versions"] for r in load_rows(path)} == {"replaylab_code=another"}


def test_plan_says_where_a_cell_branches_from(tmp_path):
    import contextlib
    import io

    from replaylab.cli.plan import main

    def branch_lines(*extra: str) -> list[str]:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert main(["+sweep=tiny_ropd", "budget=tinylong_long", "order=0", f"output_root={tmp_path}", *extra]) == 0
        return [line for line in printed.getvalue().splitlines() if line.startswith("branch:")]

    assert branch_lines() == ["branch: cell #3 (fixed_schedule) starts from cell #0 at update 80"]
    assert branch_lines("strategy=fixed_schedule_80_40,current") == [
        "branch: cell #0 (fixed_schedule) comes before its donor, cell #1, in the sweep: put current first on the "
        "strategy axis, or it trains from update 0"]
    [pruned] = branch_lines("trainer.keep_checkpoints=1")
    assert pruned.startswith("branch: cell #3 (fixed_schedule) trains from update 0: its current donor (cell #0) keeps "
                             "no checkpoint at or before update 80")
