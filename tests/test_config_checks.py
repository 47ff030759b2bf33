"""Settings without effect and pairs that cannot run fail at config time, naming the key.

Each case was once accepted and then silently ignored (or failed only after the models loaded).
In-process through the config composition the CLI uses; the CLI itself is checked for exit code,
time and that no run directory appears.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import compose
from replaylab.config import ConfigError, to_object

SILENT_BEFORE = [
    # (overrides, key the error must name)
    # the empirical flag audit (every key perturbed in real runs; helper-27): each ran, identical to its base
    (["trainer=grpo", "teacher=none", "trainer.clip_high=0.28"], "trainer.clip_high"),  # one update: every ratio 1
    (["trainer=grpo", "teacher=none", "trainer.clip_low=0.1", "strategy=rlep"], "trainer.clip_low"),
    (["trainer=grpo", "teacher=none", "trainer.dual_clip=10", "strategy=prompt_replay"], "trainer.dual_clip"),
    (["trainer=opd_sampled", "strategy=initial", "trainer.clip_high=0.28"], "trainer.clip_high"),
    (["trainer=grpo", "teacher=none", "teacher.name_or_path=Qwen/Qwen3-8B"], "teacher.name_or_path"),
    (["trainer=grpo", "teacher=none", "teacher.dtype=bfloat16"], "teacher.dtype"),
    (["eval.data_root=/tmp"], "eval.data_root"),  # tiny suites are generated
    (["model.revision=abc"], "model.revision"), (["teacher.revision=abc"], "teacher.revision"),
    (["trainer=grpo", "teacher=none", "strategy=prompt_replay", "strategy.cooldown=2", "strategy.cooldown_jitter=0.0"],
     "strategy.cooldown_jitter"),
    # and one that passed the checks, then crashed mid-run: the fast engine samples reopd's pool from the teacher
    (["strategy=reopd", "teacher.dtype=bfloat16"], "teacher.dtype"),
    (["trainer.checkpoint_every=0", "trainer.keep_checkpoints=3"], "trainer.keep_checkpoints"),  # one checkpoint only
    (["strategy=ropd", "strategy.behaviour_weight_cap=2"], "strategy.behaviour_weight_cap"),  # opd_full_rkl
    (["trainer.is_cap=2", "strategy=initial"], "trainer.is_cap"),  # opd_full_rkl has no ratio
    (["trainer.aggregation=dr_grpo"], "trainer.aggregation"),  # was a token mean for OPD
    (["trainer=opd_sampled", "trainer.aggregation=dr_grpo"], "trainer.aggregation"),
    (["strategy=fixed_schedule"], "budget.max_updates"),  # 1000 updates = 40 current + 960 replay
    (["strategy=fixed_schedule", "budget.max_updates=60", "trainer.minibatches=4", "strategy.current_updates=42",
      "strategy.replay_updates=18"], "strategy.current_updates"),
    (["trainer.clip_high=0.28"], "trainer.clip_high"),
    (["trainer.clip_low=0.1"], "trainer.clip_low"),
    (["trainer.kl_coef=0.1"], "trainer.kl_coef"),
    (["trainer=opd_sampled", "trainer.dual_clip=10"], "trainer.dual_clip"),
    (["trainer.advantage=center"], "trainer.advantage"),
    (["trainer.opd_coef=2"], "trainer.opd_coef"),  # the exact KL has no advantage to scale
    (["trainer=grpo", "teacher=none", "trainer.opd_coef=2"], "trainer.opd_coef"),
    (["trainer=opd_sampled", "trainer.is_cap=2"], "trainer.is_cap"),  # current never replays
    (["trainer.stat_groups=8"], "trainer.stat_groups"),  # current reads no gradients
    (["trainer.stat_groups_for_all=true", "trainer.stat_groups=1"], "trainer.stat_groups_for_all"),  # one pass anyway
    (["trainer.sketch_dim=16"], "trainer.sketch_dim"),
    (["strategy=ropd", "trainer.sketch_dim=16"], "trainer.sketch_dim"),  # the norm reading ignores it
    (["strategy=ropd", "strategy.statistic=sketch"], "trainer.sketch_dim"),  # ... and the sketch needs it
    (["strategy=ropd", "strategy.burn_in=5"], "strategy.burn_in"),  # inside the 10-update warm-up
    (["strategy=ropd", "trainer.minibatches=4", "strategy.window=6"], "strategy.window"),
    (["strategy=recent", "trainer.minibatches=4", "strategy.current_updates=42"], "strategy.current_updates"),
    (["strategy=recent", "strategy.window=50"], "strategy.window"),  # longer than the current phase
    (["eval.samples=4"], "eval.samples"),  # tiny8 is greedy: forced to 1
    (["eval.top_p=0.9"], "eval.top_p"),
    (["eval.sampled_temperature=0.7"], "eval.sampled_temperature"),  # no sampled evaluation (sampled_k=0)
    (["eval.sampled_k=2", "eval.sampled_temperature=0"], "eval.sampled_temperature"),  # that is the greedy one
    (["trainer=grpo", "teacher=none", "strategy=ropd"], "strategy"),  # failed after the models loaded
    (["teacher=none"], "teacher"),
    (["trainer.kind=grpo", "trainer.samples_per_prompt=2"], "trainer.kind"),  # kind vs objective
    # the GRPO recipe features (issue 13): GRPO-only, and each needs its partner setting
    (["trainer.mask_truncated=true"], "trainer.mask_truncated"),  # OPD: no effect
    (["trainer.dynamic_sampling=true"], "trainer.dynamic_sampling"),
    (["trainer.overlong_cache=8"], "trainer.overlong_cache"),
    (["trainer=grpo", "teacher=none", "trainer.overlong_factor=0.5"], "trainer.overlong_factor"),  # shaping off
    (["trainer=grpo", "teacher=none", "trainer.overlong_cache=48"], "trainer.overlong_cache"),  # = the response limit
    (["trainer=grpo", "teacher=none", "trainer.dynamic_sampling_max_rounds=3"], "trainer.dynamic_sampling_max_rounds"),
    (["trainer=grpo", "teacher=none", "trainer.advantage=center", "trainer.advantage_std=sample"], "trainer.advantage_std"),
    (["trainer=grpo", "teacher=none", "trainer.warmup_fraction=0.1"], "trainer.warmup_updates"),  # grpo.yaml sets 20
    (["trainer=grpo", "teacher=none", "trainer.lr_schedule=linear"], "trainer.lr_schedule"),
    (["trainer=grpo", "teacher=none", "strategy=popo", "trainer.dynamic_sampling=true"], "trainer.dynamic_sampling"),
    (["trainer=grpo", "teacher=none", "strategy=repo", "strategy.loss_terms=both"], "strategy.loss_terms"),
    # the next wave of strategies (issue 16)
    (["trainer=grpo", "teacher=none", "strategy=hdl", "trainer.dynamic_sampling=true"], "trainer.dynamic_sampling"),
    (["trainer=grpo", "teacher=none", "strategy=hdl", "strategy.roots=8"], "strategy.roots"),  # no continuation slot
    (["trainer=grpo", "teacher=none", "strategy=hdl", "strategy.branches=7"], "strategy.branches"),
    (["trainer=grpo", "teacher=none", "strategy=prefixrl", "strategy.schedule=constant", "strategy.shrink=0.8"],
     "strategy.shrink"),
    (["trainer=grpo", "teacher=none", "strategy=prefixrl", "trainer.is_cap=2"], "trainer.is_cap"),  # never replays
    (["strategy=reopd", "teacher.kind=server", "teacher.server_url=http://x", "trainer=opd_sampled"], "strategy.pool"),
    (["trainer=grpo", "teacher=none", "strategy=reopd"], "strategy"),  # OPD only
    (["strategy=fifo", "strategy.generation_ratio=1.5"], "strategy.generation_ratio"),  # rollouts never trained
    (["strategy=fopd", "strategy.f_min=1.0"], "strategy.f_min"),
    (["trainer=grpo", "teacher=none", "strategy=depo", "strategy.threshold=0.3"], "strategy.threshold"),  # > max p(1-p)
    (["trainer=grpo", "teacher=none", "strategy=depo", "trainer.dynamic_sampling=true"], "trainer.dynamic_sampling"),
    (["trainer=grpo", "teacher=none", "strategy=depo", "strategy.replay_fraction=0.01"], "strategy.replay_fraction"),
    (["trainer=grpo", "teacher=none", "strategy=depo", "strategy.min_visits=1"], "strategy.min_visits"),  # none eligible
    # the tail evaluations (issue 14): each needs the other, and the run must end at budget.max_updates
    (["eval.tail=0"], "eval.tail"),
    (["eval.tail_every=5"], "eval.tail_every"),  # eval.tail=1: nothing to space
    (["eval.tail=3"], "eval.tail_every"),
    (["eval.tail=3", "eval.tail_every=500"], "eval.tail_every"),  # starts before update 0 of 1000
    (["eval.tail=3", "eval.tail_every=10", "budget.max_compute=1e12"], "eval.tail"),  # may end earlier
    (["eval.tail=3", "eval.tail_every=10", "budget.max_trajectories=64000"], "eval.tail"),  # refills count too
    (["eval.tail=3", "eval.tail_every=20", "trainer.eval_every=10", "budget.max_updates=100"], "eval.tail_every"),
    (["trainer=grpo", "teacher=none", "strategy=depo", "strategy.replay_fraction=0", "strategy.min_visits=4"],
     "strategy.min_visits"),
    (["trainer=grpo", "teacher=none", "strategy=prefixrl", "trainer.dynamic_sampling=true"], "trainer.dynamic_sampling"),
    (["strategy=fopd", "strategy.freshness=age", "strategy.alpha=2"], "strategy.f_min"),  # exp(-2) < 0.25: all cut
    (["strategy=fopd", "strategy.ratio_base=behaviour"], "strategy.ratio_base"),  # the exact KL takes no ratio
    (["trainer=grpo", "teacher=none", "strategy=fifo_behaviour", "trainer.is_cap=2"], "trainer.is_cap"),
    # strategies whose replayed rows carry their own treatment, or that never replay a trajectory
    (["trainer=grpo", "teacher=none", "strategy=repo", "trainer.is_cap=2"], "trainer.is_cap"),
    (["trainer=grpo", "teacher=none", "strategy=rlep", "trainer.is_cap=2"], "trainer.is_cap"),
    (["trainer=grpo", "teacher=none", "strategy=popo", "trainer.is_cap=2"], "trainer.is_cap"),
    (["trainer=grpo", "teacher=none", "strategy=prompt_replay", "trainer.is_cap=2"], "trainer.is_cap"),
    (["trainer=opd_sampled", "strategy=ropd", "strategy.behaviour_weight_cap=3", "trainer.is_cap=2"], "trainer.is_cap"),
    (["trainer=grpo", "teacher=qwen3_8b"], "teacher.name_or_path"),  # GRPO trains on rewards
    # RLEP and RePO settings beyond what a pool or a buffer can hold (they ran as current, or all alike)
    (["trainer=grpo", "teacher=none", "strategy=rlep", "trainer.samples_per_prompt=8", "strategy.min_successes=9"],
     "strategy.min_successes"),
    (["trainer=grpo", "teacher=none", "strategy=rlep", "strategy.pool_samples=16", "strategy.replays_per_group=50"],
     "strategy.replays_per_group"),
    (["trainer=grpo", "teacher=none", "strategy=rlep", "trainer.dynamic_sampling=true"], "trainer.dynamic_sampling"),
    (["trainer=grpo", "teacher=none", "strategy=repo", "strategy.num_replays=64"], "strategy.num_replays"),
    # a distributed run neither branches from a sibling nor shares its work
    (["trainer.distributed=ddp", "branch=true"], "branch"),
    (["trainer.distributed=fsdp2", "share=true"], "share"),
    # a single process has no collective to time out; a non-positive timeout is no timeout
    (["trainer.dist_timeout_s=7200"], "trainer.dist_timeout_s"),
    (["trainer.distributed=ddp", "trainer.dist_timeout_s=0"], "trainer.dist_timeout_s"),
    # a cosine to 0 at max_updates, and a compute budget that ends each arm at its own update
    (["budget.max_compute=1e12", "trainer.lr_schedule=cosine"], "trainer.lr_schedule"),
    (["trainer=grpo", "teacher.micro_batch=8"], "teacher.micro_batch"),
    (["trainer=grpo", "teacher=none", "strategy=repo", "strategy.selection=all", "strategy.num_replays=4"],
     "strategy.num_replays"),
    (["trainer=grpo", "teacher=none", "strategy=repo", "strategy.max_variance_exhaustive=100"],
     "strategy.max_variance_exhaustive"),
    # Prompt Replay's fraction: the code clamps it to 0.5; too small leaves no replay slot
    (["trainer=grpo", "teacher=none", "strategy=prompt_replay", "strategy.replay_fraction=0.9"], "strategy.replay_fraction"),
    (["trainer=grpo", "teacher=none", "strategy=prompt_replay", "strategy.replay_fraction=0.1",
      "trainer.prompts_per_iteration=8"], "strategy.replay_fraction"),
    (["rollout=hf", "rollout.compile=true"], "rollout.compile"),  # compiles rollout=fast's decoder only
    (["rollout.gpu_memory_utilization=0.8"], "rollout.gpu_memory_utilization"),  # vLLM's knobs under rollout=fast
    (["rollout=hf", "rollout.tensor_parallel_size=2"], "rollout.tensor_parallel_size"),
    (["rollout.enforce_eager=true"], "rollout.enforce_eager"),
    # evaluation settings with nothing to act on: no benchmark evaluated, or an evaluation that measures nothing
    (["eval.suite=none", "eval.max_problems=4"], "eval.max_problems"),
    (["eval=none", "eval.sampled_k=4"], "eval.sampled_k"),
    (["eval=none", "eval.instruction=Think."], "eval.instruction"),
    (["world=tinylong", "eval.suite=none"], "eval.max_new_tokens"),  # the world's eval group set it: use eval=none
    (["eval=none", "eval.probe_size=0", "trainer.eval_every=10"], "trainer.eval_every"),
    (["eval=none", "eval.probe_size=0", "eval.tail=3", "eval.tail_every=10"], "eval.tail"),
    (["eval.probe_size=0", "eval.probe_seed=3"], "eval.probe_seed"),
    (["trainer=grpo", "teacher=none", "strategy=prompt_replay", "strategy.cooldown=0", "strategy.cooldown_jitter=0.5"],
     "strategy.cooldown_jitter"),
    # the generated sets are drawn from a seed and read no file; the jsonl sets the other way round
    (["data=math_train", "data.seed=7"], "data.seed"),
    (["data.data_root=/data/math"], "data.data_root"),  # tiny_arith, evaluated on tiny8
    (["data.data_root=/data/math", "eval.benchmarks=[math500]", "eval.data_root=/other"], "data.data_root"),
]


@pytest.mark.parametrize("overrides,key", SILENT_BEFORE, ids=[" ".join(o) for o, _ in SILENT_BEFORE])
def test_setting_without_effect_is_a_config_error(overrides, key):
    with pytest.raises(ConfigError) as err:
        to_object(compose(overrides))
    assert str(err.value).startswith(key + ":"), str(err.value)


@pytest.mark.parametrize("overrides", [
    ["strategy=ropd"], ["strategy=ropd", "strategy.statistic=sketch", "trainer.sketch_dim=32"],
    # the clip acts with several updates per iteration, vLLM rollouts, or a ratio to stored behaviour log-probs
    ["trainer=opd_sampled", "strategy=ropd", "strategy.behaviour_weight_cap=2", "trainer.clip_high=0.28",
     "trainer.minibatches=2", "budget.max_updates=1000"],
    ["trainer=grpo", "teacher=none", "trainer.clip_high=0.28", "rollout=vllm"],
    ["trainer=grpo", "teacher=none", "trainer.clip_high=0.28", "rollout=hf", "model.dtype=bfloat16"],
    ["trainer=grpo", "teacher=none", "trainer.clip_high=0.28", "trainer.resample_period=2"],
    ["trainer=grpo", "teacher=none", "trainer.clip_high=0.28", "strategy=repo"],
    ["trainer=grpo", "teacher=none", "trainer.clip_high=0.28", "strategy=fifo_behaviour"],
    ["trainer=opd_sampled", "strategy=initial", "trainer.is_cap=2"],
    ["trainer=grpo", "teacher=none", "strategy=fifo", "trainer.is_cap=2"],  # its replays take the trainer's cap
    ["trainer=grpo", "teacher=none", "strategy=prompt_replay", "strategy.replay_fraction=0.25"],
    ["trainer=grpo", "teacher=none", "strategy=repo_max_variance", "strategy.max_variance_exhaustive=100"],
    ["strategy=fixed_schedule", "budget.max_updates=60"],
    ["strategy=recent", "trainer.minibatches=4", "budget.max_updates=60"],
    ["trainer=grpo", "teacher=none", "trainer.aggregation=dr_grpo", "trainer.kl_coef=0.01", "trainer.dual_clip=10",
     "trainer.minibatches=2"],
    ["eval.temperature=0.6", "eval.samples=4", "eval.top_p=0.95"],
    ["eval.sampled_k=4", "eval.sampled_temperature=0.7"],
    ["trainer.warmup_updates=20", "strategy=ropd"],  # burn-in follows the warm-up
    ["trainer.stat_groups_for_all=true", "trainer.stat_groups=8"],  # current now splits its update too
    ["trainer.stat_groups_for_all=true", "strategy=ropd"],  # a sweep-wide setting: ropd splits anyway
    ["rollout.compile=true"], ["rollout=vllm", "rollout.gpu_memory_utilization=0.8", "rollout.enforce_eager=true"],
    ["eval.suite=none"], ["world=tinylong", "eval=none"], ["eval=math8", "eval=none"],
    ["eval=none", "trainer.eval_every=10", "eval.tail=3", "eval.tail_every=10", "eval.probe_seed=3"],  # the probe is measured
    ["eval=none", "eval.probe_size=0", "trainer.eval_every=0"],
    ["eval.benchmarks=[tiny8/add2]", "eval.max_problems=4"],
    # docs/scale_out.md's server teacher: its group's dtype describes the served model (not refused, though unread)
    ["pairing=qwen3_0.6b-qwen3_8b", "rollout=hf", "trainer=opd_sampled", "teacher.kind=server", "teacher.server_url=http://x"],
    ["trainer=grpo", "teacher=none", "strategy=prompt_replay", "strategy.cooldown=0"],
    ["trainer=grpo", "teacher=none", "strategy=prompt_replay", "strategy.cooldown=3", "strategy.cooldown_jitter=0.5"],
    ["data=math_train", "data.data_root=/data/math"], ["data.seed=7"],
    ["data.data_root=/data/math", "eval.benchmarks=[math500]"],  # the evaluation reads math500 from it
    ["data.data_root=/data/math", "eval.benchmarks=[math500]", "eval.data_root=''"],  # '' is unset: it still does
])
def test_settings_with_effect_pass(overrides):
    to_object(compose(overrides))


def test_ropd_burn_in_follows_the_warm_up():
    assert to_object(compose(["strategy=ropd", "trainer.warmup_updates=20"])).strategy.burn_in == 20


def test_cli_refuses_in_seconds_without_a_run_directory(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "replaylab.train", "strategy=ropd", "strategy.behaviour_weight_cap=2",
         f"output_root={tmp_path}", "wandb.enabled=false"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "strategy.behaviour_weight_cap" in proc.stderr
    assert not any(p.name != "hydra" for p in tmp_path.iterdir())  # no run directory, no model loaded


def test_train_refuses_an_evaluation_checkpoint(run_train, tmp_path):
    """eval.checkpoint is read by replaylab.evaluate only: a training run given one would silently start from
    model.name_or_path instead. The refusal comes through the real train call, before any run directory."""
    with pytest.raises(ConfigError) as err:
        run_train([f"eval.checkpoint={tmp_path}"], output_root=tmp_path / "runs")
    assert str(err.value).startswith("eval.checkpoint:"), str(err.value)
    assert not (tmp_path / "runs").exists()
    from replaylab.cli.plan import plan  # a sweep's listing refuses the cells train would refuse
    with pytest.raises(ConfigError, match="eval.checkpoint:"):
        plan(["+sweep=tiny_repo", "order=0", f"eval.checkpoint={tmp_path}", f"output_root={tmp_path / 'runs'}"])


def test_attention_backend_refused_where_no_transformers_attention_runs(run_train):
    """model.attn_implementation picks transformers' attention; the lean forward and rollout=fast's decoder
    run their own, so with both the setting did nothing. Through the real build: refused once the policy
    took the lean forward, accepted (and trained) when the module forward runs."""
    with pytest.raises(ConfigError) as err:
        run_train(["model.attn_implementation=eager", "budget.max_updates=1"])
    assert str(err.value).startswith("model.attn_implementation:"), str(err.value)
    summary, _ = run_train(["model.attn_implementation=eager", "trainer.forward=module", "budget.max_updates=1"])
    assert summary["update"] == 1


def test_config_help_documents_every_key_top_level_ones_included(capsys):
    """`replaylab config-help` lists every field with its help; a top-level key (order, experiment, ...) asked
    for by name printed nothing and exited 0 before."""
    from dataclasses import fields

    from replaylab.cli.main import main
    from replaylab.config import Config

    assert main(["config-help", "order"]) == 0
    assert capsys.readouterr().out.strip().startswith("order: data order")
    assert main(["config-help"]) == 0
    out = capsys.readouterr().out
    for f in fields(Config):
        assert f"  {f.name}" in out or f"[{f.name}" in out, f.name
    assert main(["config-help", "nosuch"]) == 2


@pytest.mark.parametrize("overrides,key", [(["order=3"], "order"), (["eval.tail=3", "eval.tail_every=10"], "eval.tail"),
                                           (["eval=none"], "eval.suite"), (["strategy=ropd"], "strategy")])
def test_evaluate_refuses_training_only_keys_before_loading_a_model(tmp_path, overrides, key):
    """replaylab.evaluate evaluates one policy once: a data order, tail, probe setting or strategy did nothing
    there (and suite=none was refused only after the model loaded). Exit 2 naming the key, nothing written."""
    proc = subprocess.run([sys.executable, "-m", "replaylab.evaluate", *overrides, f"output_root={tmp_path}",
                           "wandb.enabled=false"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"invalid config: {key}:" in proc.stderr
    assert not any(p.name != "hydra" for p in tmp_path.iterdir())


@pytest.mark.parametrize("overrides,key", [
    (["eval.max_problems=-1"], "eval.max_problems"), (["eval.top_k=-3", "eval.temperature=1"], "eval.top_k"),
    (["eval.top_p=1.5", "eval.temperature=1"], "eval.top_p"), (["eval.benchmarks=[foo]"], "eval.benchmarks"),
    (["eval.suite=foo"], "eval.suite"), (["eval.benchmarks=[aime2024,aime2024]"], "eval.benchmarks"),
    (["rollout.temperature=inf"], "rollout.temperature"), (["eval.temperature=inf"], "eval.temperature"),
    (["eval.sampled_temperature=inf", "eval.sampled_k=2"], "eval.sampled_temperature"),
])
def test_evaluation_settings_the_evaluation_would_refuse_are_refused_at_composition(overrides, key):
    """Each of these ran: the evaluation raised a traceback when it first ran, which with eval.at_start=false is
    after the whole training budget (no checkpoint or done marker kept), and the infinite temperatures trained to
    the end (bad-input audit, F8 and F10)."""
    with pytest.raises(ConfigError) as err:
        to_object(compose(overrides))
    assert str(err.value).startswith(key + ":"), str(err.value)


def test_distributed_training_in_one_process_is_a_config_error_naming_the_key(run_train):
    """It raised a ValueError (exit 1, a traceback) once the run directory existed (flag audit)."""
    with pytest.raises(ConfigError, match=r"^trainer.distributed: ddp needs several processes"):
        run_train(["trainer.distributed=ddp", "eval=none"])
