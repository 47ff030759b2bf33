"""Cross-field config checks: pairs that cannot run and settings that would silently do nothing.

Each config dataclass checks its own fields; what needs two groups at once is checked here, on the
whole `Config`, before any model loads or any run directory exists. A setting that has no effect
under the chosen objective or strategy is an error naming the key (a researcher who sets it
believes it acts), unless it still has its schema default, which is how "not set" reads after
composition. Strategies add their own cross-checks through `ReplayStrategy.check_config`.
"""

from __future__ import annotations

import math
import re

from replaylab.config_fields import check, check_choice, defaults_of
from replaylab.evaluation.benchmarks import SUITES as BENCHMARK_SUITES
from replaylab.evaluation.benchmarks import benchmark_names
from replaylab.objectives import (
    OBJECTIVES,  # the package import registers every objective
)
from replaylab.replay import STRATEGIES  # the package import registers every strategy
from replaylab.tasks.tiny8 import SUITES as TINY_SUITES

# Trainer fields that only some objectives read (each objective declares which in `Objective.reads`).
OBJECTIVE_SPECIFIC = ("clip_low", "clip_high", "dual_clip", "kl_coef", "advantage", "advantage_std", "is_cap", "opd_coef",
                      "overlong_cache", "overlong_factor", "mask_truncated", "dynamic_sampling", "dynamic_sampling_max_rounds")
# Trainer fields that act only together with another setting: (field, whether it acts, why not).
NEEDS_PARTNER = (
    ("overlong_factor", lambda t: t.overlong_cache > 0, "with trainer.overlong_cache=0 (shaping off): set overlong_cache too"),
    ("dynamic_sampling_max_rounds", lambda t: t.dynamic_sampling, "with trainer.dynamic_sampling=false"),
    ("advantage_std", lambda t: t.advantage == "zscore",
     "with trainer.advantage other than zscore (no division by the standard deviation)"),
    ("keep_checkpoints", lambda t: t.checkpoint_every > 0,
     "with trainer.checkpoint_every=0 (a run writes one checkpoint, at its end)"),
)
# Decoding fields that only act when sampling (temperature > 0).
SAMPLING_EVAL_FIELDS = ("top_p", "top_k", "samples")
# Evaluation fields that only the benchmark evaluation reads (none runs with eval.suite=none and no eval.benchmarks;
# the probe set draws with the trainer's own sampling).
BENCHMARK_EVAL_FIELDS = ("data_root", "max_new_tokens", "temperature", "top_p", "top_k", "samples", "sampled_k",
                         "sampled_temperature", "max_problems", "instruction", "enable_thinking")
# Training sets generated in-process (tasks/datasets.py's TINY_DATA), not read from the data root.
GENERATED_DATA = ("tiny_arith", "tiny_long")
# Rollout fields that only one engine reads: (field, that engine).
ENGINE_SPECIFIC = (("compile", "fast"), ("gpu_memory_utilization", "vllm"), ("tensor_parallel_size", "vllm"),
                   ("enforce_eager", "vllm"))


def check_objective(cfg) -> None:
    t = cfg.trainer
    check_choice(t.objective, "trainer.objective", sorted(OBJECTIVES))
    objective = OBJECTIVES[t.objective]
    check(t.kind == objective.family, "trainer.kind",
          f"{t.kind!r} does not match trainer.objective={t.objective!r} (objective family {objective.family!r}); "
          "trainer.kind follows the objective: leave it unset")
    check(t.aggregation in objective.aggregations, "trainer.aggregation",
          f"{t.aggregation!r} is not an aggregation of {t.objective}; allowed: {list(objective.aggregations)} (dr_grpo's "
          "constant normaliser is a GRPO-family choice; OPD averages over tokens (dapo) or over sequences (grpo))")
    default = defaults_of(t)
    for key in OBJECTIVE_SPECIFIC:
        value = getattr(t, key)
        if key not in objective.reads:
            readers = [name for name, cls in sorted(OBJECTIVES.items()) if key in cls.reads]
            check(value == default[key], f"trainer.{key}",
                  f"{value!r} has no effect under trainer.objective={t.objective}; leave it at {default[key]!r} "
                  f"(it acts under: {', '.join(readers) or 'no registered objective'})")


