"""Prefix replay through the real trainer (ALGORITHMS.md §14): ReOPD, PrefixRL and HDL train their
continuations on the suffix only (loss rows, ledger, teacher tokens), keep each prefix's provenance,
and follow their own rules: ReOPD's cuts follow kappa^t (a chi-square test that rejects the
mirrored kappa on the same draws), PrefixRL prefixes only hard prompts with a correct initial trace cut at
f and shrinks f as they pass, HDL branches at the largest hindsight change and fills its groups."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import chisquare

from conftest import load_rows
from replaylab.replay.hdl import HDL
from replaylab.replay.prefixes import step_decay_probs
from replaylab.replay.prefixrl import PrefixRL
from replaylab.training.trainer import Trainer
from test_replay_buffer import GRPO, assert_resume_reproduces

OPD = ["trainer=opd", "trainer.prompts_per_iteration=32", "budget.max_updates=6", "eval=none"]


def full_answer_rewards(monkeypatch, modulus: int) -> None:
    """A stand-in grader on the whole answer (prefix + suffix): reward 1 iff its token-id sum is
    divisible by `modulus` (the micro student solves nothing, real grading would give all zeros)."""
    import replaylab.objectives.grpo as grpo_mod

    def grade(samples, tokenizer, grader):
        for s in samples:
            if s.reward is None:
                s.reward = float(int(s.full_response_ids.sum()) % modulus == 0)

    monkeypatch.setattr(grpo_mod, "grade_rewards", grade)


def spy_batches(monkeypatch) -> list[list]:
    """The samples of every iteration's batch, as the trainer trains on them."""
    batches, real = [], Trainer.train_on

    def spy(self, samples, provenance):
        batches.append(list(samples))
        return real(self, samples, provenance)

    monkeypatch.setattr(Trainer, "train_on", spy)
    return batches


def train_rows(path, metric: str) -> list[float]:
    return [r["value"] for r in load_rows(path) if r["split"] == "train" and r["metric"] == metric]


def test_reopd_suffix_only_and_cuts_follow_kappa(run_train, monkeypatch):
    batches = spy_batches(monkeypatch)
    summary, path = run_train(OPD + ["strategy=reopd", "trainer.samples_per_prompt=2"])
    state = torch.load(path / "checkpoints" / "update_0000006.pt", weights_only=False)["strategy"]
    pool = state["pool"]
    assert len(pool) == 6 * 32 and all(s.source == "teacher" for s in pool.values())
    assert summary["teacher_trajectories"] == len(pool)  # one stored answer per prompt, whatever samples_per_prompt
    trained = [s for b in batches for s in b]
    prefixed = [s for s in trained if s.prefix is not None]
    assert 0 < len(prefixed) < len(trained)
    for s in prefixed:  # each prefix is the start of its prompt's teacher trajectory, cut at a step end
        origin = pool[s.prompt.uid]
        k = s.prefix.num_tokens
        assert s.prefix.source == "teacher" and s.prefix.origin_id == origin.sample_id
        assert torch.equal(s.prefix.ids, origin.response_ids[:k]) and k < origin.num_tokens
    # suffix only: the loss rows' token counts, the ledger's generated and teacher-scored tokens
    assert train_rows(path, "num_tokens") == [float(sum(s.num_tokens for s in b)) for b in batches]
    pool_tokens = sum(s.num_tokens for s in pool.values())
    assert summary["tokens_generated"] == pool_tokens + sum(s.num_tokens for s in trained)
    assert summary["teacher_tokens_scored"] == sum(s.num_tokens for s in trained)  # the pool is not scored
    # step-decaying cuts: the tally of (K steps, cut before t) against p_t ~ kappa^t
    observed, expected_06, expected_late = [], [], []
    for K in sorted({int(k.split(",")[0]) for k in state["tally"]}):
        if K < 2:
            continue
        n = sum(v for k, v in state["tally"].items() if int(k.split(",")[0]) == K)
        for t in range(1, K + 1):
            observed.append(state["tally"].get(f"{K},{t}", 0))
            expected_06.append(n * step_decay_probs(K, 0.6)[t - 1])
            expected_late.append(n * step_decay_probs(K, 1 / 0.6)[t - 1])
    assert sum(observed) >= 60, "too few multi-step trajectories for the test to have power"
    assert chisquare(observed, expected_06).pvalue > 0.001
    assert chisquare(observed, expected_late).pvalue < 0.001  # the same draws reject late cuts (kappa = 1/0.6)


