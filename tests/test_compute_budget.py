"""Compute-matched budgets (ALGORITHMS.md §16): non-embedding parameter counts, the ledger's FLOPs
through the real trainer against a hand computation, `budget.max_compute` stopping a run, and the
table's compute column."""

from __future__ import annotations

import pytest

from conftest import FAST_RUN, MICRO_WORLD, compose, load_rows
from replaylab.config import ConfigError, to_object
from replaylab.training.budget import Ledger
from replaylab.training.compute import ComputeModel, non_embedding_params

FAST = ["eval.probe_size=0", "trainer.warmup_updates=0"]
# OPD with the sampled-token estimator on initial-policy rollouts: every trained sample is stale, so
# its proximal log-probs are recomputed; two passes over each iteration's batch.
OPD = ["trainer=opd_sampled", "strategy=initial", "trainer.resample_period=2", "budget.max_updates=6",
       "eval.at_start=false", "eval.max_problems=2", *FAST]
# GRPO: fresh rollouts for 2 updates, then replay of them (proximal forwards), with a KL reference.
GRPO = ["trainer=grpo", "teacher=none", "trainer.prompts_per_iteration=4", "trainer.samples_per_prompt=4",
        "strategy=recent", "strategy.current_updates=2", "strategy.window=2", "budget.max_updates=4",
        "trainer.kl_coef=0.01", "eval=none", *FAST]


def hand_qwen3(c) -> int:
    """Non-embedding parameters of a Qwen3 decoder, counted from its config: q/k/v/o projections,
    q/k norms, the gated MLP and two RMSNorms per layer, plus the final norm."""
    h, q, kv = c.hidden_size, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    per_layer = 2 * h * q + 2 * h * kv + 2 * c.head_dim + 3 * h * c.intermediate_size + 2 * h
    return c.num_hidden_layers * per_layer + h


@pytest.mark.parametrize("tied", [True, False])
def test_non_embedding_params_match_a_hand_count(tied):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    c = Qwen3Config(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=8, tie_word_embeddings=tied)
    model = Qwen3ForCausalLM(c)
    # per layer: q 32x16 + k, v 16x16 + o 16x32 + q/k norms 2x8 + MLP 3x24x16 + 2 norms of 16 = 2736
    assert non_embedding_params(model) == hand_qwen3(c) == 2 * 2736 + 16
    total = sum(p.numel() for p in model.parameters())
    assert total - non_embedding_params(model) == 50 * 16 * (1 if tied else 2)  # the head's copy goes when untied
    assert non_embedding_params(None) == 0


def test_ledger_state_round_trips_without_the_compute_model():
    ledger = Ledger(flops_generation=1.5e12, flops_training=3.0e12)
    ledger.compute = ComputeModel(policy=10, teacher=20)
    state = ledger.state_dict()
    assert "compute" not in state and state["flops_training"] == 3.0e12
    back = Ledger.from_state(state)
    assert back == ledger and back.compute is None and back.state_dict() == state
    old = {k: v for k, v in state.items() if not k.startswith("flops_")}  # a checkpoint from before the compute ledger
    assert Ledger.from_state(old).summary()["flops_total"] == 0.0


