"""RePO (ALGORITHMS.md §4): retrieval strategies and the max-variance search; through the real
trainer, replayed rows are the stored samples (same behaviour log-prob tensors, original policy
versions) ratio'd against their behaviour policy, chosen before the buffer update."""

from __future__ import annotations

import itertools
import random

import torch

from conftest import load_rows
from replaylab.objectives.inputs import old_logprobs
from replaylab.replay.base import PromptStream, StepContext
from replaylab.replay.repo import RePO, RePOConfig, best_variance_subset
from replaylab.types import Prompt, Sample
from test_replay_buffer import GRPO, assert_resume_reproduces, token_rewards


def key(rewards, idx):
    vals = [rewards[i] for i in idx]
    mean = sum(vals) / len(vals)
    return (round(sum((v - mean) ** 2 for v in vals) / len(vals), 9), round(sum(vals), 9))


def test_max_variance_fallback_matches_exhaustive_search_in_value():
    rng = random.Random(0)
    for trial in range(300):
        n = rng.randint(1, 9)
        k = rng.randint(1, n)
        rewards = [float(rng.randint(0, 1)) if trial % 2 else round(rng.uniform(-1, 2), 2) for _ in range(n)]
        exhaustive = best_variance_subset(rewards, k, exhaustive_limit=10**9)
        fast = best_variance_subset(rewards, k, exhaustive_limit=0)
        best = max(key(rewards, c) for c in itertools.combinations(range(n), k))
        assert len(exhaustive) == len(fast) == k
        assert key(rewards, exhaustive) == key(rewards, fast) == best


def test_max_variance_exhaustive_takes_the_first_best_subset_like_the_paper():
    rewards = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]
    assert best_variance_subset(rewards, 4, 10**6) == [0, 1, 2, 4]  # two 1s, two 0s, earliest
    assert best_variance_subset([1.0, 0.0, 0.0], 2, 10**6) == [0, 1]  # var tie with [0, 2]; earliest wins


def stored(rewards):
    p = Prompt("q", "q", (1,), "0")
    return [Sample(p, torch.tensor([i]), torch.zeros(1), i, "fresh", False, f"s{i}", reward=r)
            for i, r in enumerate(rewards)]


def test_selection_strategies():
    ctx = StepContext(0, 0, 1, 4, 1, 10, PromptStream([Prompt("q", "q", (1,), "0")], [0]), random.Random(0))
    rows = stored([0.0, 1.0, 0.0, 1.0, 1.0])

    def pick(selection, **kw):
        k = {} if selection == "all" else {"num_replays": 2}  # "all" replays the whole buffer: k is refused there
        cfg = RePOConfig(selection=selection, **{**k, "min_cache_to_replay": 3, **kw})
        return [s.sample_id for s in RePO(cfg).select(rows, ctx)]

    assert pick("all") == ["s0", "s1", "s2", "s3", "s4"]
    assert pick("recent") == ["s3", "s4"]
    assert pick("highest") == ["s1", "s3"]  # ties: oldest first
    assert pick("max_variance") == ["s0", "s1"]
    random_pick = pick("random")
    assert len(set(random_pick)) == 2 and set(random_pick) <= {s.sample_id for s in rows}
    assert pick("all", min_cache_to_replay=6) == []  # not enough in the buffer yet