def check_partners(cfg) -> None:
    t = cfg.trainer
    default = defaults_of(t)
    for key, acts, why in NEEDS_PARTNER:
        value = getattr(t, key)
        check(acts(t) or value == default[key], f"trainer.{key}", f"{value!r} has no effect {why}")


LOCAL_MODEL = ("tiny://", "pkg://", "/", "./", "../", "~")  # names transformers loads from disk, where no revision acts


def check_revisions(cfg) -> None:
    for group in ("model", "teacher"):
        m = getattr(cfg, group)
        check(m.revision is None or not m.name_or_path.startswith(LOCAL_MODEL), f"{group}.revision",
              f"{m.revision!r} has no effect on {m.name_or_path!r}, read from disk (a revision pins a hub download)")


def check_teacher(cfg) -> None:
    objective, teacher = OBJECTIVES[cfg.trainer.objective], cfg.teacher
    if teacher.kind == "none":  # no teacher is built: a field set beside it would be read by nothing
        default = defaults_of(teacher)
        for key, value in vars(teacher).items():
            check(key == "kind" or value == default[key], f"teacher.{key}",
                  f"{value!r} has no effect with teacher.kind=none (teacher=none): no teacher is built")
    if not objective.needs_teacher:
        # the default teacher goes unused quietly; one chosen or tuned for this run would mislead
        if teacher.kind != "none":
            default = defaults_of(teacher)
            for key, value in vars(teacher).items():
                check(value == default[key], f"teacher.{key}", f"{value!r} has no effect: trainer.objective="
                      f"{cfg.trainer.objective} trains on rewards, not on a teacher (teacher=none)")
        return
    check(teacher.kind != "none", "teacher", f"trainer.objective={cfg.trainer.objective} needs a teacher "
          "(teacher=tiny_teacher or another), not teacher.kind=none")
    check(not (teacher.kind == "server" and objective.needs_full_teacher), "teacher.kind",
          f"server teachers return only the sampled tokens' log-probs, but trainer.objective={cfg.trainer.objective} "
          "needs full distributions: use trainer=opd_sampled with teacher.kind=server, or a local teacher")


def check_strategy(cfg, strategy_cls) -> None:
    label = cfg.strategy.label
    check(not label or (re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]*", label) is not None), "strategy.label",
          f"must be a plain name (letters, digits, _ . -), got {label!r}: it names run directories and wandb groups")
    t = cfg.trainer
    default = defaults_of(t)
    if not strategy_cls.reads_gradients:
        for key in ("sketch_dim",) if t.stat_groups_for_all else ("stat_groups", "sketch_dim"):
            check(getattr(t, key) == default[key], f"trainer.{key}",
                  f"{getattr(t, key)!r} has no effect: strategy {cfg.strategy.name!r} reads no gradient statistics")
    check(not t.stat_groups_for_all or t.stat_groups > 1, "trainer.stat_groups_for_all",
          "has no effect with trainer.stat_groups=1: every update is one backward pass anyway")
    if not strategy_cls.replays:
        check(t.is_cap is None, "trainer.is_cap",
              f"{t.is_cap!r} has no effect: strategy {cfg.strategy.name!r} never trains on replayed samples")
    elif not strategy_cls.takes_trainer_cap:
        check(t.is_cap is None, "trainer.is_cap",
              f"{t.is_cap!r} has no effect: strategy {cfg.strategy.name!r} sets its replayed samples' weight "
              "treatment itself (its own cap or none; see its module)")
    if getattr(cfg.strategy, "ratio_base", "proximal") == "behaviour":  # fifo, fopd
        check(OBJECTIVES[cfg.trainer.objective].needs_proximal, "strategy.ratio_base",
              f"'behaviour' has no effect: trainer.objective={cfg.trainer.objective} takes no ratio")
        check(cfg.trainer.is_cap is None, "trainer.is_cap",
              "has no effect with strategy.ratio_base=behaviour: its weight min(pi_prox / mu, cap) needs the proximal "
              "log-probs that the behaviour anchor does not compute")
    strategy_cls.check_config(cfg)


def check_sibling_work(cfg) -> None:
    """A distributed run neither branches from a sibling's checkpoint nor shares its work (each rank would read and
    write): an explicit `branch=true` / `share=true` there would do nothing."""
    for key in ("branch", "share"):
        check(not (getattr(cfg, key) and cfg.trainer.distributed != "none"), key,
              f"true has no effect under trainer.distributed={cfg.trainer.distributed} (a distributed run trains and "
              "evaluates everything itself); leave it unset")