def test_ledger_counts_each_phase_at_its_rate_with_a_prefix_as_context():
    import torch

    from replaylab import types

    def sample(source, prompt_len, response_len, prefix_len=0):
        prompt = types.Prompt("u", "q", tuple(range(prompt_len)), "1")
        s = types.Sample(prompt, torch.zeros(response_len, dtype=torch.long), torch.zeros(response_len), 0, source, False, "id")
        if prefix_len:
            s.prefix = types.Prefix(torch.zeros(prefix_len, dtype=torch.long), "teacher", None, "origin")
        return s

    ledger = Ledger()
    ledger.compute = ComputeModel(policy=10, teacher=100, reference=10, passes=3)
    fresh, stored, continued = sample("fresh", 5, 7), sample("initial", 4, 2), sample("fresh", 5, 3, prefix_len=6)
    ledger.record_generated([fresh, stored, continued])
    assert ledger.flops_generation == 2 * 10 * (12 + 14) and ledger.flops_initial_generation == 2 * 10 * 6
    ledger.record_teacher(12, ledger.teacher_flops([fresh, continued]))
    assert ledger.teacher_tokens_scored == 12 and ledger.flops_teacher == 2 * 100 * (12 + 14)
    stored.proximal_logprobs = torch.zeros(2)
    ledger.record_trained([fresh, stored], 0)
    assert ledger.flops_training == 3 * (60 + 20) * (12 + 6) + 2 * 10 * 6
    ledger.record_forward([continued])
    assert ledger.flops_training == 3 * 80 * 18 + 2 * 10 * 6 + 2 * 10 * 14
    assert ledger.summary()["flops_total"] == ledger.flops_total == sum(
        getattr(ledger, k) for k in ("flops_generation", "flops_initial_generation", "flops_teacher", "flops_training"))
    bare = Ledger()  # without a compute model (a ledger built by hand): counts, no FLOPs
    bare.record_generated([fresh])
    assert bare.trajectories == 1 and bare.flops_total == 0


class Spy:
    """What the trainer handed the ledger, recorded raw (no code under test computes these)."""

    def __init__(self, monkeypatch):
        from replaylab.training.trainer import Trainer

        self.generated, self.trained, self.trainers = [], [], []
        real_gen, real_trained, real_init = Ledger.record_generated, Ledger.record_trained, Trainer.__init__

        def record_generated(ledger, samples):
            assert all(getattr(s, "prefix", None) is None for s in samples)
            self.generated += [(len(s.prompt.token_ids) + s.num_tokens, s.source) for s in samples]
            return real_gen(ledger, samples)

        def record_trained(ledger, samples, version):
            self.trained.append([(len(s.prompt.token_ids) + s.num_tokens, s.proximal_logprobs is not None,
                                  s.source != "fresh" or s.policy_version != version) for s in samples])
            return real_trained(ledger, samples, version)

        def init(trainer, *args, **kwargs):
            real_init(trainer, *args, **kwargs)
            self.trainers.append(trainer)

        monkeypatch.setattr(Ledger, "record_generated", record_generated)
        monkeypatch.setattr(Ledger, "record_trained", record_trained)
        monkeypatch.setattr(Trainer, "__init__", init)


def final_ledger(path) -> dict:
    rows = [r for r in load_rows(path) if r["split"] == "train"]
    return {k[len("ledger_"):]: v for k, v in rows[-1].items() if k.startswith("ledger_")}


@pytest.fixture(scope="module")
def opd_run(tmp_path_factory):
    """One OPD run (with the spy), shared by the hand computation and the max_compute test."""
    from replaylab.cli.train import train
    from replaylab.training.runs import run_dir

    cfg = compose(MICRO_WORLD + FAST_RUN + [f"output_root={tmp_path_factory.mktemp('runs')}", *OPD, "experiment=full"])
    with pytest.MonkeyPatch.context() as mp:
        spy = Spy(mp)
        summary = train(cfg)
    return summary, run_dir(cfg), spy


