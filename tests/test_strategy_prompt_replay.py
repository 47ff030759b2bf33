"""Prompt Replay (ALGORITHMS.md §3): heap order, budget, cooldown and reuse cap on crafted pass
rates; through the real trainer: only fresh trajectories, ever, and the cooldown / cap hold."""

from __future__ import annotations

import random

import pytest
import torch

from conftest import load_rows
from replaylab.config import ConfigError
from replaylab.replay.base import PromptStream, StepContext, UpdateStats
from replaylab.replay.prompt_replay import PromptReplay, PromptReplayConfig
from replaylab.types import Group, Prompt, Sample
from test_replay_buffer import GRPO, assert_resume_reproduces, token_rewards

PROMPTS = [Prompt(f"q{i:02d}", f"q{i}", (1,), "0") for i in range(40)]


def group(uid: str, correct: int, n: int = 4) -> Group:
    p = next(p for p in PROMPTS if p.uid == uid)
    return Group(p, [Sample(p, torch.tensor([1]), torch.zeros(1), 0, "fresh", False, f"{uid}-{i}",
                            reward=float(i < correct)) for i in range(n)])


class Harness:
    """Drives a strategy by hand: plan at iteration t, observe crafted pass rates."""

    def __init__(self, **cfg):
        self.s = PromptReplay(PromptReplayConfig(**{"cooldown": 0, **cfg}))
        # Fresh prompts come from the end of the list, so they never collide with crafted ones.
        self.stream = PromptStream(PROMPTS, list(range(39, -1, -1)))
        self.rng = random.Random(0)

    def ctx(self, it: int) -> StepContext:
        return StepContext(it, it, 4, 4, 1, 100, self.stream, self.rng)

    def observe(self, it: int, correct: dict[str, int]) -> None:
        groups = [group(u, c) for u, c in correct.items()]
        self.s.observe(groups, UpdateStats(it, it + 1, [1.0]), self.ctx(it))

    def replays(self, it: int) -> list[str]:
        plan = self.s.plan(self.ctx(it))
        assert len(plan.fresh) == 4 and len({p.uid for p in plan.fresh}) == 4
        return list(self.s.replayed_now)


def test_heap_prefers_pass_rate_near_half_then_lower_rate():
    h = Harness(max_pass_rate=0.8)
    h.observe(0, {"q01": 3, "q02": 1, "q03": 2, "q04": 0, "q05": 4})  # p = .75 .25 .5 0 1
    assert h.replays(1) == ["q03", "q02"]  # budget floor(4 * 0.5) = 2; |.25-.5| tie: lower p first
    assert h.replays(2) == ["q01"]  # p = 0 and p = 1 never enter the heap


def test_budget_is_at_most_half_the_prompts_and_a_larger_fraction_is_refused():
    h = Harness(replay_fraction=0.5)
    assert h.s.budget(4) == 2 and h.s.budget(5) == 2 and h.s.budget(1) == 0
    with pytest.raises(ConfigError, match="strategy.replay_fraction"):  # the code would clamp 0.9 to 0.5
        PromptReplayConfig(replay_fraction=0.9)
    h.observe(0, {f"q{i:02d}": 2 for i in range(1, 8)})
    assert len(h.replays(1)) == 2


def test_cooldown_and_reuse_cap():
    h = Harness(cooldown=2, cooldown_jitter=0.0, max_reuse=2)
    h.observe(0, {"q01": 2})
    assert h.replays(1) == []  # scored at 0, ready at 2
    assert h.replays(2) == ["q01"]
    h.observe(2, {"q01": 2})
    assert h.replays(3) == [] and h.replays(4) == ["q01"]
    h.observe(4, {"q01": 2})  # reused twice: retired
    assert [h.replays(t) for t in range(5, 9)] == [[], [], [], []]
    assert h.s.prompts["q01"]["reuse"] == 2


def test_cooldown_jitter_draws_from_the_strategy_rng():
    h = Harness(cooldown=5)
    h.observe(0, {f"q{i:02d}": 2 for i in range(1, 30)})
    assert {st["ready"] for st in h.s.prompts.values()} == {4, 5, 6}


def test_prompt_in_this_iterations_fresh_draw_is_not_replayed():
    h = Harness()
    h.observe(0, {"q39": 2, "q01": 1})  # q39 is the next fresh prompt of the stream
    assert h.replays(1) == ["q01"]
    assert h.s.prompts["q39"]["queued"] is not None  # set aside, still queued


def test_state_round_trip_reproduces_the_plan():
    h = Harness(cooldown=1)
    h.observe(0, {"q01": 1, "q02": 2, "q03": 3})
    other = Harness(cooldown=1)
    other.s.load_state_dict(h.s.state_dict())
    assert h.replays(1) == other.replays(1)
    assert h.s.state_dict() == other.s.state_dict()


