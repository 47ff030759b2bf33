"""The R-OPD study's budget axes: resampling period and query count at matched budgets."""

from __future__ import annotations

import pytest

from conftest import compose, load_rows
from replaylab.config import ConfigError, to_object


def test_resampling_period_generates_every_k_updates_and_keeps_behaviour(run_train, monkeypatch):
    from replaylab.objectives.opd import OPDFullReverseKL

    seen = []  # (update before the step, sample ids, behaviour log-prob sums, versions)
    real = OPDFullReverseKL.loss

    def spy(self, model, samples, *args, **kwargs):
        seen.append([(s.sample_id, float(s.behaviour_logprobs.sum()), s.policy_version, s.source) for s in samples])
        return real(self, model, samples, *args, **kwargs)

    monkeypatch.setattr(OPDFullReverseKL, "loss", spy)
    summary, path = run_train(["trainer.resample_period=3", "budget.max_updates=6"])
    assert summary["updates"] == 6 and summary["iterations"] == 2
    assert summary["fresh_trajectories"] == 2 * 8 and summary["reused_passes"] == 2 * 2
    fresh = [r["ledger_fresh_trajectories"] for r in load_rows(path) if r["split"] == "train" and r["metric"] == "loss"]
    assert fresh == [8, 16]  # fresh generation at updates 0 and 3 only
    for block in (seen[0:3], seen[3:6]):
        ids = [sorted(x) for x in block]
        assert ids[0] == ids[1] == ids[2]  # the same rollouts, with the same stored behaviour log-probs
    assert {v for _, _, v, _ in seen[3]} == {3} and {v for _, _, v, _ in seen[0]} == {0}


def test_query_count_and_samples_per_query_spend_the_same_trajectories(run_train):
    a, _ = run_train(["trainer.prompts_per_iteration=8", "trainer.samples_per_prompt=1", "budget.max_trajectories=24"])
    b, _ = run_train(["trainer.prompts_per_iteration=4", "trainer.samples_per_prompt=2", "budget.max_trajectories=24"])
    assert a["trajectories"] == b["trajectories"] == 24
    assert a["updates"] == b["updates"] == 3


@pytest.mark.parametrize("overrides, key", [
    (["budget.max_trajectories=100"], "budget.max_trajectories"),
    (["budget.max_trajectories=192", "trainer.resample_period=2"], "budget.max_updates"),
])
def test_budget_that_cannot_be_met_exactly_fails_at_start(overrides, key):
    cfg = compose(["budget.max_updates=3", "trainer.prompts_per_iteration=64"] + overrides)
    with pytest.raises(ConfigError, match=key):
        to_object(cfg)
