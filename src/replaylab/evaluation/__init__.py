"""Evaluation: the benchmark registry (math8, extra math sets, the tiny8 suite), metrics (avg@k,
unbiased pass@k, bootstrap CIs), the runner that renders, generates, grades and summarises, and the
tiny world's `tiny8_accuracy`."""

from replaylab.evaluation.benchmarks import (
    MATH_INSTRUCTION,
    SUITES,
    Benchmark,
    BenchmarkItem,
    benchmark_names,
    get_benchmark,
    get_benchmarks,
    get_suite,
)
from replaylab.tasks.data_root import DATA_ROOT_ENV, TRAIN_SETS, default_data_root, load_train_rows, resolve_data_root
from replaylab.evaluation.metrics import (
    avg_at_k,
    bootstrap_ci,
    mean_pass_at_k,
    pass_at_k,
    stratified_bootstrap_ci,
)
from replaylab.evaluation.runner import evaluate_benchmarks
from replaylab.evaluation.summary import METRICS, summarize
from replaylab.evaluation.tiny import tiny8_accuracy

__all__ = [
    "DATA_ROOT_ENV",
    "MATH_INSTRUCTION",
    "METRICS",
    "SUITES",
    "TRAIN_SETS",
    "Benchmark",
    "BenchmarkItem",
    "avg_at_k",
    "benchmark_names",
    "bootstrap_ci",
    "default_data_root",
    "evaluate_benchmarks",
    "get_benchmark",
    "get_benchmarks",
    "get_suite",
    "load_train_rows",
    "mean_pass_at_k",
    "pass_at_k",
    "resolve_data_root",
    "stratified_bootstrap_ci",
    "summarize",
    "tiny8_accuracy",
]
