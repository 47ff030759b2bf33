"""FIFO experience replay and f-OPD through the real trainer (ALGORITHMS.md §7, §9): the buffer
keeps the newest N groups, every trained group is in it (never an evicted one), groups are reused,
generation follows the ratio; f-OPD's weights fall with staleness and match a hand computation of
the weighted loss; both resume exactly."""

from __future__ import annotations

import math

import pytest
import torch

from replaylab.objectives import opd as opd_objectives
from replaylab.replay.fifo import FIFO
from replaylab.replay.fopd import FOPD
from test_replay_buffer import GRPO, assert_resume_reproduces, token_rewards

OPD = ["trainer=opd", "trainer.prompts_per_iteration=8", "eval=none", "budget.max_updates=6"]


def test_fifo_never_trains_an_evicted_group_and_reuses_the_rest(run_train, monkeypatch):
    token_rewards(monkeypatch, 3)
    real, log = FIFO.compose, []

    def spy(self, fresh, initial, plan, ctx):
        before = {s.sample_id for x in self.buffer for s in x.group.samples}
        out = real(self, fresh, initial, plan, ctx)
        kept = {s.sample_id for x in self.buffer for s in x.group.samples}
        log.append((len(fresh), before | {s.sample_id for g in fresh for s in g.samples}, kept,
                    [s.sample_id for g in out for s in g.samples]))
        return out

    monkeypatch.setattr(FIFO, "compose", spy)
    # 4 groups trained per iteration, 1 fresh (ratio 0.25), a buffer of 2 batches = 8 groups
    summary, _ = run_train(GRPO + ["strategy=fifo", "strategy.generation_ratio=0.25", "strategy.buffer_batches=2",
                                   "budget.max_updates=10"])
    evicted: set[str] = set()
    trained_count: dict[str, int] = {}
    for n_fresh, seen, kept, trained in log:
        assert len(trained) == 4 * 4 and len(set(trained)) == len(trained)  # 4 distinct groups of 4
        assert set(trained) <= kept and not set(trained) & evicted  # only what the buffer still holds
        evicted |= seen - kept
        for sid in trained:
            trained_count[sid] = trained_count.get(sid, 0) + 1
    assert [x[0] for x in log] == [4] + [1] * 9  # the first iteration fills the buffer, then W = ceil(0.25 x 4)
    assert evicted, "nothing was evicted: the eviction rule went untested"
    assert max(trained_count.values()) > 1  # groups are trained again until evicted
    # the draw is a sample of the buffer, not all of it: some group in the buffer was left out of a batch
    assert any(len(kept) > len(trained) for _, _, kept, trained in log)
    assert summary["fresh_trajectories"] == (4 + 9) * 4  # generation follows the ratio, not the batch
    assert summary["samples_trained"] == 10 * 16


def test_fopd_weights_fall_with_staleness(run_train, monkeypatch):
    real, seen = opd_objectives.freshness_weights, []

    def spy(samples, current_logp, mask):
        weights, metrics = real(samples, current_logp, mask)
        seen.append([(s.policy_version, float(w)) for s, w in zip(samples, weights.squeeze(-1))])
        return weights, metrics

    monkeypatch.setattr(opd_objectives, "freshness_weights", spy)
    run_train(OPD + ["strategy=fopd", "strategy.generation_ratio=0.25", "strategy.buffer_batches=4", "trainer.lr=3e-3"])
    by_age: dict[int, list[float]] = {}
    for update, batch in enumerate(seen):
        for version, w in batch:
            by_age.setdefault(update - version, []).append(w)
    means = [sum(by_age[a]) / len(by_age[a]) for a in sorted(by_age)]
    assert len(means) >= 3 and means[0] > 0.999  # a sample of this iteration: f = 1 on the first minibatch
    assert all(a > b or a == b == 0.0 for a, b in zip(means, means[1:])), f"mean freshness by age {means} does not fall"
    assert 0 < means[1] < 1  # a weight strictly between: not only the f_min cut