def check_rollout(cfg) -> None:
    r = cfg.rollout
    check(math.isfinite(r.temperature), "rollout.temperature", f"must be finite, got {r.temperature}")
    check(r.engine != "fast" or cfg.model.dtype == "float32", "rollout.engine",
          f"fast decodes float32 models only, and model.dtype={cfg.model.dtype}: in lower precision its behaviour "
          "log-probs drift from the trainer's recomputation (models/lean.float32_reason); use rollout=hf or rollout=vllm, "
          "or model.dtype=float32")
    default = defaults_of(r)
    for key, engine in ENGINE_SPECIFIC:
        value = getattr(r, key)
        check(r.engine == engine or value == default[key], f"rollout.{key}",
              f"{value!r} has no effect with rollout.engine={r.engine}: only rollout={engine} reads it")


def evaluated(e) -> list[str]:
    """What the benchmark evaluation runs (training/build.py's selection): eval.benchmarks, else the suite's
    name, else nothing (eval.suite=none)."""
    return list(e.benchmarks) or ([] if e.suite == "none" else [e.suite])


def check_data(cfg) -> None:
    """The generated training sets (tiny_arith, tiny_long) are drawn from data.seed and read no file; the
    jsonl sets are read from a data root and drawn from no seed."""
    d, e = cfg.data, cfg.eval
    default = defaults_of(d)
    reads_files = any(n.split("/")[0] not in TINY_SUITES for n in evaluated(e))  # tiny suites are generated
    check(reads_files or e.data_root == defaults_of(e)["data_root"], "eval.data_root",
          f"{e.data_root!r} has no effect: no benchmark of this run's evaluation is read from a file (tiny suites are "
          "generated)")
    if d.name not in GENERATED_DATA:
        check(d.seed == default["seed"], "data.seed", f"{d.seed} has no effect with data.name={d.name} (read from a file); "
              f"only the generated sets {list(GENERATED_DATA)} are drawn from a seed")
        return
    # the evaluation falls back to data.data_root for the benchmarks that are files (tiny suites are generated)
    read_by_eval = not e.data_root and reads_files
    check(read_by_eval or d.data_root == default["data_root"], "data.data_root",
          f"{d.data_root!r} has no effect: data.name={d.name} is generated, and no benchmark of this run's evaluation "
          "reads a file from it (tiny suites are generated; eval.data_root, when set, takes precedence)")


def check_evaluated(cfg) -> None:
    """Evaluation settings with nothing to act on: benchmark fields when no benchmark runs, evaluation times
    when an evaluation measures nothing (no benchmark, no probe set), the probe's seed without a probe. Settings
    that turn evaluations off (trainer.eval_every=0, eval.at_start=false) pass; so does the suite beside an
    explicit eval.benchmarks (the eval groups set it together with their decoding)."""
    e, default = cfg.eval, defaults_of(cfg.eval)
    check(e.probe_size > 0 or e.probe_seed == default["probe_seed"], "eval.probe_seed",
          f"{e.probe_seed!r} has no effect with eval.probe_size=0 (no probe set)")
    if evaluated(e):
        return
    for key in BENCHMARK_EVAL_FIELDS:
        value = getattr(e, key)
        check(value == default[key], f"eval.{key}", f"{value!r} has no effect with eval.suite=none and no eval.benchmarks "
              f"(no benchmark is evaluated): drop it, or reset it to {default[key]!r} where a world or sweep sets it (eval=none "
              "resets what an eval group set)")
    if e.probe_size:
        return  # every evaluation still measures the probe set
    nothing = "has no effect: with eval.suite=none and eval.probe_size=0 an evaluation measures nothing"
    every = cfg.trainer.eval_every
    check(every in (0, defaults_of(cfg.trainer)["eval_every"]), "trainer.eval_every", f"{every} {nothing}")
    check(e.tail == default["tail"], "eval.tail", f"{e.tail} {nothing}")