def test_opd_run_flops_equal_a_hand_computation(opd_run):
    summary, path, spy = opd_run
    (trainer,) = spy.trainers
    n, n_teacher = hand_qwen3(trainer.c.policy.config), hand_qwen3(trainer.c.teacher.model.config)
    ledger = final_ledger(path)
    assert summary["updates"] == 6 and summary["iterations"] == 3 and ledger["reused_passes"] == 3

    assert {src for _, src in spy.generated} == {"initial"}  # strategy=initial: only the frozen copy samples
    sequences = sum(tokens for tokens, _ in spy.generated)  # prompt + response tokens of every rollout
    assert ledger["flops_generation"] == 0
    assert ledger["flops_initial_generation"] == 2 * n * sequences
    # every rollout is scored by the teacher once, over its prompt and response
    assert ledger["teacher_tokens_scored"] == ledger["tokens_generated"]
    assert ledger["flops_teacher"] == 2 * n_teacher * sequences
    # 3 iterations x 2 passes of forward+backward, and one proximal forward per (stale) sample
    assert len(spy.trained) == 3 and all(prox and stale for batch in spy.trained for _, prox, stale in batch)
    trained = sum(tokens for batch in spy.trained for tokens, _, _ in batch)
    assert ledger["samples_trained"] == sum(map(len, spy.trained))
    assert ledger["flops_training"] == 2 * 6 * n * trained + 2 * n * trained
    total = ledger["flops_initial_generation"] + ledger["flops_teacher"] + ledger["flops_training"]
    assert ledger["flops_total"] == summary["flops_total"] == total
    # the count can fail: with the embeddings in N, or one pass, the number differs
    with_embeddings = sum(p.numel() for p in trainer.c.policy.parameters())
    assert with_embeddings != n and ledger["flops_initial_generation"] != 2 * with_embeddings * sequences
    assert ledger["flops_training"] != 6 * n * trained + 2 * n * trained


def test_grpo_run_flops_equal_a_hand_computation(run_train, monkeypatch):
    spy = Spy(monkeypatch)
    summary, path = run_train(GRPO)
    (trainer,) = spy.trainers
    n = hand_qwen3(trainer.c.policy.config)
    ledger = final_ledger(path)
    assert summary["updates"] == 4 and trainer.c.ref_model is not None

    assert {src for _, src in spy.generated} == {"fresh"}
    assert ledger["flops_generation"] == 2 * n * sum(tokens for tokens, _ in spy.generated)
    assert ledger["flops_initial_generation"] == ledger["flops_teacher"] == ledger["teacher_tokens_scored"] == 0
    # the replay phase trains on stored rollouts: exactly those get a proximal forward
    assert any(stale for batch in spy.trained for _, _, stale in batch)
    assert all(prox == stale for batch in spy.trained for _, prox, stale in batch)
    hand = sum((6 * n + 2 * n) * tokens + (2 * n * tokens if stale else 0)  # policy fwd+bwd, reference fwd, proximal
               for batch in spy.trained for tokens, _, stale in batch)
    assert ledger["flops_training"] == hand
    assert ledger["flops_total"] == ledger["flops_generation"] + hand == summary["flops_total"]
    assert ledger["flops_training"] != sum(6 * n * t for batch in spy.trained for t, _, _ in batch)  # reference counted


def test_max_compute_stops_at_the_first_iteration_boundary_past_it(opd_run, run_train, capsys):
    import re

    from replaylab.cli.main import main

    full = opd_run[1]  # the same run without a compute budget
    per_iteration = [r["ledger_flops_total"] for r in load_rows(full) if r["split"] == "train" and r["metric"] == "loss"]
    assert len(per_iteration) == 3 and per_iteration[0] < per_iteration[1] < per_iteration[2]
    budget = (per_iteration[0] + per_iteration[1]) / 2  # passed during the second iteration
    summary, path = run_train([*OPD, f"budget.max_compute={budget:.6e}", "budget.name=compute1", "experiment=matched"])
    train = [r for r in load_rows(path) if r["split"] == "train" and r["metric"] == "loss"]
    assert [r["update"] for r in train] == [2, 4] and summary["updates"] == 4
    assert train[0]["ledger_flops_total"] < budget <= summary["flops_total"] == per_iteration[1]
    # the table of the matched sweep shows the compute each row spent
    assert main(["table", str(path.parent), "--format", "markdown", "--out", str(path.parent / "tables")]) == 0
    out = capsys.readouterr().out
    assert "compute (FLOPs)" in out
    # the cell is formatted like 1.2e+15 (Markdown's number parsing writes 1.0e+09 as 1e+09)
    (shown,) = re.findall(r"\|\s*(\d(?:\.\d)?e\+\d+)\s*\|", out)
    assert float(shown) == float(f"{summary['flops_total']:.1e}")


