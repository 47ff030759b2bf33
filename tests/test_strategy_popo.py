"""POPO (ALGORITHMS.md §5): priority q * lambda^age, age limit, use-once and prompt exclusion on
crafted groups; through the real trainer, only zero-variance fresh groups are replaced, by
earlier effective groups carrying the truncated decoupled weight."""

from __future__ import annotations

import random

import torch

from conftest import load_rows
from replaylab.replay.base import Plan, PromptStream, StepContext
from replaylab.replay.popo import POPO, POPOConfig
from replaylab.types import Group, Prompt, Sample
from test_replay_buffer import GRPO, assert_resume_reproduces, token_rewards


def group(uid: str, rewards: list[float], tag: str) -> Group:
    p = Prompt(uid, uid, (1,), "0")
    return Group(p, [Sample(p, torch.tensor([1]), torch.zeros(1), 0, "fresh", False, f"{tag}-{uid}-{i}", reward=r)
                     for i, r in enumerate(rewards)])


def compose(s: POPO, it: int, groups: list[Group]) -> list[Group]:
    stream = PromptStream([Prompt("x", "x", (1,), "0")], [0])
    return s.compose(groups, [], Plan(), StepContext(it, it, len(groups), 4, 1, 100, stream, random.Random(0)))


def test_priority_age_limit_use_once_and_prompt_exclusion():
    s = POPO(POPOConfig(decay=0.5, max_age=4))
    half, quarter = [1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]  # std 0.5 and ~0.433
    compose(s, 0, [group("old", half, "t0")])
    compose(s, 1, [group("a", quarter, "t1"), group("b", half, "t1")])
    assert len(s.buffer) == 3
    # Iteration 2: priorities old .5*.25, a .433*.5, b .5*.5 -> b, then a; "b" excluded when sampled now.
    out = compose(s, 2, [group("z1", [0.0] * 4, "t2"), group("z2", [1.0] * 4, "t2"), group("b", half, "t2")])
    assert [g.prompt.uid for g in out] == ["a", "old", "b"]
    assert out[2].samples[0].sample_id == "t2-b-0"  # effective fresh groups stay
    assert all((x.off_policy.ratio_base, x.off_policy.is_cap) == ("proximal", 2.0) and x.source == "replay"
               for g in out[:2] for x in g.samples)
    # a and old were used once; b from t1 and from t2 remain.
    out = compose(s, 5, [group("z3", [0.0] * 4, "t5")])
    assert out[0].samples[0].sample_id == "t2-b-0"  # the newer b wins: .5 * .5^3 > .5 * .5^4
    out = compose(s, 6, [group("z4", [0.0] * 4, "t6")])
    assert out[0].prompt.uid == "z4" and len(s.buffer) == 0  # b from t1 is too old (5 > 4): the uniform group stays


def test_only_zero_variance_groups_are_replaced(run_train, monkeypatch):
    token_rewards(monkeypatch, 4)
    effective: dict[str, tuple[int, str, list[float]]] = {}  # sample_id -> (iteration, uid, group rewards)
    used: set[str] = set()
    replaced = 0
    original = POPO.compose

    def spy(self, fresh, initial, plan, ctx):
        nonlocal replaced
        out = original(self, fresh, initial, plan, ctx)
        assert len(out) == len(fresh)
        for f, g in zip(fresh, out):
            if g is f:
                continue
            replaced += 1
            assert f.reward_std == 0 and g.reward_std > 0  # a zero-variance group, replaced by an effective one
            assert g.prompt.uid not in {x.prompt.uid for x in fresh}
            for s in g.samples:
                it, uid, rewards = effective[s.sample_id]
                assert 1 <= ctx.iteration - it <= 8 and uid == g.prompt.uid and s.sample_id not in used
                assert s.source == "replay" and s.policy_version < ctx.update
                assert s.off_policy.is_cap == 2.0 and s.off_policy.ratio_base == "proximal"
            assert g.rewards == rewards  # its own stored rewards: the trainer z-scores within the stored group
            used.update(s.sample_id for s in g.samples)
        for f in fresh:
            if f.reward_std > 0:
                effective.update({s.sample_id: (ctx.iteration, f.prompt.uid, f.rewards) for s in f.samples})
        return out

    monkeypatch.setattr(POPO, "compose", spy)
    summary, path = run_train(GRPO + ["strategy=popo"])
    assert replaced >= 1 and summary["fresh_trajectories"] == summary["samples_trained"] == 6 * 16
    rows = [r for r in load_rows(path) if r["split"] == "strategy"]
    assert sum(r["value"] for r in rows if r["metric"] == "popo_replaced_groups") == replaced
    assert {"popo_buffer_groups", "popo_replayed_age_mean", "popo_zero_variance_fresh"} <= {r["metric"] for r in rows}


def test_resume_reproduces_rows(run_train, monkeypatch, tmp_path):
    token_rewards(monkeypatch, 4)
    assert_resume_reproduces(run_train, monkeypatch, tmp_path, GRPO + ["strategy=popo"])
