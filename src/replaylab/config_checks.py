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
from replaylab.config_checks_eval import check_data, check_eval, check_eval_tail, check_evaluated, evaluated
from replaylab.objectives import (
    OBJECTIVES,  # the package import registers every objective
)
from replaylab.replay import STRATEGIES  # the package import registers every strategy

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


CLIP_FIELDS = ("clip_low", "clip_high", "dual_clip")


def check_clip(cfg) -> None:
    """The PPO clip binds only where a ratio can leave 1. With one update per iteration every ratio is to the
    policy that is updating (fresh samples: their behaviour log-probs, which the in-process engines compute as
    the trainer does; replayed ones: the iteration's proximal policy), so the clip and dual clip do nothing;
    they act with several updates per iteration (trainer.minibatches x resample_period), where behaviour
    log-probs come from other numerics than the trainer's (vLLM rollouts, or a policy below float32: cached bf16
    decoding drifts from the full forward), or under a strategy that anchors replayed samples' ratio at their
    stored behaviour log-probs (RePO; fifo/fopd with ratio_base=behaviour). Measured by the flag audit: with
    one update per iteration ratio_max <= 1.000016 and clip_frac 0, and the weights identical."""
    t = cfg.trainer
    if (t.updates_per_iteration > 1 or cfg.rollout.engine == "vllm" or cfg.model.dtype != "float32"
            or STRATEGIES[cfg.strategy.name].ratio_at_behaviour(cfg.strategy)):
        return
    default = defaults_of(t)
    for key in CLIP_FIELDS:
        value = getattr(t, key)
        check(key not in OBJECTIVES[t.objective].reads or value == default[key], f"trainer.{key}",
              f"{value!r} has no effect with one update per iteration (trainer.minibatches x resample_period = 1) "
              f"with a float32 policy on rollout.engine={cfg.rollout.engine}: every PPO ratio is 1 there, so the clip "
              "never binds; it acts with several updates per iteration, vLLM rollouts or a bf16/fp16 policy, or "
              "replay whose ratio is to stored behaviour log-probs (repo, ratio_base=behaviour)")


def check_partners(cfg) -> None:
    t = cfg.trainer
    default = defaults_of(t)
    for key, acts, why in NEEDS_PARTNER:
        value = getattr(t, key)
        check(acts(t) or value == default[key], f"trainer.{key}", f"{value!r} has no effect {why}")


DISK_PATH = ("/", "./", "../", "~")  # a model name that reads as a path on this machine
LOCAL_MODEL = ("tiny://", "pkg://", *DISK_PATH)  # names transformers loads from disk, where no revision acts


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
    write): an explicit `branch=true` / `share=true` there would do nothing; a single process has no collective
    to time out."""
    for key in ("branch", "share"):
        check(not (getattr(cfg, key) and cfg.trainer.distributed != "none"), key,
              f"true has no effect under trainer.distributed={cfg.trainer.distributed} (a distributed run trains and "
              "evaluates everything itself); leave it unset")
    default = defaults_of(cfg.trainer)["dist_timeout_s"]
    check(cfg.trainer.distributed != "none" or cfg.trainer.dist_timeout_s == default, "trainer.dist_timeout_s",
          f"{cfg.trainer.dist_timeout_s:g} has no effect under trainer.distributed=none (no collective to wait in)")


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
    check_clip(cfg)
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