def test_fopd_loss_is_the_freshness_weighted_kl(run_train):
    """opd_full_rkl under f-OPD == sum_i w_i sum_t KL_it / sum_i T_i, w_i = loss weight x (f_i, or 0
    below f_min)."""
    from replaylab.models.batching import collate, response_logits, token_logprobs
    from replaylab.objectives import build_objective
    from replaylab.types import OffPolicy, Prompt, Sample

    cfg = run_train.config(OPD + ["strategy=fopd"])
    torch.manual_seed(0)
    from transformers import Qwen3Config, Qwen3ForCausalLM
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, head_dim=8))
    objective = build_objective(cfg.trainer, 8, 1.0)
    samples = []
    for i, (drift, n) in enumerate([(0.0, 4), (0.05, 3), (0.4, 5)]):
        p = Prompt(f"p{i}", "x", (1, 2, 3), "0")
        ids = torch.randint(0, 16, (n,))
        s = Sample(p, ids, torch.zeros(n), 0, "replay", False, f"s{i}",
                   teacher_full_logprobs=torch.log_softmax(torch.randn(n, 16), -1),
                   off_policy=OffPolicy(freshness_alpha=10.0, freshness_min=0.25, loss_weight=0.5 if i == 1 else 1.0))
        samples.append(s)
    with torch.no_grad():
        batch = collate(samples, 0)
        current = token_logprobs(response_logits(model, batch), batch.response_ids)
    for s, cur, drift in zip(samples, current, [0.0, 0.05, 0.4]):  # behaviour = current - drift: known |log ratio|
        s.behaviour_logprobs = cur[: s.num_tokens] - drift
    loss, metrics = objective.loss(model, samples, 0)
    with torch.no_grad():
        logq = torch.log_softmax(response_logits(model, batch), -1)
        by_hand, tokens = 0.0, 0
        for i, (s, drift) in enumerate(zip(samples, [0.0, 0.05, 0.4])):
            f = math.exp(-10.0 * drift)
            w = (f if f >= 0.25 else 0.0) * s.off_policy.loss_weight
            kl = (logq[i, : s.num_tokens].exp() * (logq[i, : s.num_tokens] - s.teacher_full_logprobs)).sum(-1)
            by_hand += w * float(kl.sum())
            tokens += s.num_tokens
    assert math.isclose(float(loss.detach()), by_hand / tokens, rel_tol=1e-4)
    assert math.isclose(metrics["freshness_cut_frac"], 1 / 3, rel_tol=1e-6) and math.isclose(
        metrics["freshness_mean"], (1 + math.exp(-0.5) + math.exp(-4.0)) / 3, rel_tol=1e-4)
    unweighted = sum(float((logq[i, : s.num_tokens].exp() * (logq[i, : s.num_tokens] - s.teacher_full_logprobs)).sum())
                     for i, s in enumerate(samples)) / tokens
    assert abs(unweighted - float(loss.detach())) > 1e-3  # the weights change the loss: the check has power


def test_fopd_age_mode_weights_and_cuts(run_train, monkeypatch):
    real, log = FOPD.compose, []

    def spy(self, fresh, initial, plan, ctx):
        out = real(self, fresh, initial, plan, ctx)
        log.append((ctx.update, [s for g in out for s in g.samples], self.age_cut))
        return out

    monkeypatch.setattr(FOPD, "compose", spy)
    run_train(OPD + ["strategy=fopd", "strategy.freshness=age", "strategy.alpha=0.5", "strategy.f_min=0.3",
                     "strategy.generation_ratio=0.25", "strategy.buffer_batches=4"])
    cut = 0
    for update, samples, age_cut in log:
        for s in samples:
            f = math.exp(-0.5 * (update - s.policy_version))
            assert f >= 0.3 and math.isclose(s.off_policy.loss_weight, f)
        cut += age_cut
    assert cut > 0, "no sample was old enough to be cut: the f_min rule went untested"


def test_fifo_behaviour_anchor_skips_the_proximal_recompute(run_train, monkeypatch):
    """ratio_base=behaviour: replayed samples keep their stored behaviour log-probs as the ratio's
    anchor, so the trainer computes no proximal log-probs (and the ledger counts no such forward)."""
    from replaylab.objectives.inputs import old_logprobs
    from replaylab.training.trainer import Trainer

    token_rewards(monkeypatch, 3)
    real, seen = Trainer.attach_proximal, []

    def spy(self, samples, version):
        real(self, samples, version)
        seen.append([(s.source, s.proximal_logprobs is not None, old_logprobs(s) is s.behaviour_logprobs) for s in samples])

    monkeypatch.setattr(Trainer, "attach_proximal", spy)
    runs = {}
    for anchor in ("proximal", "behaviour"):
        seen.clear()
        runs[anchor] = run_train(GRPO + ["strategy=fifo", f"strategy.ratio_base={anchor}"])[0]
        replayed = [x for batch in seen for x in batch if x[0] == "replay"]
        assert replayed, "nothing was replayed: the test has no power"
        if anchor == "behaviour":
            assert all(not prox and anchored for _, prox, anchored in replayed)
        else:
            assert all(prox and not anchored for _, prox, anchored in replayed)
    assert runs["behaviour"]["flops_training"] < runs["proximal"]["flops_training"]  # the skipped forwards


@pytest.mark.parametrize("overrides", [GRPO + ["strategy=fifo", "strategy.buffer_batches=1"], OPD + ["strategy=fopd"]],
                         ids=["fifo", "fopd"])
def test_buffer_strategies_resume_exactly(run_train, monkeypatch, tmp_path, overrides):
    token_rewards(monkeypatch, 3)
    assert_resume_reproduces(run_train, monkeypatch, tmp_path, overrides)
