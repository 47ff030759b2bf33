"""Per-sample evaluation records -> tidy metric rows, one per (benchmark, metric), plus suite means.

Kept apart from the runner so that metrics can be recomputed from stored records (a changed grader,
a new metric) without generating again. Conventions (docs/architecture.md):
- a problem whose gold answer the grader cannot parse is skipped, not scored 0, and counted in
  `unparseable_gold`; grader timeouts and errors score 0 and are counted (`timeouts`,
  `grading_errors`), so a table can flag a benchmark where grading, not the model, moved the number;
- the suite mean gives every benchmark the same weight (mean of per-benchmark values), and its CI is
  a bootstrap stratified by benchmark; count metrics are summed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from replaylab.evaluation.metrics import (
    avg_at_k,
    bootstrap_ci,
    mean_pass_at_k,
    mean_response_length,
    per_problem_accuracy,
    stratified_bootstrap_ci,
    truncation_rate,
)

METRICS: tuple[str, ...] = (
    "avg@k",  # mean over problems of the mean over the k samples
    "pass@1",  # unbiased pass@1 (equals avg@k; computed through the estimator as a cross-check)
    "pass@k",  # unbiased pass@k with k = samples per problem (solved at least once)
    "ci_low",  # bootstrap 95% CI of avg@k over problems
    "ci_high",
    "se",  # standard error of avg@k over problems (sd of per-problem accuracy / sqrt(problems)); suite
    # mean: sqrt(sum of squared per-benchmark se) / benchmarks, the se of an equal-weight mean
    "mean_response_tokens",  # generated tokens per response, EOS included
    "truncation_rate",  # responses that hit the token budget before EOS
    "timeouts",  # samples whose grading timed out (scored 0)
    "unparseable_gold",  # problems skipped because the grader could not parse the gold answer
    "grading_errors",  # samples whose grading failed otherwise (scored 0)
)
_COUNTS = ("timeouts", "unparseable_gold", "grading_errors")


def _benchmark_stats(records: Sequence[dict], n_resamples: int, seed: int) -> tuple[dict, np.ndarray, int, int, int]:
    by_problem: dict[str, list[dict]] = {}
    for r in records:
        by_problem.setdefault(r["id"], []).append(r)
    bad_gold = sum(any(r["status"] == "unparseable_gold" for r in rs) for rs in by_problem.values())
    # the whole problem goes, not its unparsed samples alone: k is the fewest samples of a graded problem
    graded = [rs for rs in by_problem.values() if not any(r["status"] == "unparseable_gold" for r in rs)]
    flat = [r for rs in graded for r in rs]
    correct = [[bool(r["correct"]) for r in rs] for rs in graded]
    k = min((len(rs) for rs in graded), default=0)
    acc = per_problem_accuracy(correct) if graded else np.empty(0)
    lo, hi = bootstrap_ci(acc, n_resamples=n_resamples, seed=seed)
    values = {
        "avg@k": avg_at_k(correct),
        "pass@1": mean_pass_at_k(correct, 1),
        "pass@k": mean_pass_at_k(correct, k) if k else float("nan"),
        "ci_low": lo,
        "ci_high": hi,
        "se": float(np.std(acc, ddof=1) / np.sqrt(len(acc))) if len(acc) > 1 else float("nan"),
        "mean_response_tokens": mean_response_length([r["num_tokens"] for r in flat]),
        "truncation_rate": truncation_rate([r["truncated"] for r in flat]),
        "timeouts": float(sum(r["status"] == "timeout" for r in flat)),
        "unparseable_gold": float(bad_gold),
        "grading_errors": float(sum(r["status"] == "error" for r in flat)),
    }
    return values, acc, len(graded), len(flat), k


def summarize(
    records: Sequence[dict], suite: str | None = None, n_resamples: int = 1000, seed: int = 0
) -> list[dict]:
    """Tidy rows {benchmark, metric, value, n_problems, n_samples, k} for every benchmark in
    `records` (in order of first appearance) and, named `<suite>/mean` (or `mean`), their mean."""
    by_bench: dict[str, list[dict]] = {}
    for r in records:
        by_bench.setdefault(r["benchmark"], []).append(r)
    rows: list[dict] = []
    per_bench: list[tuple[dict, np.ndarray, int, int]] = []
    for name, recs in by_bench.items():
        values, acc, n_problems, n_samples, k = _benchmark_stats(recs, n_resamples, seed)
        per_bench.append((values, acc, n_problems, n_samples))
        rows += [dict(benchmark=name, metric=m, value=values[m], n_problems=n_problems, n_samples=n_samples, k=k)
                 for m in METRICS]
    if not per_bench:
        return rows
    scored = [pb for pb in per_bench if pb[2] > 0]  # benchmarks with at least one graded problem
    # A mean over fewer benchmarks than the suite's is another suite's mean: a benchmark that graded nothing (every
    # gold unparseable) makes the suite's value NaN, not the mean of the rest (its own row says why: unparseable_gold)
    if len(scored) < len(per_bench):
        scored = []
    lo, hi = stratified_bootstrap_ci([acc for _, acc, _, _ in scored], n_resamples=n_resamples, seed=seed)  # NaN if none
    mean_name = f"{suite}/mean" if suite else "mean"
    n_problems = sum(pb[2] for pb in per_bench)
    n_samples = sum(pb[3] for pb in per_bench)
    for m in METRICS:
        if m in _COUNTS:
            value = float(sum(v[m] for v, *_ in per_bench))
        elif m == "ci_low":
            value = lo
        elif m == "ci_high":
            value = hi
        elif m == "se":
            value = float(np.sqrt(sum(v["se"] ** 2 for v, *_ in scored)) / len(scored)) if scored else float("nan")
        else:
            value = float(np.mean([v[m] for v, *_ in scored])) if scored else float("nan")
        rows.append(
            dict(benchmark=mean_name, metric=m, value=value, n_problems=n_problems, n_samples=n_samples, k=None)
        )
    return rows
