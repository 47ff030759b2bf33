"""Cross-group checks of the data and evaluation settings (split from config_checks, which calls them).

A benchmark field set where no benchmark runs, a data root nothing reads, decoding fields under greedy
decoding, a tail of evaluations the run cannot end on: each is a ConfigError naming the key, before any model
loads or any run directory exists.
"""

from __future__ import annotations

import math

from replaylab.config_fields import check, check_choice, defaults_of
from replaylab.evaluation.benchmarks import SUITES as BENCHMARK_SUITES
from replaylab.evaluation.benchmarks import benchmark_names
from replaylab.tasks.tiny8 import SUITES as TINY_SUITES

# Decoding fields that only act when sampling (temperature > 0).
SAMPLING_EVAL_FIELDS = ("top_p", "top_k", "samples")
# Evaluation fields that only the benchmark evaluation reads (none runs with eval.suite=none and no eval.benchmarks;
# the probe set draws with the trainer's own sampling).
BENCHMARK_EVAL_FIELDS = ("data_root", "max_new_tokens", "temperature", "top_p", "top_k", "samples", "sampled_k",
                         "sampled_temperature", "max_problems", "instruction", "enable_thinking")
# Training sets generated in-process (tasks/datasets.py's TINY_DATA), not read from the data root.
GENERATED_DATA = ("tiny_arith", "tiny_long")
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
