"""Train rows say how old the trained samples were and, when replayed, which policy versions."""

from __future__ import annotations

from conftest import load_rows


def train_rows(path, metric):
    return {r["iteration"]: r["value"] for r in load_rows(path) if r["split"] == "train" and r["metric"] == metric}


def test_recent_replays_only_the_last_window_of_updates(run_train):
    # 4 updates per iteration: rollouts at versions 0, 4, 8; the window of 8 updates keeps 4 and 8
    summary, path = run_train(["strategy=recent", "trainer.minibatches=4", "strategy.current_updates=12",
                               "strategy.window=8", "budget.max_updates=20"])
    assert summary["update"] == 20 and summary["fresh_trajectories"] == 3 * 8
    low, high = train_rows(path, "replayed_version_min"), train_rows(path, "replayed_version_max")
    assert sorted(low) == [4, 5]  # only the two replay iterations replay anything
    assert [(low[i], high[i]) for i in (4, 5)] == [(4, 4), (8, 8)]  # oldest first, never version 0
    # fresh iterations: the 4 minibatches train at ages 0, 1, 2, 3; replay at update 12 of version 4: 8..11
    assert train_rows(path, "staleness_mean")[1] == 1.5 and train_rows(path, "staleness_max")[1] == 3
    assert train_rows(path, "staleness_mean")[4] == 9.5 and train_rows(path, "staleness_max")[4] == 11


def test_initial_policy_samples_age_with_the_student(run_train):
    _, path = run_train(["strategy=initial"])
    assert train_rows(path, "staleness_mean") == {1: 0.0, 2: 1.0, 3: 2.0}
    assert set(train_rows(path, "replayed_version_max").values()) == {0.0}


def test_current_policy_rows_carry_staleness_and_no_replayed_versions(run_train):
    _, path = run_train(["trainer.minibatches=2", "budget.max_updates=4"])
    assert set(train_rows(path, "staleness_mean").values()) == {0.5}
    assert train_rows(path, "replayed_version_min") == {}
