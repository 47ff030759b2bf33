"""tiny8 accuracy of a saved tiny-world model: the CPU stand-in for the math8 table.

Greedy decoding of all eight tiny sets (800 problems) through `HFGenerator` and the same runner and
grader as the math benchmarks, so a number here is produced by the code path that makes the real
tables. It runs on one intra-op thread in chunks of 100 prompts: the tiny model's matrices are too
small for threads to pay, and on a shared 2-core machine (a sweep, a test run next door) two OpenMP
threads were 4-8x slower than one, while larger chunks fall out of cache. That keeps it at a few
seconds for the ~400K-parameter teacher, cheap enough for every tiny-world build and eval point.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from replaylab.evaluation.benchmarks import get_benchmarks
from replaylab.evaluation.runner import evaluate_benchmarks
from replaylab.rollout.base import SamplingParams
from replaylab.rollout.hf import HFGenerator

TINY_SUITE = "tiny8"
CHUNK = 100  # prompts per generate call


def tiny8_accuracy(model_dir: str | Path, max_new_tokens: int = 64, *, grader: Any = None) -> dict[str, float]:
    """Greedy accuracy per tiny8 set (keys `add2`, ..., `add3d`) and their unweighted `mean`.

    `grader` defaults to a one-worker `replaylab.grading.Grader` (integer answers take its fast path);
    pass one to share a running pool."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to("cpu").eval()
    benchmarks = get_benchmarks(TINY_SUITE)
    generator = HFGenerator(model, tokenizer, micro_batch=CHUNK)
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)

    def run(g: Any) -> list[dict]:
        return evaluate_benchmarks(
            generator, tokenizer, benchmarks, params, g,
            instruction="", enable_thinking=False, seed=0, suite=TINY_SUITE,
        )[1]

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if grader is None:
            from replaylab.grading import Grader  # the grading pool is only started when none is given

            with Grader(num_workers=1) as own:
                rows = run(own)
        else:
            rows = run(grader)
    finally:
        torch.set_num_threads(threads)
    acc = {r["benchmark"].removeprefix(f"{TINY_SUITE}/"): r["value"] for r in rows if r["metric"] == "avg@k"}
    return acc