def test_a_run_capped_by_its_updates_before_its_compute_budget_is_named_in_the_table(opd_run, run_train, capsys, caplog):
    """A compute-matched sweep whose update cap binds first for some runs is not matched on compute: the
    done marker says which budget ended each run, the trainer warns, and the table says so."""
    import json
    import logging

    from replaylab.cli.main import main

    full = opd_run[1]
    assert json.loads((full / "done.json").read_text())["ended_by"] == "max_updates"  # no other budget set
    per_iteration = [r["ledger_flops_total"] for r in load_rows(full) if r["split"] == "train" and r["metric"] == "loss"]
    common = [*OPD, "budget.name=compute1", "experiment=mixed"]
    _, matched = run_train([*common, f"budget.max_compute={(per_iteration[0] + per_iteration[1]) / 2:.6e}"])
    assert json.loads((matched / "done.json").read_text())["ended_by"] == "max_compute"
    assert main(["table", str(matched.parent), "--format", "markdown"]) == 0
    assert "different budgets" not in capsys.readouterr().out  # one run, one budget: nothing to say
    with caplog.at_level(logging.WARNING, logger="replaylab.training.trainer"):
        summary, capped = run_train([*common, f"budget.max_compute={10 * per_iteration[2]:.6e}", "order=1"])
    assert summary["updates"] == 6 and summary["ended_by"] == "max_updates (before max_compute)"
    assert "not matched on that budget" in caplog.text and "budget.max_updates=6" in caplog.text
    assert main(["table", str(matched.parent), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "Runs ended on different budgets" in out
    assert "1 run at max_compute" in out and "1 run at max_updates (before max_compute)" in out


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_max_compute_must_be_a_finite_non_negative_number(value):
    with pytest.raises(ConfigError, match="budget.max_compute"):
        to_object(compose([f"budget.max_compute={value}"]))
    assert to_object(compose(["budget.max_compute=1e15"])).budget.max_compute == 1e15


def test_accuracy_vs_compute_plot_reads_the_eval_rows_ledger():
    import pandas as pd

    from replaylab.results import plots

    rows = [{"run": f"r{o}", "split": "eval", "metric": "avg@k", "benchmark": "tiny8/mean", "budget": "b", "strategy": "s",
             "update": u, "value": 0.1 * u + 0.01 * o, "ledger_flops_total": 1e12 * u * (1 + o)}
            for o in (0, 1) for u in (0, 1, 2)]
    fig = plots.accuracy_vs_compute(pd.DataFrame(rows), "t")
    (ax,) = fig.axes
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == [1.5e12, 3e12]  # update 0 (no compute) left out
    assert ax.get_xscale() == "linear"  # within one decade: a log axis would label a single tick
    assert list(line.get_ydata()) == pytest.approx([10.5, 20.5])  # percent, mean over the two orders
    plots.plt.close(fig)
    wide = [dict(r, update=r["update"] * 10, ledger_flops_total=r["ledger_flops_total"] * 10 ** r["update"]) for r in rows]
    fig = plots.accuracy_vs_compute(pd.DataFrame(wide), "t")
    assert fig.axes[0].get_xscale() == "log"  # across decades
    plots.plt.close(fig)
    assert plots.accuracy_vs_compute(pd.DataFrame(rows).drop(columns="ledger_flops_total"), "t") is None


def test_plan_shows_a_compute_matched_cell_by_its_flops_not_its_update_cap(tmp_path, capsys):
    """A cell matched on compute ends on its FLOPs; `replaylab.plan` shows its update budget as the cap it is."""
    from replaylab.cli.plan import main

    assert main(["+sweep=tiny_fifo", "order=0", f"output_root={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "<= 800 (9e+12 FLOPs)" in out
    assert main(["+sweep=tiny_grpo_replay", "order=0", f"output_root={tmp_path}"]) == 0
    assert "FLOPs" not in capsys.readouterr().out.split("cells,")[0]
