"""OPD strategies through the real trainer: what they generate, from which policy, and when."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from conftest import comparable, load_rows
from replaylab.replay.base import UpdateStats
from replaylab.replay.ropd import ROPD, ROPDConfig


def strategy_rows(path, metric):
    return {r["iteration"]: r["value"] for r in load_rows(path) if r["split"] == "strategy" and r["metric"] == metric}


def test_initial_never_samples_the_current_policy(run_train):
    summary, _ = run_train(["strategy=initial"])
    assert summary["fresh_trajectories"] == 0
    assert summary["initial_trajectories"] == 3 * 8
    assert summary["replayed_samples"] == summary["samples_trained"] == 3 * 8


def test_fixed_schedule_generates_fresh_rollouts_for_exactly_n_updates(run_train):
    summary, path = run_train(["strategy=fixed_schedule", "strategy.current_updates=2", "strategy.replay_updates=3",
                                   "budget.max_updates=5"])
    assert summary["fresh_trajectories"] == 2 * 8
    assert summary["initial_trajectories"] == 3 * 8
    assert list(strategy_rows(path, "phase_replay").values()) == [0, 0, 1, 1, 1]


def test_recent_replays_its_own_last_rollouts(run_train, monkeypatch):
    from replaylab.replay.recent import Recent

    seen = []
    original = Recent.observe

    def spy(self, groups, stats, ctx):
        seen.append([(s.sample_id, s.source, s.policy_version) for g in groups for s in g.samples])
        return original(self, groups, stats, ctx)

    monkeypatch.setattr(Recent, "observe", spy)
    summary, _ = run_train(["strategy=recent", "strategy.current_updates=2", "strategy.window=1", "budget.max_updates=4"])
    assert summary["fresh_trajectories"] == 2 * 8 and summary["initial_trajectories"] == 0
    last_fresh = [(sid, v) for sid, _, v in seen[1]]
    assert len(seen) == 4  # two replay updates follow the two current ones: the loop below checks both
    for replay in seen[2:]:
        assert [(sid, v) for sid, _, v in replay] == last_fresh  # same samples, original policy versions
        assert {src for _, src, _ in replay} == {"replay"}


def crafted(iteration, norms):
    return UpdateStats(iteration=iteration, update=iteration + 1, grad_norms=norms)


def ctx_at(update):
    return SimpleNamespace(update=update)


def test_ropd_trigger_fires_exactly_after_two_consecutive_hits():
    s = ROPD(ROPDConfig(burn_in=1, window=1))
    # Each window: one update of 4 norms m-1, m+1, m-1, m+1: V = 4/3, M = 4, so se = sqrt(2/3) = 0.816.
    # iteration: 0 burn-in | 1 first window | 2 change 5 > se (miss) | 3 change 0.5 (hit) | 4 miss |
    # 5 hit | 6 hit -> switch
    means = [100.0, 10.0, 5.0, 5.5, 9.0, 9.2, 9.1]
    for it, m in enumerate(means):
        out = s.observe([], crafted(it, [m - 1.0, m + 1.0, m - 1.0, m + 1.0]), ctx_at(it))
        expect_hit = {2: 0.0, 3: 1.0, 4: 0.0, 5: 1.0, 6: 1.0}.get(it)
        if expect_hit is not None:
            assert out["hit"] == expect_hit, it
            assert out["grad_change_se"] == pytest.approx((2 * (4 / 3) / 4) ** 0.5)
        assert s.replaying == (it == 6)
    assert s.switch_iteration == 7
    # after the switch nothing is compared any more
    assert s.observe([], crafted(7, [1.0, 50.0]), ctx_at(7)) == {"replaying": 1.0}


def test_ropd_sketch_statistic_uses_vectors():
    s = ROPD(ROPDConfig(statistic="sketch", burn_in=0, window=1, consecutive=1))
    base = torch.tensor([1.0, 0.0, 0.0])
    noise = [torch.tensor([0.0, 1.0, 0.0]), torch.tensor([0.0, -1.0, 0.0])]
    s.observe([], UpdateStats(0, 1, [1.0, 1.0], [base + n for n in noise]), ctx_at(0))
    # V = 2 per window, M = 2: se = sqrt(2); raw change 3, debiased sqrt(9 - 2) = 2.65 > se: miss
    out = s.observe([], UpdateStats(1, 2, [1.0, 1.0], [4 * base + n for n in noise]), ctx_at(1))
    assert out["hit"] == 0.0 and not s.replaying
    assert out["grad_change"] == pytest.approx(7 ** 0.5)
    # raw change 0.5: debiased to 0 (within the noise): hit
    out = s.observe([], UpdateStats(2, 3, [1.0, 1.0], [4.5 * base + n for n in noise]), ctx_at(2))
    assert out["hit"] == 1.0 and out["grad_change"] == 0.0 and s.replaying


def test_ropd_switches_in_a_real_run_and_stops_fresh_generation(run_train):
    # tolerance 1e9: every comparison hits; burn-in 2, windows of one update: windows close at
    # iterations 2, 3, 4, comparisons at 3 and 4, so the switch comes after iteration 4
    summary, path = run_train(["strategy=ropd", "strategy.tolerance=1e9", "trainer.warmup_updates=0",
                               "strategy.burn_in=2", "strategy.window=1", "budget.max_updates=7"])
    assert strategy_rows(path, "switch_iteration") == {5: 5.0}
    assert summary["fresh_trajectories"] == 5 * 8
    assert summary["initial_trajectories"] == 2 * 8
    phases = strategy_rows(path, "phase_replay")
    assert [phases[i] for i in sorted(phases)] == [0, 0, 0, 0, 0, 1, 1]
    rows = load_rows(path)
    fresh = [r["ledger_fresh_trajectories"] for r in rows if r["split"] == "train" and r["metric"] == "reverse_kl"]
    assert fresh == [8, 16, 24, 32, 40, 40, 40]


def test_ropd_switches_soon_for_a_frozen_student_and_later_for_a_learning_one(run_train):
    # Windows of 4 updates after a 2-update warm-up: comparisons at updates 10, 14, 18, ...
    # Measured on the micro world: frozen (lr 1e-12) at update 22 (third comparison), learning at 50.
    shape = ["strategy=ropd", "trainer.warmup_updates=2", "strategy.window=4", "budget.max_updates=60",
             "trainer.prompts_per_iteration=16", "eval=none", "eval.probe_size=0"]
    _, frozen = run_train(shape + ["trainer.lr=1e-12"])
    _, learning = run_train(shape + ["trainer.lr=1e-3"])
    frozen_switch = strategy_rows(frozen, "switch_iteration")
    learning_switch = strategy_rows(learning, "switch_iteration")
    assert len(frozen_switch) == 1 and list(frozen_switch.values())[0] <= 2 + 4 * 6  # within 4 comparisons
    later = list(learning_switch.values())[0] if learning_switch else 61
    assert later >= list(frozen_switch.values())[0] + 2 * 4
    # while it learns, the change is many standard errors (the statistic has power on real gradients)
    first_ratio = min(strategy_rows(learning, "grad_change_ratio").items())[1]
    assert first_ratio > 3


def test_stat_groups_for_all_makes_ropd_train_as_current_until_it_switches(run_train):
    """With trainer.stat_groups_for_all every arm splits its update into the same backward passes, so
    ropd that has not switched writes current's rows bitwise (its paired difference has no float-order
    noise); without it, current's single backward sums the gradient in another order and the runs part."""
    shape = ["budget.max_updates=6", "trainer.eval_every=3"]

    def learning_rows(path):
        return [r for r in comparable(load_rows(path)) if r["split"] in ("train", "eval")
                and not r["metric"].startswith(("replay", "phase"))]

    def same(a, b):
        keep = lambda r: {k: v for k, v in r.items() if k not in ("run", "config_hash", "strategy")}
        return [keep(r) for r in learning_rows(a)] == [keep(r) for r in learning_rows(b)]

    shared = ["trainer.stat_groups_for_all=true"]
    _, current = run_train(["strategy=current"] + shared + shape)
    _, ropd = run_train(["strategy=ropd", "strategy.burn_in=100"] + shared + shape)  # never switches
    assert strategy_rows(ropd, "switch_iteration") == {}
    assert len(learning_rows(current)) > 30 and same(current, ropd)
    _, current_one_backward = run_train(["strategy=current"] + shape)
    assert not same(current_one_backward, ropd)
