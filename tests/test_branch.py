"""Branching (training/branch.py): a fixed-schedule run that starts from the checkpoint of its config's
`current` run writes the rows of one trained from the start, without training the shared updates again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import comparable, load_rows
from replaylab.training.trainer import Trainer

# 4 current-policy updates, then 2 of initial-policy replay; the current run keeps its checkpoints at 2, 4, 6.
SCHEDULE = ["strategy.current_updates=4", "strategy.replay_updates=2", "budget.max_updates=6", "trainer.eval_every=2",
            "trainer.checkpoint_every=2", "trainer.keep_checkpoints=3"]


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


@pytest.mark.parametrize("every, at", [(2, 4), (3, 3)])  # the donor's checkpoint at the switch, or before it
def test_branched_run_writes_the_rows_of_a_run_from_the_start(run_train, tmp_path, iterations, every, at):
    schedule = [*SCHEDULE, f"trainer.checkpoint_every={every}"]
    whole, whole_dir = run_train(["strategy=fixed_schedule", "branch=false", *schedule], tmp_path / "whole")
    assert len(iterations) == 6 and "branched_from" not in whole
    iterations.clear()
    _, donor = run_train(["strategy=current", *schedule[2:]], tmp_path / "branched")
    iterations.clear()
    branched, branched_dir = run_train(["strategy=fixed_schedule", *schedule], tmp_path / "branched")
    assert branched_dir.name == whole_dir.name  # `branch` is not part of the config hash
    assert branched["branched_from"] == f"{donor.name}@{at}"
    assert iterations == list(range(at, 6))  # only the updates after the branch point were trained here
    rows, expected = load_rows(branched_dir), load_rows(whole_dir)
    assert [r["split"] for r in rows if r["update"] <= at].count("strategy") == at  # phase_replay 0 of updates 1..at
    assert comparable(rows) == comparable(expected)
    from replaylab.results.report import run_report

    assert run_report(branched_dir, rows, "done").endswith(f"started from {donor.name}'s checkpoint at update {at}: the "
                                                            "updates and seconds above include that run's up to there")
    assert "started from" not in run_report(whole_dir, expected, "done")
    counts = {k: v for k, v in whole.items() if k not in ("wall_time",) and not k.startswith("seconds_")}
    assert {k: branched[k] for k in counts} == counts


@pytest.mark.parametrize("strategy", ["current", "fixed_schedule"])
def test_runs_branch_from_recent_which_cannot_branch_itself(run_train, tmp_path, iterations, strategy):
    """recent trains as current for its first updates and lends that checkpoint (its own strategy rows
    left out); it cannot start from another run, since it stores the rollouts it will replay."""
    recent = ["strategy=recent", "strategy.window=2", *SCHEDULE[:1], *SCHEDULE[2:]]
    mine = [f"strategy={strategy}", *(SCHEDULE if strategy == "fixed_schedule" else SCHEDULE[2:])]
    whole, whole_dir = run_train([*mine, "branch=false"], tmp_path / "whole")
    _, donor = run_train(recent, tmp_path / "branched")
    iterations.clear()
    branched, path = run_train(mine, tmp_path / "branched")
    assert branched["branched_from"] == f"{donor.name}@4" and iterations == [4, 5]
    assert comparable(load_rows(path)) == comparable(load_rows(whole_dir))
    # beside a finished run that could lend it update 4 (the unbranched one), recent still trains it all
    shutil.copytree(whole_dir, tmp_path / "again" / whole_dir.parent.name / whole_dir.name)
    iterations.clear()
    again, _ = run_train(recent, tmp_path / "again")
    assert "branched_from" not in again and len(iterations) == 6


def test_a_branched_run_killed_and_resumed_is_the_same_run(run_train, tmp_path, monkeypatch):
    """Killed after its own first checkpoint (update 6), it resumes from that one, not from the donor,
    writes the same rows as an uninterrupted branched run, and still names its donor."""
    longer = ["strategy.current_updates=4", "strategy.replay_updates=4", "budget.max_updates=8",
              "trainer.checkpoint_every=2", "trainer.keep_checkpoints=4"]
    _, donor = run_train(["strategy=current", *longer[2:]], tmp_path / "runs")
    uninterrupted, whole = run_train(["strategy=fixed_schedule", *longer], tmp_path / "runs")
    shutil.copytree(donor, tmp_path / "again" / donor.parent.name / donor.name)  # the same donor beside the rerun
    real, trained = Trainer.run_iteration, []

    def dies_at_7(self):
        if self.update == 7:
            raise KeyboardInterrupt
        trained.append(self.update)
        return real(self)

    monkeypatch.setattr(Trainer, "run_iteration", dies_at_7)
    with pytest.raises(KeyboardInterrupt):
        run_train(["strategy=fixed_schedule", *longer], tmp_path / "again")
    assert trained == [4, 5, 6]
    trained.clear()
    monkeypatch.setattr(Trainer, "run_iteration", lambda self: trained.append(self.update) or real(self))
    resumed, path = run_train(["strategy=fixed_schedule", *longer], tmp_path / "again")
    assert trained == [6, 7]  # from its own checkpoint at update 6
    assert resumed["branched_from"] == uninterrupted["branched_from"] == f"{donor.name}@4"
    assert comparable(load_rows(path)) == comparable(load_rows(whole))


def test_a_donor_that_cannot_serve_gives_way_to_the_next(run_train, tmp_path, iterations):
    """current ranks first among donors at update 4; its checkpoint there is torn, so recent's serves. A
    broken config.yaml and a run of another data order beside them lend nothing."""
    _, current = run_train(["strategy=current", *SCHEDULE[2:]], tmp_path / "runs")
    _, recent = run_train(["strategy=recent", "strategy.window=2", *SCHEDULE[:1], *SCHEDULE[2:]], tmp_path / "runs")
    run_train(["strategy=current", "order=1", *SCHEDULE[2:]], tmp_path / "runs")
    (current / "checkpoints" / "update_0000004.pt").write_bytes(b"torn")
    broken = current.parent / "opd-current-ffffffffffffffff"
    (broken / "checkpoints").mkdir(parents=True)
    (broken / "config.yaml").write_text("strategy: [unclosed")
    iterations.clear()
    summary, _ = run_train(["strategy=fixed_schedule", *SCHEDULE], tmp_path / "runs")
    assert summary["branched_from"] == f"{recent.name}@4" and iterations == [4, 5]


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


def test_checkpoints_fall_where_the_plan_expects_them(run_train, tmp_path):
    """The plan's arithmetic (runs.checkpoint_updates) against a real run whose iterations take 2 updates."""
    from replaylab.training.runs import checkpoint_updates

    _, path = run_train(["trainer.minibatches=2", "budget.max_updates=10", "trainer.checkpoint_every=3",
                         "trainer.keep_checkpoints=10"], tmp_path / "runs")
    written = sorted(int(p.stem.split("_")[1]) for p in (path / "checkpoints").glob("update_*.pt"))
    assert written == checkpoint_updates(3, 2, 10) == [4, 6, 10]


