"""The GRPO features the papers' recipes need (issue 13), checked against hand computations and
through real training steps: DAPO's overlong shaping, masking truncated completions, RePO's
two-term loss with KL on the online rows, the sample standard deviation, dynamic sampling and
the cosine schedule."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from conftest import load_rows
from test_replay_buffer import GRPO as SHORT_GRPO
from test_replay_buffer import assert_resume_reproduces, token_rewards
from replaylab.config import TrainerConfig
from replaylab.models.batching import collate, response_logits, token_logprobs
from replaylab.objectives.grpo import GRPO
from replaylab.training.dynamic_sampling import DynamicSamplingExhausted
from replaylab.training.schedule import lr_multiplier
from replaylab.types import Group, OffPolicy, Prompt, Sample

V, PAD, MAX_LEN = 13, 0, 8


def tiny_model(seed: int) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=8, max_position_embeddings=64, tie_word_embeddings=True,
                      initializer_range=0.5)
    return Qwen3ForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def model():
    return tiny_model(0)


def own_logprobs(model, s: Sample) -> list[float]:
    """log pi(y_t) of one sample, computed alone (no padding, no batching)."""
    with torch.no_grad():
        b = collate([s], PAD)
        return token_logprobs(response_logits(model, b), b.response_ids)[0].tolist()


def make_sample(model, uid: str, length: int, reward: float, seed: int, **kw) -> Sample:
    g = torch.Generator().manual_seed(seed)
    prompt = Prompt(uid, uid, (1 + seed % 3, 2, 3), "0")
    ids = torch.randint(1, V, (length,), generator=g)
    s = Sample(prompt, ids, torch.zeros(length), 0, kw.pop("source", "fresh"), length == MAX_LEN, f"{uid}-{seed}",
               reward=reward, **kw)
    # behaviour log-probs off the current policy by up to +-0.4: ratios on both sides of the clip
    noise = (torch.rand(length, generator=g) - 0.5) * 0.8
    s.behaviour_logprobs = torch.tensor(own_logprobs(model, s)) - noise
    return s


def objective(**trainer) -> GRPO:
    cfg = TrainerConfig(objective="grpo", kind="grpo", samples_per_prompt=2, **trainer)
    return GRPO(cfg, max_response_tokens=MAX_LEN, temperature=1.0)


def surrogate(lp: float, old: float, adv: float, lo: float, hi: float) -> float:
    r = math.exp(lp - old)
    return min(r * adv, min(max(r, 1 - lo), 1 + hi) * adv)


def zscore(values: list[float], ddof: int = 0) -> list[float]:
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - ddof))
    return [(v - mean) / (std + 1e-4) for v in values]


def two_groups(model) -> list[Group]:
    # lengths 3, 6, 8 (truncated) and 5, 8 (truncated), 7 under a limit of 8
    g1 = [make_sample(model, "a", n, r, i) for i, (n, r) in enumerate([(3, 1.0), (6, 0.0), (8, 1.0)])]
    g2 = [make_sample(model, "b", n, r, 10 + i) for i, (n, r) in enumerate([(5, 0.0), (8, 1.0), (7, 0.0)])]
    return [Group(g1[0].prompt, g1), Group(g2[0].prompt, g2)]


def hand_dapo(model, rows: list[Sample], adv: dict[str, float], lo=0.2, hi=0.2) -> float:
    total, tokens = 0.0, 0
    for s in rows:
        for lp, old in zip(own_logprobs(model, s), s.behaviour_logprobs.tolist()):
            total -= surrogate(lp, old, adv[s.sample_id], lo, hi)
            tokens += 1
    return total / tokens


@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_overlong_shaping_and_truncation_masking_match_a_hand_computation(model, factor):
    groups = two_groups(model)
    samples = [s for g in groups for s in g.samples]
    # DAPO's length term under L_max = 8, cache 4: 0 up to 4 tokens, then -(L - 4) / 4 * factor
    penalty = {3: 0.0, 5: -0.25, 6: -0.5, 7: -0.75, 8: -1.0}
    shaped = [[s.reward + factor * penalty[s.num_tokens] for s in g.samples] for g in groups]
    adv = {s.sample_id: a for g, r in zip(groups, shaped) for s, a in zip(g.samples, zscore(r))}

    plain, masked = objective(), objective(overlong_cache=4, overlong_factor=factor, mask_truncated=True)
    masked.prepare(groups)
    assert {s.sample_id: s.advantage for s in samples} == pytest.approx(adv, abs=1e-6)
    kept = [s for s in samples if not s.truncated]
    assert len(kept) == 4
    loss, metrics = masked.loss(model, samples, PAD, batch=samples)
    assert loss.item() == pytest.approx(hand_dapo(model, kept, adv), abs=1e-5)
    assert metrics["num_seqs"] == 4 and metrics["num_tokens"] == 3 + 6 + 5 + 7

    # the same advantages without the mask: truncated rows count again (power: the losses differ)
    unmasked = plain.loss(model, samples, PAD, batch=samples)[0].item()
    assert unmasked == pytest.approx(hand_dapo(model, samples, adv), abs=1e-5)
    assert abs(unmasked - loss.item()) > 1e-3
    # without shaping the advantages are the plain rewards' z-scores
    plain.prepare(groups)
    assert samples[1].advantage == pytest.approx(zscore([1.0, 0.0, 1.0])[1], abs=1e-6)

    # slices add up to the minibatch, even one whose rows are all masked (share 0)
    masked.prepare(groups)
    slices = [[samples[2], samples[4]], [samples[0], samples[3]], [samples[1], samples[5]]]
    parts = [(masked.share(p, samples), masked.loss(model, p, PAD, batch=samples)[0]) for p in slices]
    assert parts[0][0] == 0.0 and parts[0][1].item() == 0.0
    assert sum(w * part.item() for w, part in parts) == pytest.approx(loss.item(), abs=1e-5)


@pytest.mark.parametrize("aggregation", ["dapo", "grpo"])
def test_repo_loss_is_online_term_plus_lambda_times_replay_term_with_kl_on_online_rows(model, aggregation):
    reference, lam, beta = tiny_model(1), 0.5, 0.1
    on = [make_sample(model, "a", n, r, i) for i, (n, r) in enumerate([(3, 1.0), (6, 0.0), (4, 1.0)])]
    off_policy = OffPolicy(ratio_base="behaviour", is_cap=None, cap_from_trainer=False, loss_weight=lam, own_term=True)
    off = [make_sample(model, "a", n, r, 20 + i, source="replay", off_policy=off_policy)
           for i, (n, r) in enumerate([(2, 0.0), (7, 1.0)])]
    batch = on + off
    for s, a in zip(batch, [0.9, -1.1, 0.4, -0.7, 1.3]):
        s.advantage = a
    obj = objective(aggregation=aggregation, kl_coef=beta)

    def term(rows, kl: bool) -> float:
        """One term aggregated over its own rows: token mean (dapo) or mean of sequence means (grpo)."""
        per_row = []
        for s in rows:
            lps, refs = own_logprobs(model, s), own_logprobs(reference, s)
            vals = []
            for lp, old, ref in zip(lps, s.behaviour_logprobs.tolist(), refs):
                v = -surrogate(lp, old, s.advantage, 0.2, 0.2)
                if kl:
                    v += beta * (math.exp(ref - lp) - (ref - lp) - 1)
                vals.append(v)
            per_row.append(vals)
        if aggregation == "dapo":
            return sum(map(sum, per_row)) / sum(map(len, per_row))
        return sum(sum(v) / len(v) for v in per_row) / len(per_row)

    expected = term(on, kl=True) + lam * term(off, kl=False)
    loss = obj.loss(model, batch, PAD, reference=reference, batch=batch)[0].item()
    assert loss == pytest.approx(expected, abs=1e-5)
    # one joint aggregation over all five rows is a different number (the test can fail)
    joint = [s.replayed(source=s.source) for s in batch]
    for s, src in zip(joint, batch):
        s.off_policy = OffPolicy(**{**src.off_policy.__dict__, "own_term": False})
    assert abs(obj.loss(model, joint, PAD, reference=reference, batch=joint)[0].item() - expected) > 1e-3
    # slices mixing the two terms add up to the minibatch's loss
    slices = [[on[0], off[1]], [on[1], on[2], off[0]]]
    total = sum(obj.share(p, batch) * obj.loss(model, p, PAD, reference=reference, batch=batch)[0].item() for p in slices)
    assert total == pytest.approx(expected, abs=1e-5)


def test_lr_multiplier_is_hf_cosine_after_replaylab_warmup():
    from transformers import get_cosine_schedule_with_warmup

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    hf = get_cosine_schedule_with_warmup(opt, num_warmup_steps=5, num_training_steps=50)
    hf_values = []
    for _ in range(50):
        hf_values.append(opt.param_groups[0]["lr"])
        opt.step()
        hf.step()
    ours = [lr_multiplier(u, 5, 50, "cosine") for u in range(50)]
    assert ours[5:] == pytest.approx(hf_values[5:], abs=1e-12)
    assert ours[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])  # HF's first update would have lr 0
    assert ours[-1] < 0.01 and lr_multiplier(10, 5, 50, "constant") == 1.0


def row_value(row: dict[str, float], name: str) -> float:
    return row[name]


# Real training steps on the micro world, graded by a stand-in (reward 1 iff the token-id sum is
# even: the micro world's student solves nothing, so real grading gives only zero-variance groups).
GRPO_RUN = ["trainer=grpo", "teacher=none", "trainer.prompts_per_iteration=8", "eval=none",
            "eval.probe_size=0", "trainer.warmup_updates=0"]


def train_rows(run_train, overrides, output_root=None) -> tuple[dict, list[dict[str, float]]]:
    """The run's summary and its train metrics, one {metric: value} per iteration in order."""
    summary, run_dir = run_train(GRPO_RUN + overrides, output_root=output_root)
    per_update: dict[int, dict[str, float]] = {}
    for r in load_rows(run_dir):
        if r["split"] == "train":
            per_update.setdefault(r["update"], {})[r["metric"]] = r["value"]
    return summary, [per_update[u] for u in sorted(per_update)]


