"""Score a policy on benchmarks: render, generate k samples per problem, grade, summarise.

The prompt path is the one training uses (the model's own chat template, the question followed by the
instruction), with `enable_thinking` passed through so Qwen3's thinking and non-thinking modes can
both be evaluated. Benchmarks that share k go to the generator in one call, so a backend batches
across benchmarks (the whole tiny suite is one batch); all responses are graded in one grader call, so
its worker pool stays busy. Greedy decoding (temperature 0) gives identical samples, so k is 1 then.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from replaylab.evaluation.benchmarks import Benchmark
from replaylab.evaluation.summary import summarize
from replaylab.rollout.base import Generator, SamplingParams
from replaylab.tasks.datasets import render_prompts
from replaylab.tasks.prompts import render_question  # noqa: F401  (re-exported for callers)
from replaylab.tasks.subsets import hashed_subset
from replaylab.types import Prompt

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def build_prompts(
    tokenizer: PreTrainedTokenizerBase,
    benchmark: Benchmark,
    instruction: str,
    enable_thinking: bool,
    max_problems: int | None = None,
) -> list[Prompt]:
    """One `Prompt` per item (uid = item id), of `max_problems` items if given (`problem_subset`)."""
    items = problem_subset(benchmark, max_problems)
    rows = [{"id": it.id, "problem": it.question, "answer": it.answer} for it in items]
    return render_prompts(rows, tokenizer, instruction, enable_thinking)


def problem_subset(benchmark: Benchmark, max_problems: int | None) -> list:
    """The benchmark's items, or `max_problems` of them: a fixed sample by id hash (tasks.subsets)."""
    return hashed_subset(benchmark.items, max_problems, lambda item: item.id, benchmark.name)


def samples_for(benchmark: Benchmark, params: SamplingParams, samples_per_problem: int | None) -> int:
    """k for one benchmark: 1 when greedy, else the override, else the benchmark's default."""
    if params.temperature == 0:
        return 1
    k = samples_per_problem if samples_per_problem is not None else benchmark.k
    if k < 1:
        raise ValueError(f"samples_per_problem must be >= 1, got {k}")
    return k


def evaluate_benchmarks(
    generator: Generator,
    tokenizer: PreTrainedTokenizerBase,
    benchmarks: list[Benchmark],
    params: SamplingParams,
    grader: Any,
    *,
    instruction: str,
    enable_thinking: bool,
    seed: int,
    samples_per_problem: int | None = None,
    max_problems: int | None = None,
    suite: str | None = None,
    n_resamples: int = 1000,
) -> tuple[list[dict], list[dict]]:
    """(per-sample records, tidy metric rows) for `benchmarks`.

    `grader` is a `replaylab.grading.Grader` (anything with `grade(pairs, truncated=flags)`) or a function of the
    (response, gold) pairs; its results need `correct` and `status`. Records have keys benchmark,
    id, sample, response, gold, correct, status, num_tokens, truncated; rows are `summary.summarize`'s
    (metric names in `summary.METRICS`), with the suite mean named `<suite>/mean` (or `mean`).
    """
    names = [b.name for b in benchmarks]
    if len(set(names)) != len(names):
        raise ValueError(f"benchmark names must be unique, got {names}")
    if max_problems is not None and max_problems < 1:
        raise ValueError(f"max_problems must be >= 1, got {max_problems}")

    prompts = {b.name: build_prompts(tokenizer, b, instruction, enable_thinking, max_problems) for b in benchmarks}
    ks = {b.name: samples_for(b, params, samples_per_problem) for b in benchmarks}
    samples: dict[str, list] = {}
    for k in sorted(set(ks.values())):  # one generate call per distinct k
        group = [n for n in names if ks[n] == k]
        flat = [p for n in group for p in prompts[n]]
        out = generator.generate(flat, replace(params, n=k), seed=seed) if flat else []
        if len(out) != len(flat) or any(len(s) != k for s in out):
            raise RuntimeError(
                f"generator returned {[len(s) for s in out]} samples for {len(flat)} prompts, expected {k} each"
            )
        start = 0
        for n in group:
            samples[n] = out[start : start + len(prompts[n])]
            start += len(prompts[n])

    records: list[dict] = []
    for n in names:
        for prompt, group in zip(prompts[n], samples[n]):
            texts = tokenizer.batch_decode([s.response_ids.tolist() for s in group], skip_special_tokens=True)
            for j, (s, text) in enumerate(zip(group, texts)):
                records.append(
                    dict(benchmark=n, id=prompt.uid, sample=j, response=text, gold=prompt.answer,
                         correct=False, status="", num_tokens=s.num_tokens, truncated=bool(s.truncated))
                )
    pairs = [(r["response"], r["gold"]) for r in records]
    # a Grader is told which responses the budget cut (graded by a complete box only); a plain function is not
    if not records:
        results = []
    elif hasattr(grader, "grade"):
        results = list(grader.grade(pairs, truncated=[r["truncated"] for r in records]))
    else:
        results = list(grader(pairs))
    if len(results) != len(records):
        raise RuntimeError(f"grader returned {len(results)} results for {len(records)} (response, gold) pairs")
    for r, res in zip(records, results):
        r["correct"], r["status"] = bool(res.correct), str(res.status)
    return records, summarize(records, suite=suite, n_resamples=n_resamples, seed=seed)