def check_eval(cfg) -> None:
    e = cfg.eval
    default = defaults_of(e)
    # what the evaluation would refuse only when it runs: after training, where eval.at_start=false runs none first
    check(e.suite == "none" or e.suite in BENCHMARK_SUITES, "eval.suite",
          f"unknown suite {e.suite!r}; allowed: {[*sorted(BENCHMARK_SUITES), 'none']}")
    for name in e.benchmarks:
        check_choice(name, "eval.benchmarks", benchmark_names())
    check(len(set(e.benchmarks)) == len(e.benchmarks), "eval.benchmarks", f"{list(e.benchmarks)} names a benchmark twice")
    check(e.max_problems >= 0, "eval.max_problems", f"must be >= 0 (0 = all), got {e.max_problems}")
    check(0 < e.top_p <= 1, "eval.top_p", f"must be in (0, 1], got {e.top_p}")
    check(e.top_k >= 0, "eval.top_k", f"must be >= 0 (0 = off), got {e.top_k}")
    for key in ("temperature", "sampled_temperature"):
        check(math.isfinite(getattr(e, key)), f"eval.{key}", f"must be finite, got {getattr(e, key)}")
    check(e.sampled_k > 0 or e.sampled_temperature == default["sampled_temperature"], "eval.sampled_temperature",
          f"{e.sampled_temperature!r} has no effect with eval.sampled_k=0 (no sampled evaluation): set eval.sampled_k > 0")
    if e.temperature > 0:
        return
    for key in SAMPLING_EVAL_FIELDS:
        value = getattr(e, key)
        check(value == default[key] or (key == "samples" and value == 1), f"eval.{key}",
              f"{value!r} has no effect with eval.temperature=0 (greedy decoding): set eval.temperature > 0 or drop it")


def check_eval_tail(cfg) -> None:
    """The tail evaluations are placed before budget.max_updates: the run must end there."""
    e, b = cfg.eval, cfg.budget
    check(e.tail >= 1, "eval.tail", f"must be >= 1, got {e.tail}")
    check(e.tail_every >= 0, "eval.tail_every", f"must be >= 0, got {e.tail_every}")
    check(e.tail == 1 or e.tail_every > 0, "eval.tail_every",
          f"eval.tail={e.tail} needs the updates between its evaluations: set eval.tail_every > 0")
    check(e.tail > 1 or e.tail_every == 0, "eval.tail_every",
          f"{e.tail_every} has no effect with eval.tail=1 (only the final evaluation): set eval.tail > 1 or drop it")
    if e.tail == 1:
        return
    # a compute budget, or a trajectory budget (refills, initial-policy stores and pools count too), may end it earlier
    check(not b.max_compute and not b.max_trajectories, "eval.tail",
          f"{e.tail} evaluations before budget.max_updates need the run to end there, but budget.max_compute / "
          "budget.max_trajectories may end it earlier: use eval.tail=1 with those budgets")
    check((e.tail - 1) * e.tail_every < b.max_updates, "eval.tail_every",
          f"{e.tail} evaluations {e.tail_every} updates apart start before update 0 of a {b.max_updates}-update run")
    step = cfg.trainer.updates_per_iteration
    check(e.tail_every % step == 0, "eval.tail_every",
          f"{e.tail_every} is not a multiple of the {step} updates per iteration: an evaluation can only follow an iteration")
    # tables average a run's last eval.tail evaluations: a periodic one inside the window would take a tail one's place
    every, end = cfg.trainer.eval_every, b.max_updates
    stray = [u for u in range(end - (e.tail - 1) * e.tail_every + 1, end)
             if every and u % every == 0 and (end - u) % e.tail_every]
    check(not stray, "eval.tail_every",
          f"trainer.eval_every={every} also evaluates at update(s) {stray}, between the tail's evaluations (every "
          f"{e.tail_every} up to {end}): the last {e.tail} evaluations would not be the tail's; make trainer.eval_every "
          "and budget.max_updates multiples of eval.tail_every")


def check_exact_updates(cfg) -> None:
    """Iterations take trainer.minibatches x trainer.resample_period updates each: a budget that is
    not a multiple would be overshot by the last iteration."""
    t, b = cfg.trainer, cfg.budget
    check(b.max_updates % t.updates_per_iteration == 0, "budget.max_updates",
          f"{b.max_updates} is not a multiple of the {t.updates_per_iteration} updates per iteration "
          f"(trainer.minibatches={t.minibatches} x trainer.resample_period={t.resample_period}); the last iteration "
          f"would overshoot it. Use {b.max_updates // t.updates_per_iteration * t.updates_per_iteration or t.updates_per_iteration} "
          f"or {(b.max_updates // t.updates_per_iteration + 1) * t.updates_per_iteration}")