def test_cosine_schedule_and_sample_std_through_training_steps(run_train, monkeypatch):
    token_rewards(monkeypatch, 2)
    base = ["trainer.samples_per_prompt=4", "budget.max_updates=4", "trainer.lr=1e-3"]
    _, pop = train_rows(run_train, base + ["trainer.lr_schedule=cosine", "trainer.warmup_fraction=0.25"])
    expected = [1e-3 * lr_multiplier(u, 1, 4, "cosine") for u in range(4)]
    assert [row_value(r, "lr") for r in pop] == pytest.approx(expected)
    # same rollouts at the first iteration; Bessel's correction scales |A| by sqrt((G - 1) / G)
    _, sample = train_rows(run_train, base + ["trainer.lr_schedule=cosine", "trainer.warmup_fraction=0.25",
                                              "trainer.advantage_std=sample"])
    a_pop, a_sample = row_value(pop[0], "abs_advantage"), row_value(sample[0], "abs_advantage")
    assert a_pop > 0.1
    assert a_sample / a_pop == pytest.approx(math.sqrt(3 / 4), rel=1e-3)


def test_dynamic_sampling_fills_every_batch_and_counts_every_rollout(run_train, monkeypatch):
    token_rewards(monkeypatch, 2)
    shape = ["trainer.samples_per_prompt=2", "budget.max_updates=3"]
    _, plain = train_rows(run_train, shape)
    assert max(row_value(r, "zero_variance_groups") for r in plain) > 0  # the filter has something to do
    summary, rows = train_rows(run_train, shape + ["trainer.dynamic_sampling=true", "trainer.dynamic_sampling_max_rounds=0"])
    assert all(row_value(r, "inert_groups") == 0 for r in rows)  # every trained group has reward variance
    # zero variance is of every group scored, the dropped ones too (over the trained ones it would read 0 by construction)
    assert max(row_value(r, "zero_variance_groups") for r in rows) > 0
    assert all(row_value(r, "batch_samples") == 16 for r in rows)
    assert summary["dynamic_rounds"] > 0 and summary["filtered_groups"] > 0
    assert summary["trajectories"] == summary["samples_trained"] + summary["filtered_trajectories"]
    assert summary["trajectories"] == 16 * sum(row_value(r, "dynamic_rounds") for r in rows)
    assert summary["filtered_trajectories"] == 2 * summary["filtered_groups"]