def test_reopd_teacher_scores_suffix_in_prefix_context(run_train, monkeypatch):
    batches = spy_batches(monkeypatch)
    captured = {}
    real = Trainer.run

    def keep_teacher(self, *args, **kwargs):
        captured["teacher"] = self.c.teacher.distribution_model()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "run", keep_teacher)
    run_train(OPD + ["strategy=reopd", "budget.max_updates=1"])
    from replaylab.models.batching import score_logprobs
    s = max((x for b in batches for x in b if x.prefix is not None), key=lambda x: x.prefix.num_tokens)
    ids = torch.tensor([list(s.prompt.token_ids) + s.prefix.ids.tolist() + s.response_ids.tolist()])
    with torch.no_grad():
        logp = torch.log_softmax(captured["teacher"](input_ids=ids).logits[0].float(), -1)
    start = len(s.context_ids)
    by_hand = logp[start - 1 : start - 1 + s.num_tokens].gather(-1, s.response_ids.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(s.teacher_logprobs.float(), by_hand, atol=1e-4, rtol=0)
    alone = s.replayed()
    alone.prefix = None  # the same suffix scored after the prompt alone: the prefix really is context
    [(lp, _)] = score_logprobs(captured["teacher"], [alone], 0, 4)
    assert (lp - s.teacher_logprobs.float()).abs().max() > 1e-3


def test_prefixrl_prefixes_hard_prompts_from_correct_traces(run_train, monkeypatch):
    full_answer_rewards(monkeypatch, 3)
    batches = spy_batches(monkeypatch)
    receive, plan = PrefixRL.receive_initial, PrefixRL.plan
    traces, fractions, collected = {}, [], []

    def spy_receive(self, groups):
        receive(self, groups)
        traces.update(self.traces)
        collected.extend(s for g in groups for s in g.samples)

    def spy_plan(self, ctx):
        before = {u: self.current_fraction(u) for u in self.traces}
        out = plan(self, ctx)
        for c in out.continue_from:
            fractions.append((c.prompt.uid, before[c.prompt.uid], c.prefix))
        return out

    monkeypatch.setattr(PrefixRL, "receive_initial", spy_receive)
    monkeypatch.setattr(PrefixRL, "plan", spy_plan)
    summary, path = run_train(GRPO + ["data.size=8", "strategy=prefixrl", "strategy.hard_pass_rate=0.5",
                                      "strategy.shrink_at=0.25", "budget.max_updates=8"])
    assert fractions, "no prompt was prefixed: the test has no power"
    for uid, f, prefix in fractions:
        origin = next(t for t in traces[uid] if t.sample_id == prefix.origin_id)
        assert origin.reward == 1.0 and origin.source == "initial" and prefix.source == "initial"
        assert prefix.num_tokens == min(origin.num_tokens - 1, int(f * origin.num_tokens))
        assert torch.equal(prefix.ids, origin.response_ids[: prefix.num_tokens])
    shrunk = [f for _, f, _ in fractions if f < 0.5]
    assert shrunk and all(math.isclose(math.log(f / 0.5, 0.5) % 1, 0, abs_tol=1e-9) for f in shrunk)  # 0.5 x 0.5^k
    trained = [s for b in batches for s in b]
    assert any(s.prefix is not None for s in trained)
    assert summary["tokens_generated"] == sum(s.num_tokens for s in collected) + sum(s.num_tokens for s in trained)
    assert train_rows(path, "num_tokens") == [float(sum(s.num_tokens for s in b)) for b in batches]
    rows = {r["metric"] for r in load_rows(path) if r["split"] == "strategy"}
    assert {"prefixrl_pass_rate_prefixed", "prefixrl_pass_rate_unprefixed"} <= rows


def test_hdl_branches_at_the_largest_hindsight_change(run_train, monkeypatch):
    full_answer_rewards(monkeypatch, 3)
    batches = spy_batches(monkeypatch)
    seen, real = [], HDL.continuations

    def spy(self, fresh, plan, ctx):
        requests = real(self, fresh, plan, ctx)
        seen.append((fresh, requests, self.hindsight([s for g in fresh for s in g.samples], ctx)))
        return requests

    monkeypatch.setattr(HDL, "continuations", spy)
    summary, path = run_train(GRPO + ["strategy=hdl", "strategy.roots=2", "strategy.branches=2", "budget.max_updates=3"])
    assert len(seen) == len(batches) == 3  # one per update: the checks below run on every one
    for (fresh, requests, deltas), batch in zip(seen, batches):
        roots = [s for g in fresh for s in g.samples]
        assert all(len(g.samples) == 2 for g in fresh)
        delta = {s.sample_id: d for s, d in zip(roots, deltas)}
        for g in fresh:
            scores = sorted(((float(delta[s.sample_id][j].abs()), s.sample_id, j) for s in g.samples
                             for j in range(1, s.num_tokens)), key=lambda c: -c[0])
            mine = [r for r in requests if r.prompt.uid == g.prompt.uid]
            assert sum(r.n for r in mine) == 2  # samples_per_prompt 4 - 2 roots
            picked = sorted(float(delta[r.prefix.origin_id][r.prefix.num_tokens].abs()) for r in mine)
            assert picked == sorted(c[0] for c in scores[: len(mine)])  # the largest |delta| positions
        # groups = roots + their continuations, 4 rows each, trained on suffixes only
        assert len(batch) == 4 * len(fresh) and sum(s.prefix is not None for s in batch) == 2 * len(fresh)
    assert train_rows(path, "num_tokens") == [float(sum(s.num_tokens for s in b)) for b in batches]
    assert summary["tokens_generated"] == sum(s.num_tokens for b in batches for s in b)


def test_hdl_hindsight_matches_a_hinted_forward(run_train, monkeypatch):
    """delta_t = log pi(y_t | hint + prompt, y_<t) - log pi(y_t | prompt, y_<t), checked by hand
    against plain forwards of the policy at that moment."""
    full_answer_rewards(monkeypatch, 3)
    checked, real = [], HDL.continuations

    def spy(self, fresh, plan, ctx):
        s = fresh[0].samples[0]
        trainer = ctx.logprobs.__self__
        model, tok, temperature = trainer.c.policy, ctx.tokenizer, trainer.cfg.rollout.temperature
        hint = tok(f"The answer is {s.prompt.answer}. ", add_special_tokens=False)["input_ids"]

        def logp(context):
            ids = torch.tensor([list(context) + s.response_ids.tolist()])
            with torch.no_grad():
                lp = torch.log_softmax(model(input_ids=ids).logits[0].float() / temperature, -1)
            return lp[len(context) - 1 : len(context) - 1 + s.num_tokens].gather(-1, s.response_ids.unsqueeze(-1)).squeeze(-1)

        delta = self.hindsight([s], ctx)[0]
        torch.testing.assert_close(delta, logp(hint + list(s.prompt.token_ids)) - logp(s.prompt.token_ids), atol=1e-4, rtol=0)
        assert delta.abs().max() > 1e-3  # the hint changes something: the rule has something to rank
        checked.append(s.sample_id)
        return real(self, fresh, plan, ctx)

    monkeypatch.setattr(HDL, "continuations", spy)
    run_train(GRPO + ["strategy=hdl", "budget.max_updates=2"])
    assert len(checked) == 2


@pytest.mark.parametrize("overrides", [
    ["trainer=opd", "trainer.prompts_per_iteration=8", "strategy=reopd", "eval=none"],
    GRPO + ["data.size=8", "strategy=prefixrl", "strategy.hard_pass_rate=0.5"],
    GRPO + ["strategy=hdl"],
], ids=["reopd", "prefixrl", "hdl"])
def test_prefix_strategies_resume_exactly(run_train, monkeypatch, tmp_path, overrides):
    full_answer_rewards(monkeypatch, 3)
    assert_resume_reproduces(run_train, monkeypatch, tmp_path, overrides + ["budget.max_updates=6"])


def test_the_reasoning_model_sweep_cuts_reopd_prefixes_at_lines_only():
    """A tokenizer that splits digits (Qwen's) makes "." a token inside every decimal: the full-scale ReOPD
    sweep must end steps at line breaks only, while the tiny world keeps its sentence ends."""
    from conftest import compose

    cfg = compose(["+sweep=reopd", "strategy=reopd_lines"], return_hydra_config=True)
    assert "reopd_lines" in str(cfg.hydra.sweeper.params.strategy).split(",")
    assert list(cfg.strategy.step_ends) == ["\n"] and cfg.strategy.label == "reopd"
    assert list(compose(["+sweep=tiny_reopd", "strategy=reopd"]).strategy.step_ends) == [".", "\n"]


def test_a_hard_prompt_whose_traces_are_too_short_to_cut_is_asked_plain_and_not_counted_as_prefixed():
    """A 2-token trace at f = 0.4 leaves int(0.8) = 0 tokens of prefix: the prompt is asked without one, and the
    strategy rows' prefixrl_hard_prompts (prompts being prefixed) does not count it."""
    from replaylab.replay.base import PromptStream, StepContext
    from replaylab.replay.prefixrl import PrefixRLConfig
    from replaylab.types import Group, Prompt, Sample

    prompts = [Prompt(f"p{i}", "q", (1,), "7") for i in range(2)]

    def answers(prompt, length, rewards):
        return Group(prompt, [Sample(prompt, torch.arange(length), torch.zeros(length), 0, "initial", False,
                                     f"{prompt.uid}-{j}", reward=r) for j, r in enumerate(rewards)], None)

    strategy = PrefixRL(PrefixRLConfig(prefix_fraction=0.4, min_fraction=0.1))
    strategy.receive_initial([answers(prompts[0], 2, [1.0, 0.0, 0.0, 0.0]),    # hard, its only trace 2 tokens
                              answers(prompts[1], 10, [1.0, 0.0, 0.0, 0.0])])  # hard, a 10-token trace: 4 of prefix
    import random
    ctx = StepContext(0, 0, 2, 4, 1, 10, PromptStream(prompts, list(range(2))), random.Random(0), None, None)
    plan = strategy.plan(ctx)
    assert [p.uid for p in plan.fresh] == ["p0"] and [c.prompt.uid for c in plan.continue_from] == ["p1"]
    assert [strategy.prefixable(p.uid) for p in prompts] == [False, True]
    metrics = strategy.observe([answers(prompts[0], 2, [0.0] * 4)], None, ctx)  # p0 asked plain, still hard
    assert metrics["prefixrl_hard_prompts"] == 1.0  # p1 only: p0 cannot be prefixed (it counted 2 before)