def check_matched_budget(cfg) -> None:
    """With a trajectory budget, the batch shape must spend it exactly within the update budget:
    (max_trajectories / (prompts x samples)) iterations x (minibatches x resample_period) updates. With a
    compute budget, the learning rate must not depend on where the update budget lies."""
    t, b = cfg.trainer, cfg.budget
    # a cosine reaches 0 at max_updates; a compute budget ends each arm at its own update, at its own learning rate
    check(not b.max_compute or t.lr_schedule == "constant", "trainer.lr_schedule",
          f"{t.lr_schedule} decays over budget.max_updates={b.max_updates}, but budget.max_compute ends each run at "
          "its own update, so arms would stop at different learning rates: use lr_schedule=constant with a compute budget")
    if not b.max_trajectories:
        return
    per_iteration = t.prompts_per_iteration * t.samples_per_prompt
    iterations, rest = divmod(b.max_trajectories, per_iteration)
    check(rest == 0, "budget.max_trajectories",
          f"{b.max_trajectories} is not a multiple of trainer.prompts_per_iteration x trainer.samples_per_prompt = {per_iteration}")
    check(iterations * t.updates_per_iteration == b.max_updates, "budget.max_updates",
          f"{b.max_updates} updates do not match the trajectory budget: {b.max_trajectories} trajectories = {iterations} "
          f"iterations x {t.updates_per_iteration} updates each (trainer.minibatches x trainer.resample_period) = "
          f"{iterations * t.updates_per_iteration} updates")


def check_response_shaping(cfg) -> None:
    t, b = cfg.trainer, cfg.budget
    check(t.overlong_cache < b.max_response_tokens, "trainer.overlong_cache",
          f"{t.overlong_cache} must be below budget.max_response_tokens={b.max_response_tokens} (the penalty starts that "
          "many tokens before the limit)")


def check_run(cfg) -> None:
    """Every cross-group check of a run config (a `config.Config`); raises ConfigError naming the key."""
    check_matched_budget(cfg)
    check_exact_updates(cfg)
    check_response_shaping(cfg)
    check_objective(cfg)
    check_partners(cfg)
    check_teacher(cfg)
    check_revisions(cfg)
    check_choice(cfg.strategy.name, "strategy.name", sorted(STRATEGIES))
    check_strategy(cfg, STRATEGIES[cfg.strategy.name])
    check_rollout(cfg)
    check_sibling_work(cfg)
    check_data(cfg)
    check_evaluated(cfg)
    check_eval(cfg)
    check_eval_tail(cfg)


def check_training_run(cfg) -> None:
    """What a training run refuses beyond `check_run` (the config is shared with replaylab.evaluate, which
    reads these): called by the train CLI and by replaylab.plan, so a sweep's listing fails as its cells would."""
    check(cfg.eval.checkpoint is None, "eval.checkpoint", f"{cfg.eval.checkpoint!r} has no effect on a training run "
          "(only replaylab.evaluate loads it; a run starts from model.name_or_path and resumes from its own directory)")


# Keys only a training run reads, which no eval, model or budget group sets: replaylab.evaluate refuses them.
TRAINING_ONLY = {"": ("order",), "eval": ("tail", "tail_every", "probe_size", "probe_seed")}


def check_evaluation_run(cfg) -> None:
    """What replaylab.evaluate refuses before it loads a model: nothing to evaluate, or a training-only key
    set (it evaluates one policy once: no data order, tail, probe set or strategy)."""
    e = cfg.eval
    check(bool(evaluated(e)), "eval.suite", "nothing to evaluate (suite=none and no eval.benchmarks)")
    why = "has no effect on replaylab.evaluate (it evaluates one policy once; only a training run reads it)"
    for group, keys in TRAINING_ONLY.items():
        obj = getattr(cfg, group) if group else cfg
        default = defaults_of(obj)
        for key in keys:
            check(getattr(obj, key) == default[key], f"{group}.{key}".lstrip("."), f"{getattr(obj, key)!r} {why}")
    check(cfg.strategy.name == "current", "strategy", f"{cfg.strategy.name!r} {why}")