def test_dynamic_sampling_stops_with_an_error_when_rounds_run_out(run_train, monkeypatch):
    token_rewards(monkeypatch, 2)
    with pytest.raises(DynamicSamplingExhausted, match="trainer.dynamic_sampling_max_rounds=1"):
        run_train(GRPO_RUN + ["trainer.samples_per_prompt=2", "trainer.prompts_per_iteration=16",
                              "trainer.dynamic_sampling=true", "trainer.dynamic_sampling_max_rounds=1"])


def test_overlong_shaping_and_masking_through_a_training_step(run_train, monkeypatch):
    token_rewards(monkeypatch, 2)
    shape = ["trainer.samples_per_prompt=2", "budget.max_updates=2", "budget.max_response_tokens=10"]
    _, plain = train_rows(run_train, shape)
    _, shaped = train_rows(run_train, shape + ["trainer.overlong_cache=5", "trainer.mask_truncated=true"])
    truncation = row_value(shaped[0], "truncation_rate")
    assert 0 < truncation < 1, "the budget must truncate some responses and not others for this test"
    assert row_value(plain[0], "num_seqs") == 16
    assert row_value(shaped[0], "num_seqs") == pytest.approx(16 * (1 - truncation))
    assert row_value(shaped[0], "overlong_penalty") < 0 and "overlong_penalty" not in plain[0]