def test_replayed_prompts_get_fresh_rollouts_only(run_train, monkeypatch):
    token_rewards(monkeypatch, 4)
    seen = []
    original = PromptReplay.observe

    def spy(self, groups, stats, ctx):
        seen.append((ctx.iteration, ctx.update, list(self.replayed_now),
                     [(g.prompt.uid, g.pass_rate, [(s.sample_id, s.source, s.policy_version) for s in g.samples])
                      for g in groups]))
        return original(self, groups, stats, ctx)

    monkeypatch.setattr(PromptReplay, "observe", spy)
    summary, path = run_train(GRPO + ["strategy=prompt_replay", "strategy.cooldown=2", "strategy.max_reuse=1"])
    assert summary["fresh_trajectories"] == summary["samples_trained"] == 6 * 16  # replays take ordinary slots
    ids = [sid for _, _, _, gs in seen for _, _, ss in gs for sid, _, _ in ss]
    assert len(ids) == len(set(ids)) == 6 * 16  # no trajectory is ever trained on twice
    assert all(src == "fresh" and v == update for _, update, _, gs in seen for _, _, ss in gs for _, src, v in ss)
    last: dict[str, tuple[int, float]] = {}
    replays = 0
    for it, _, replayed, gs in seen:
        assert len(gs) == 4 and len({u for u, _, _ in gs}) == 4 and len(replayed) <= 2
        for uid in replayed:
            before, p = last[uid]
            assert it - before >= 2 and 0.24 <= p <= 0.70  # cooled down (2 +- 20% rounds to 2), in window
            replays += 1
        last.update({u: (it, p) for u, p, _ in gs})
    assert replays >= 1
    assert max(sum(uid in r for _, _, r, _ in seen) for uid in last) <= 1  # max_reuse
    metrics = {r["metric"] for r in load_rows(path) if r["split"] == "strategy"}
    assert {"prompt_replay_prompts", "prompt_replay_heap_size", "prompt_replay_mean_reuse",
            "prompt_replay_zero_variance_frac", "prompt_replay_mean_abs_advantage"} <= metrics
    # re-asked prompts count as replay in the train rows: 4 samples of each of the 4 groups
    fraction = {r["iteration"]: r["value"] for r in load_rows(path) if r["split"] == "train" and r["metric"] == "replay_fraction"}
    assert [fraction[it + 1] for it, _, _, _ in seen] == [len(replayed) / 4 for _, _, replayed, _ in seen]
    assert max(fraction.values()) > 0


def test_resume_reproduces_rows(run_train, monkeypatch, tmp_path):
    token_rewards(monkeypatch, 4)
    assert_resume_reproduces(run_train, monkeypatch, tmp_path, GRPO + ["strategy=prompt_replay", "strategy.cooldown=1"])


def test_with_dynamic_sampling_every_scoring_counts_even_a_dropped_one(run_train, monkeypatch):
    """§3.2 step 1 records a prompt's pass rate after every scoring. With trainer.dynamic_sampling the
    trainer drops groups whose answers all agree (and a refill round's surplus); those scorings count
    too, so a prompt is never replayed from a pass rate that a later, dropped scoring has replaced."""
    from replaylab.training.dynamic_sampling import DynamicSamplingMixin

    token_rewards(monkeypatch, 2)
    scorings: list[tuple[int, str, float]] = []  # every rewarded fresh group: (iteration, uid, pass rate)
    trained: set[tuple[int, str]] = set()
    replays: list[tuple[int, list[str]]] = []
    split, observe, plan = DynamicSamplingMixin.split_informative, PromptReplay.observe, PromptReplay.plan

    def spy_split(self, groups, kept, dropped):
        scorings.extend((self.iteration, g.prompt.uid, g.pass_rate) for g in groups)
        return split(self, groups, kept, dropped)

    def spy_observe(self, groups, stats, ctx):
        trained.update((ctx.iteration, g.prompt.uid) for g in groups)
        return observe(self, groups, stats, ctx)

    def spy_plan(self, ctx):
        out = plan(self, ctx)
        replays.append((ctx.iteration, list(out.reasked)))
        return out

    monkeypatch.setattr(DynamicSamplingMixin, "split_informative", spy_split)
    monkeypatch.setattr(PromptReplay, "observe", spy_observe)
    monkeypatch.setattr(PromptReplay, "plan", spy_plan)
    summary, _ = run_train(GRPO + ["strategy=prompt_replay", "strategy.cooldown=1",
                                   "trainer.dynamic_sampling=true", "trainer.dynamic_sampling_max_rounds=0",
                                   "budget.max_updates=12", "data.size=16", "trainer.samples_per_prompt=2"])
    assert summary["filtered_groups"] > 0  # the filter had groups to drop
    dropped = [(i, u, p) for i, u, p in scorings if (i, u) not in trained]
    checked = 0
    for it, uids in replays:
        for uid in uids:
            last = [p for i, u, p in scorings if u == uid and i < it][-1]  # its last scoring before this plan
            assert 0.24 <= last <= 0.70, (it, uid, last)
            checked += 1
    assert checked >= 1
    # the case this guards: a replayed prompt whose scoring was dropped in between
    assert any(u in {v for _, us in replays for v in us} for _, u, _ in dropped)