def test_replayed_rows_are_the_stored_samples_with_behaviour_ratio(run_train, monkeypatch):
    token_rewards(monkeypatch, 3)
    fresh: dict[str, tuple] = {}  # sample_id -> (behaviour log-probs, policy version, iteration, reward, uid)
    checked = []
    original = RePO.observe

    def spy(self, groups, stats, ctx):
        for g in groups:
            n_fresh = sum(s.source == "fresh" for s in g.samples)
            replay = g.samples[n_fresh:]
            assert n_fresh == 4 and all(s.source == "replay" for s in replay) and len(replay) <= 3
            if replay:
                assert g.baseline_labels == ["online"] * 4 + ["replay"] * len(replay)
                # Before this iteration's samples entered it, the prompt's buffer held its last 8 fresh samples.
                buffer = sorted((sid for sid, f in fresh.items() if f[4] == g.prompt.uid), key=lambda sid: fresh[sid][2])[-8:]
                best = sorted(buffer, key=lambda sid: -fresh[sid][3])[:3]  # highest reward, oldest first
                assert [s.sample_id for s in replay] == best
            for s in replay:
                logp, version, it, reward, uid = fresh[s.sample_id]
                assert torch.equal(s.behaviour_logprobs, logp)  # as generated (a clone taken back then)
                assert s.policy_version == version < ctx.update and it < ctx.iteration
                assert s.off_policy.ratio_base == "behaviour" and s.off_policy.is_cap is None
                assert old_logprobs(s) is s.behaviour_logprobs  # the loss ratio is taken against mu
                assert s.reward == reward and uid == g.prompt.uid
                checked.append(ctx.iteration)
            for s in g.samples[:n_fresh]:
                fresh[s.sample_id] = (s.behaviour_logprobs.clone(), s.policy_version, ctx.iteration, s.reward, g.prompt.uid)
        return original(self, groups, stats, ctx)

    monkeypatch.setattr(RePO, "observe", spy)
    # 8 prompts, 4 per iteration: each prompt comes back every second iteration.
    summary, path = run_train(GRPO + ["data.size=8", "strategy=repo", "strategy.max_cache_size=8",
                                      "strategy.min_cache_to_replay=4", "strategy.num_replays=3"])
    assert sorted(set(checked)) == [2, 3, 4, 5] and len(checked) == 4 * 4 * 3  # from each prompt's 2nd visit on
    assert summary["fresh_trajectories"] == 6 * 16
    assert summary["replayed_samples"] == len(checked) and summary["samples_trained"] == 6 * 16 + len(checked)
    rows = {(r["iteration"], r["metric"]): r["value"] for r in load_rows(path) if r["split"] == "strategy"}
    assert rows[(3, "repo_replayed_rows")] == 12 and rows[(3, "repo_effective_samples")] == 28
    assert rows[(3, "repo_offpolicy_age_mean")] == 2.0  # replayed from 2 updates back
    assert (3, "repo_online_reward") in rows and (3, "repo_offline_reward") in rows


def test_resume_reproduces_rows(run_train, monkeypatch, tmp_path):
    token_rewards(monkeypatch, 3)
    assert_resume_reproduces(run_train, monkeypatch, tmp_path, GRPO + [
        "data.size=8", "strategy=repo", "strategy.max_cache_size=8", "strategy.min_cache_to_replay=4",
        "strategy.num_replays=3", "strategy.selection=random"])


def test_a_split_group_without_gradient_counts_as_inert_though_its_rewards_vary():
    """RePO's split normalisation gives the fresh and the replayed rows their own baselines: 2 right fresh
    answers beside 2 wrong replayed ones have reward variance but every advantage is 0, so the group carries
    no gradient. The claims' "more effective steps" check reads inert_groups, not the reward-variance count."""
    from replaylab.config import TrainerConfig
    from replaylab.objectives.grpo import GRPO as GRPOObjective
    from replaylab.types import Group

    prompt = Prompt("q", "1+1=?", (1,), "2")

    def group(rewards, labels=None):
        samples = [Sample(prompt, torch.tensor([1, 2]), torch.zeros(2), 0, "fresh", False, f"s{i}", reward=r)
                   for i, r in enumerate(rewards)]
        return Group(prompt, samples, labels)

    objective = GRPOObjective(TrainerConfig(objective="grpo", kind="grpo", samples_per_prompt=2), 8, 1.0)
    groups = [group([1.0, 1.0, 0.0, 0.0], ["online"] * 2 + ["replay"] * 2),  # varies, yet no gradient
              group([1.0, 0.0, 1.0, 0.0], ["online"] * 2 + ["replay"] * 2),  # a gradient in both halves
              group([1.0, 1.0, 1.0, 1.0])]  # uniform: neither
    objective.prepare(groups)
    metrics = objective.batch_metrics(groups)
    assert [all(s.advantage == 0.0 for s in g.samples) for g in groups] == [True, False, True]
    assert metrics["inert_groups"] == 2 / 3 and metrics["zero_variance_groups"] == 1 / 3