def test_plan_says_where_a_cell_branches_from(tmp_path):
    import contextlib
    import io

    from replaylab.cli.plan import main, plan

    args = ["+sweep=tiny_ropd", "budget=tinylong_long", "order=0", f"output_root={tmp_path}"]

    def branch_lines(*extra: str) -> list[str]:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert main([*args, *extra]) == 0
        lines = [line for line in printed.getvalue().splitlines() if line.startswith("branch:")]
        measured.update(line for line in lines if "(ropd)" in line)
        return [line for line in lines if "(ropd)" not in line]

    # cells: 0 recent, 1 current, 2 fixed_schedule, 3 initial, 4 ropd (recent lends; initial has no prefix, and
    # ropd's ends where its trigger switches, which only the donor's gradients tell)
    measured: set[str] = set()
    starts = "branch: cell #{} ({}) starts from cell #0 (recent) at update {} (once the donor has written it; else " \
             "from an earlier checkpoint or update 0)"
    assert branch_lines() == [starts.format(1, "current", 80), starts.format(2, "fixed_schedule", 80)]
    assert measured == {"branch: cell #4 (ropd) starts from the latest checkpoint of a run of its config under current, "
                        "fixed_schedule or recent where its trigger, following that run's gradient readings, has not yet "
                        "switched (decided when it starts), else from update 0"}
    # iterations of 4 updates: the trainer checkpoints at 28, 52, 76, 100, 120 for checkpoint_every=25
    assert branch_lines("trainer.minibatches=4", "trainer.checkpoint_every=25", "trainer.keep_checkpoints=3",
                        "eval.tail_every=4") == [starts.format(1, "current", 76), starts.format(2, "fixed_schedule", 76)]
    assert branch_lines("strategy=fixed_schedule_80_40,current") == [
        "branch: cell #0 (fixed_schedule) trains from update 0: the first of its siblings in the sweep (cells #1 may "
        "start from it)",
        "branch: cell #1 (current) starts from cell #0 (fixed_schedule) at update 80 (once the donor has written it; "
        "else from an earlier checkpoint or update 0)"]
    assert branch_lines("strategy=fixed_schedule_80_40") == [
        "branch: cell #0 (fixed_schedule) trains from update 0: no run of its config under another strategy with a "
        "current-policy prefix (current, fixed_schedule, recent) is planned or done"]
    [together, _] = branch_lines("launcher=parallel", "hydra.launcher.n_jobs=4")
    assert together.startswith("branch: cell #1 (current) may start while its donor, cell #0 (recent), runs (4 cells "
                               "at once)")
    no_checkpoint = ("branch: cell #{} ({}) trains from update 0: no run it could start from keeps a checkpoint "
                     "within the first 80 updates")
    [current, fixed] = branch_lines("trainer.keep_checkpoints=1")
    assert current.startswith(no_checkpoint.format(1, "current")) and fixed.startswith(no_checkpoint.format(2, "fixed_schedule"))
    # a finished donor: what is on its disk decides
    donor = Path(plan(args)[0]["run_dir"])
    (donor / "checkpoints").mkdir(parents=True)
    (donor / "done.json").write_text("{}")
    (donor / "checkpoints" / "update_0000120.pt").write_bytes(b"")
    from_current = starts.format(2, "fixed_schedule", 80).replace("cell #0 (recent)", "cell #1 (current)")
    [current, fixed] = branch_lines()
    assert current.startswith(no_checkpoint.format(1, "current")) and fixed == from_current  # current will keep 80
    (donor / "checkpoints" / "update_0000040.pt").write_bytes(b"")
    assert branch_lines() == [starts.format(1, "current", 40), from_current]