def test_a_refill_never_asks_a_replayed_prompt_twice(run_train, monkeypatch):
    """Dynamic sampling refills from the data stream. On a 16-prompt stream a refill soon reaches a prompt
    that Prompt Replay re-asked in the same iteration; drawn again, it would stand twice in the batch (two
    groups of one prompt, one update). Refills skip the iteration's re-asked prompts."""
    token_rewards(monkeypatch, 2)
    batches: list[tuple[int, list[str], list[str]]] = []  # (iteration, re-asked uids, uids of the trained groups)
    observe, plan = PromptReplay.observe, PromptReplay.plan

    def spy_observe(self, groups, stats, ctx):
        batches.append((ctx.iteration, list(self.replayed_now), [g.prompt.uid for g in groups]))
        return observe(self, groups, stats, ctx)

    monkeypatch.setattr(PromptReplay, "observe", spy_observe)
    summary, _ = run_train(GRPO + ["strategy=prompt_replay", "strategy.cooldown=1",
                                   "trainer.dynamic_sampling=true", "trainer.dynamic_sampling_max_rounds=0",
                                   "budget.max_updates=12", "data.size=16", "trainer.samples_per_prompt=2"])
    assert summary["dynamic_rounds"] > 0  # refills happened
    reasked = [(it, uid, uids.count(uid)) for it, replayed, uids in batches for uid in replayed]
    # (0: its group had no reward variance and was dropped; 2 is what refills gave before, e.g. at iteration 2)
    assert sum(n == 1 for _, _, n in reasked) >= 3, reasked
    assert all(n <= 1 for _, _, n in reasked), [r for r in reasked if r[2] > 1]


def test_under_dynamic_sampling_zero_variance_and_advantage_are_of_every_group_scored(run_train, monkeypatch):
    """Dynamic sampling drops the zero-variance groups before training, so over the trained groups the paper's
    metric read 0 by construction (and |advantage| ignored the dropped groups' zeros). Over every group scored
    (trained, and dropped: uninformative or surplus) the train row and the strategy row agree with a count over
    the groups the strategy saw, and the pass rate of the re-asked prompts counts the re-asked groups scored."""
    token_rewards(monkeypatch, 2)
    expected: list[tuple[float, float, float | None]] = []
    dropped: list = []
    observe, observe_filtered = PromptReplay.observe, PromptReplay.observe_filtered

    def spy_filtered(self, groups, ctx):
        dropped.extend(groups)
        return observe_filtered(self, groups, ctx)

    def spy_observe(self, groups, stats, ctx):
        scored = [*groups, *dropped]
        dropped.clear()
        samples = [s for g in scored for s in g.samples]
        again = [g.pass_rate for g in scored if g.prompt.uid in set(self.replayed_now)]
        expected.append((sum(g.reward_std == 0 for g in scored) / len(scored),
                         sum(abs(s.advantage or 0.0) for s in samples) / len(samples),
                         sum(again) / len(again) if again else None))
        return observe(self, groups, stats, ctx)

    monkeypatch.setattr(PromptReplay, "observe", spy_observe)
    monkeypatch.setattr(PromptReplay, "observe_filtered", spy_filtered)
    _, path = run_train(GRPO + ["strategy=prompt_replay", "strategy.cooldown=1",
                                "trainer.dynamic_sampling=true", "trainer.dynamic_sampling_max_rounds=0",
                                "budget.max_updates=12", "data.size=16", "trainer.samples_per_prompt=2"])
    rows = load_rows(path)
    series = lambda split, metric: [r["value"] for r in rows if r["split"] == split and r["metric"] == metric]
    frac, adv, passes = zip(*expected)
    assert max(frac) > 0  # dropped zero-variance groups count (over the trained ones it read 0 throughout)
    assert series("train", "zero_variance_groups") == pytest.approx(frac)
    assert series("strategy", "prompt_replay_zero_variance_frac") == pytest.approx(frac)
    assert series("train", "abs_advantage") == pytest.approx(adv)
    assert series("strategy", "prompt_replay_mean_abs_advantage") == pytest.approx(adv)
    assert series("strategy", "prompt_replay_replayed_pass_rate") == pytest.approx([p for p in passes if p is not None])
