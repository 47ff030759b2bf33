"""DEPO's online part through the real trainer (ALGORITHMS.md §15): prompts of low explorability
p(1-p) are skipped before rollout (their slot goes to the next prompt of the order), under-explored
explorable prompts are re-asked, the rollout budget stays that of the baseline, and a run resumes
exactly."""

from __future__ import annotations

from conftest import load_rows
from replaylab.replay.depo import DEPO
from test_replay_buffer import GRPO, assert_resume_reproduces, token_rewards

RUN = GRPO + ["data.size=8", "strategy=depo", "budget.max_updates=8"]


def test_skips_unexplorable_prompts_and_reasks_under_explored_ones(run_train, monkeypatch):
    token_rewards(monkeypatch, 2)
    real, log = DEPO.plan, []

    def spy(self, ctx):
        explorability = {u: self.explorability(u) for u in self.pass_rate}
        visits = dict(self.visits)
        start = ctx.stream.position
        plan = real(self, ctx)
        consumed = ctx.stream.peek(ctx.stream.position - start, start)
        log.append((explorability, visits, consumed, plan))
        return plan

    monkeypatch.setattr(DEPO, "plan", spy)
    summary, path = run_train(RUN + ["strategy.threshold=0.1", "strategy.min_visits=3", "strategy.replay_fraction=0.5",
                                     "strategy.max_skips=16"])
    skipped = reasked = 0
    for explorability, visits, consumed, plan in log:
        assert len(plan.fresh) == 4 and len({p.uid for p in plan.fresh}) == 4
        for uid in plan.reasked:  # re-asked: seen, trained fewer than min_visits times, explorable
            assert visits[uid] < 3 and explorability[uid] >= 0.1
            reasked += 1
        taken = [p.uid for p in plan.fresh if p.uid not in plan.reasked]
        rest = [p.uid for p in consumed]
        exhausted = plan.metrics["depo_skipped"] == 16  # strategy.max_skips: then prompts come as they are
        for uid in taken:
            rest.remove(uid)
            assert exhausted or explorability.get(uid, 0.25) >= 0.1  # what the filter let through
        in_batch = {p.uid for p in plan.fresh}
        for uid in rest:  # what it skipped, or met again when the order wrapped (already in the batch)
            assert uid in in_batch or explorability[uid] < 0.1
            skipped += uid not in in_batch
    assert skipped and reasked, "the filter or the replay never acted: the test has no power"
    assert summary["fresh_trajectories"] == 8 * 4 * 4  # skipping saves rollouts without changing the budget
    saved = [r["value"] for r in load_rows(path) if r["metric"] == "depo_rollouts_saved"]
    assert saved[-1] >= skipped * 4  # (a prompt both filtered and in the batch is counted as a skip there)


def test_depo_resumes_exactly(run_train, monkeypatch, tmp_path):
    token_rewards(monkeypatch, 2)
    assert_resume_reproduces(run_train, monkeypatch, tmp_path, RUN[:-1] + ["budget.max_updates=6", "strategy.threshold=0.2"])
