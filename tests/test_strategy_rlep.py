"""RLEP (ALGORITHMS.md §6): the pool holds only verified successes of prompts with enough of them,
collected for every prompt the run will see; each fresh group gets at most k of them, shrinking
instead of padding, with one shared baseline and no behaviour correction."""

from __future__ import annotations

from conftest import load_rows
from replaylab.replay.rlep import RLEP
from test_replay_buffer import GRPO, assert_resume_reproduces, token_rewards

RUN = GRPO + ["data.size=8", "strategy=rlep"]


def test_replays_only_stored_successes_at_most_k_per_group(run_train, monkeypatch):
    token_rewards(monkeypatch, 3)
    initial, seen = [], []
    receive, observe = RLEP.receive_initial, RLEP.observe

    def spy_receive(self, groups):
        initial.extend(groups)
        return receive(self, groups)

    def spy_observe(self, groups, stats, ctx):
        seen.append([(g.prompt.uid, g.baseline_labels, list(g.samples)) for g in groups])
        return observe(self, groups, stats, ctx)

    monkeypatch.setattr(RLEP, "receive_initial", spy_receive)
    monkeypatch.setattr(RLEP, "observe", spy_observe)
    summary, path = run_train(RUN)
    assert len({g.prompt.uid for g in initial}) == len(initial) == 8  # every prompt of the run, once
    assert summary["initial_trajectories"] == 8 * 4 and summary["fresh_trajectories"] == 6 * 16
    pools = {g.prompt.uid: {s.sample_id for s in g.samples if s.reward == 1.0} for g in initial}
    pools = {u: ids for u, ids in pools.items() if len(ids) >= 2}
    assert pools, "the stand-in grader gave no prompt two successes"
    replayed = 0
    for groups in seen:
        for uid, labels, samples in groups:
            stored = [s for s in samples if s.source == "initial"]
            assert [s.source for s in samples] == ["fresh"] * 4 + ["initial"] * len(stored)
            assert len(stored) == min(2, len(pools.get(uid, ())))  # k = 2; fewer when the pool is smaller
            assert {s.sample_id for s in stored} <= pools.get(uid, set()) and len({s.sample_id for s in stored}) == len(stored)
            assert all(s.reward == 1.0 and s.policy_version == 0 for s in stored)
            assert all(s.off_policy.ratio_base == "proximal" and s.off_policy.is_cap is None for s in stored)
            assert labels is None  # one z-score over the whole enlarged group
            replayed += len(stored)
    assert replayed > 0 and summary["replayed_samples"] == replayed
    rows = {(r["iteration"], r["metric"]): r["value"] for r in load_rows(path) if r["split"] == "strategy"}
    sizes = [len(samples) for uid, _, samples in seen[0]]
    assert rows[(1, "rlep_mean_group_size")] == sum(sizes) / 4
    assert rows[(1, "rlep_replay_rate")] == sum(n > 4 for n in sizes) / 4
    assert rows[(1, "rlep_pool_prompts")] == len(pools)


def test_resume_reproduces_rows(run_train, monkeypatch, tmp_path):
    token_rewards(monkeypatch, 3)
    assert_resume_reproduces(run_train, monkeypatch, tmp_path, RUN + ["strategy.replays_per_group=1"])


def test_the_pool_collects_pool_samples_answers_per_prompt(run_train, monkeypatch):
    """The paper samples 64 answers per prompt for its pool; strategy.pool_samples sets that count apart
    from the training groups' size (trainer.samples_per_prompt = 4 here)."""
    token_rewards(monkeypatch, 3)
    initial = []
    receive = RLEP.receive_initial
    monkeypatch.setattr(RLEP, "receive_initial", lambda self, groups: (initial.extend(groups), receive(self, groups))[1])
    summary, _ = run_train(RUN + ["strategy.pool_samples=10", "budget.max_updates=2"])
    assert [len(g.samples) for g in initial] == [10] * 8
    assert summary["initial_trajectories"] == 8 * 10 and summary["fresh_trajectories"] == 2 * 16