# R-OPD with every comparison a hit (tolerance 1e9) from update 2, windows of one update: its trigger fires
# after update 5 (the first replayed iteration is the 6th); every arm takes the same 4 backward passes.
ROPD = ["strategy=ropd", "strategy.tolerance=1e9", "strategy.burn_in=2", "strategy.window=1"]
SHARED = ["trainer.warmup_updates=0", "trainer.stat_groups_for_all=true", "budget.max_updates=8", "trainer.eval_every=4",
          "trainer.keep_checkpoints=8"]


@pytest.mark.parametrize("every, at, extra", [(2, 4, []), (5, 5, []), (2, 8, ["strategy.burn_in=100"])],
                         ids=["switches-after-the-branch-point", "switches-at-it", "never-switches"])
def test_ropd_branches_where_its_trigger_following_the_donors_gradients_has_not_yet_switched(
        run_train, tmp_path, iterations, every, at, extra):
    """ropd trains as current until its trigger fires, so it starts from current's latest checkpoint at or
    before that point: its trigger, fed the donor's recorded gradient norms, decides which checkpoint
    serves (at update 8 and 6 it would already be replaying; at 5 it switches on the last iteration it
    follows) and gives the run its state and strategy rows there. The rows are those of ropd trained from
    the start, whether it then switches or never does (it trains nothing after the donor's last update)."""
    shared = [*SHARED, f"trainer.checkpoint_every={every}"]
    shape = [*ROPD, *extra, *shared]
    _, whole_dir = run_train([*shape, "branch=false"], tmp_path / "whole")
    _, donor = run_train(["strategy=current", *shared], tmp_path / "branched")
    iterations.clear()
    branched, path = run_train(shape, tmp_path / "branched")
    assert branched["branched_from"] == f"{donor.name}@{at}" and iterations == list(range(at, 8))
    rows, expected = comparable(load_rows(path)), comparable(load_rows(whole_dir))
    assert rows == expected
    switched = [r["value"] for r in rows if r["metric"] == "switch_iteration"]
    assert switched == ([] if extra else [5.0])


def test_ropd_does_not_branch_from_a_donor_without_gradient_readings(run_train, tmp_path, iterations):
    """A donor that did not split its updates into ropd's gradient groups is another config (no sibling);
    one whose checkpoint lacks the readings (written before they were recorded) does not serve."""
    import torch

    shared = [*SHARED, "trainer.checkpoint_every=2"]
    _, donor = run_train(["strategy=current", *shared], tmp_path / "runs")
    for file in (donor / "checkpoints").glob("update_*.pt"):
        state = torch.load(file, weights_only=False)
        del state["gradient_readings"]
        torch.save(state, file)
    iterations.clear()
    summary, _ = run_train([*ROPD, "strategy.burn_in=100", *shared], tmp_path / "runs")
    assert "branched_from" not in summary and len(iterations) == 8


def test_a_branched_run_killed_before_its_own_checkpoint_branches_again_and_one_past_it_is_refused(run_train, tmp_path):
    """A branched run (from update 4) killed before its own next checkpoint (6) starts from the donor again and
    writes the same rows; one whose rows reach 6 while its checkpoints are gone is refused, rows untouched
    (Trainer.refuse_lost_rows: a restart would truncate rows no checkpoint can restore)."""
    from replaylab.results.rows import RowsMismatch

    whole, whole_dir = run_train(["strategy=fixed_schedule", "branch=false", *SCHEDULE], tmp_path / "whole")
    run_train(["strategy=current", *SCHEDULE[2:]], tmp_path / "branched")
    branched, path = run_train(["strategy=fixed_schedule", *SCHEDULE], tmp_path / "branched")
    assert branched["branched_from"].endswith("@4")
    lines = (path / "rows.jsonl").read_text().splitlines(keepends=True)
    (path / "done.json").unlink()
    shutil.rmtree(path / "checkpoints")
    (path / "rows.jsonl").write_text("".join(line for line in lines if json.loads(line)["update"] < 6))
    again, _ = run_train(["strategy=fixed_schedule", *SCHEDULE], tmp_path / "branched")
    assert again["branched_from"].endswith("@4") and comparable(load_rows(path)) == comparable(load_rows(whole_dir))
    (path / "done.json").unlink()
    shutil.rmtree(path / "checkpoints")
    kept = (path / "rows.jsonl").read_text()
    with pytest.raises(RowsMismatch, match="at or past update 6 where this run writes its first checkpoint"):
        run_train(["strategy=fixed_schedule", *SCHEDULE], tmp_path / "branched")
    assert (path / "rows.jsonl").read_text() == kept
