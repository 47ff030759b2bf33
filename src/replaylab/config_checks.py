"""Cross-field config checks: pairs that cannot run and settings that would silently do nothing.

Each config dataclass checks its own fields; what needs two groups at once is checked here, on the
whole `Config`, before any model loads or any run directory exists. A setting that has no effect
under the chosen objective or strategy is an error naming the key (a researcher who sets it
believes it acts), unless it still has its schema default, which is how "not set" reads after
composition. Strategies add their own cross-checks through `ReplayStrategy.check_config`.
"""

from __future__ import annotations

from dataclasses import MISSING, fields

from replaylab.config_fields import check, check_choice
from replaylab.replay import STRATEGIES  # the package import registers every strategy

# The objective family each objective belongs to (it decides what scores a sample: teacher or grader).
OBJECTIVE_KIND = {"opd_full_rkl": "opd", "opd_sampled": "opd", "grpo": "grpo"}
# Trainer fields only some objectives read; every other objective ignores them.
OBJECTIVE_FIELDS = {
    "opd_full_rkl": set(),  # exact KL: no ratio, no clip, no advantage
    "opd_sampled": {"clip_low", "clip_high", "opd_coef", "is_cap"},
    "grpo": {"clip_low", "clip_high", "dual_clip", "kl_coef", "advantage", "is_cap"},
}
OBJECTIVE_SPECIFIC = set().union(*OBJECTIVE_FIELDS.values())
# Loss aggregations each family implements (dr_grpo's constant normaliser is a GRPO-family choice).
AGGREGATIONS = {"opd": ["dapo", "grpo"], "grpo": ["dapo", "grpo", "dr_grpo"]}
# Decoding fields that only act when sampling (temperature > 0).
SAMPLING_EVAL_FIELDS = ("top_p", "top_k", "samples")


def defaults_of(obj) -> dict:
    return {f.name: f.default for f in fields(obj) if f.default is not MISSING}


def check_objective(cfg) -> None:
    t = cfg.trainer
    check_choice(t.objective, "trainer.objective", sorted(OBJECTIVE_KIND))
    kind = OBJECTIVE_KIND[t.objective]
    check(t.kind == kind, "trainer.kind", f"{t.kind!r} does not match trainer.objective={t.objective!r} (objective family {kind!r})")
    check(t.aggregation in AGGREGATIONS[kind], "trainer.aggregation",
          f"{t.aggregation!r} is not a {kind} aggregation; allowed: {AGGREGATIONS[kind]} (dr_grpo's constant "
          "normaliser is a GRPO-family choice; OPD averages over tokens (dapo) or over sequences (grpo))")
    default = defaults_of(t)
    for key in sorted(OBJECTIVE_SPECIFIC - OBJECTIVE_FIELDS[t.objective]):
        value = getattr(t, key)
        check(value == default[key], f"trainer.{key}",
              f"{value!r} has no effect under trainer.objective={t.objective}; leave it at {default[key]!r} "
              f"(it acts under: {', '.join(o for o, f in OBJECTIVE_FIELDS.items() if key in f)})")


def check_teacher(cfg) -> None:
    t, teacher = cfg.trainer, cfg.teacher
    if t.kind != "opd":
        return
    check(teacher.kind != "none", "teacher", "trainer.kind=opd needs a teacher (teacher=tiny_teacher or another), "
          "not teacher.kind=none")
    check(not (teacher.kind == "server" and t.objective == "opd_full_rkl"), "teacher.kind",
          "server teachers return only the sampled tokens' log-probs, but trainer.objective=opd_full_rkl needs full "
          "distributions: use trainer=opd_sampled with teacher.kind=server, or a local teacher")


def check_strategy(cfg, strategy_cls) -> None:
    t = cfg.trainer
    default = defaults_of(t)
    if not strategy_cls.reads_gradients:
        for key in ("stat_groups", "sketch_dim"):
            check(getattr(t, key) == default[key], f"trainer.{key}",
                  f"{getattr(t, key)!r} has no effect: strategy {cfg.strategy.name!r} reads no gradient statistics")
    if not strategy_cls.replays:
        check(t.is_cap is None, "trainer.is_cap",
              f"{t.is_cap!r} has no effect: strategy {cfg.strategy.name!r} never trains on replayed samples")
    strategy_cls.check_config(cfg)


def check_eval(cfg) -> None:
    e = cfg.eval
    if e.temperature > 0:
        return
    default = defaults_of(e)
    for key in SAMPLING_EVAL_FIELDS:
        value = getattr(e, key)
        check(value == default[key] or (key == "samples" and value == 1), f"eval.{key}",
              f"{value!r} has no effect with eval.temperature=0 (greedy decoding): set eval.temperature > 0 or drop it")


def check_run(cfg) -> None:
    """Every cross-group check of a run config (a `config.Config`); raises ConfigError naming the key."""
    check_objective(cfg)
    check_teacher(cfg)
    check_choice(cfg.strategy.name, "strategy.name", sorted(STRATEGIES))
    check_strategy(cfg, STRATEGIES[cfg.strategy.name])
    check_eval(cfg)
