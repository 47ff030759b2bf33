"""The trainer through its real call path: OPD and GRPO runs on the micro world."""

from __future__ import annotations

import json
import logging

from conftest import load_rows


def test_opd_run_writes_rows_ledger_and_done(run_train):
    summary, path = run_train(["trainer=opd"])
    assert summary["updates"] == 3 and summary["iterations"] == 3
    assert summary["fresh_trajectories"] == 3 * 8
    assert summary["teacher_tokens_scored"] == summary["tokens_generated"] > 0
    rows = load_rows(path)
    train = [r for r in rows if r["split"] == "train" and r["metric"] == "reverse_kl"]
    assert [r["update"] for r in train] == [1, 2, 3]
    evals = {(r["update"], r["benchmark"]) for r in rows if r["split"] == "eval" and r["metric"] == "avg@k"}
    assert (0, "tiny8/add2") in evals and (3, "tiny8/add2") in evals
    assert all(r["config_hash"] and "torch=" in r["versions"] and " cpu=" in r["versions"] and "ledger_updates" in r for r in rows)
    assert json.loads((path / "done.json").read_text())["updates"] == 3


def test_grpo_run_rewards_and_groups(run_train):
    summary, path = run_train(["trainer=grpo", "teacher=none", "trainer.prompts_per_iteration=4", "trainer.samples_per_prompt=4"])
    assert summary["fresh_trajectories"] == 3 * 16
    assert summary["teacher_tokens_scored"] == 0
    rows = load_rows(path)
    rewards = [r["value"] for r in rows if r["split"] == "train" and r["metric"] == "reward"]
    assert len(rewards) == 3 and all(0.0 <= v <= 1.0 for v in rewards)


def test_finished_run_is_skipped(run_train, caplog):
    run_train(["trainer=opd"])
    with caplog.at_level(logging.INFO, logger="replaylab.train"):
        summary, _ = run_train(["trainer=opd"])
    assert "already done" in caplog.text
    assert summary["updates"] == 3