def test_a_run_with_every_recipe_feature_resumes_exactly(run_train, monkeypatch, tmp_path):
    """Prompt Replay's recipe (dynamic sampling, masking, centred advantages) plus shaping and a cosine
    schedule: killed after its checkpoint at update 3 and rerun, it writes the uninterrupted rows."""
    token_rewards(monkeypatch, 2)
    assert_resume_reproduces(run_train, monkeypatch, tmp_path, SHORT_GRPO + [
        "strategy=prompt_replay", "strategy.cooldown=1", "trainer.dynamic_sampling=true", "trainer.mask_truncated=true",
        "trainer.advantage=center", "trainer.overlong_cache=4", "budget.max_response_tokens=16",
        "trainer.lr_schedule=cosine", "trainer.warmup_updates=0", "trainer.warmup_fraction=0.2"])


def test_the_clip_binds_only_where_a_ratio_can_leave_one(run_train, monkeypatch):
    """Why config_checks.check_clip refuses a clip with one update per iteration: there every PPO ratio is to the
    policy being updated, 1 up to float error, so no token is clipped; with two minibatches the second update's
    ratios leave 1 (the first changed the policy) and the clip binds. Real GRPO runs at a large lr."""
    token_rewards(monkeypatch, 2)  # groups with reward variance: the loss runs
    common = [*GRPO_RUN, "trainer.lr=3e-3", "trainer.warmup_updates=0", "budget.max_updates=4"]

    def train_metric(run, metric):
        return [r["value"] for r in load_rows(run) if r["split"] == "train" and r["metric"] == metric]

    _, one = run_train(common)
    assert max(train_metric(one, "ratio_max")) < 1 + 1e-4 and min(train_metric(one, "ratio_min")) > 1 - 1e-4
    assert set(train_metric(one, "clip_frac")) == {0.0}
    _, two = run_train([*common, "trainer.minibatches=2", "trainer.clip_low=0.001", "trainer.clip_high=0.001"])
    assert max(train_metric(two, "clip_frac")) > 0
