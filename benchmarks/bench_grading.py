"""Grading throughput (items/s) on this machine, against serial in-process math-verify.

    python benchmarks/bench_grading.py [--data-root DIR] [--workers 2]

Workloads (all pairs unique within a run, and the result cache is off unless stated):
- latex:   MATH-500 official solutions vs their `answer`, the LaTeX-heavy evaluation case
           (fractions, radicals, tuples, intervals, text; about a third are integers);
- integer: GSM8K test answers as GRPO-style responses (`... so the answer is \\boxed{N}.`),
           half correct and half off by one: the tiny world's reward case;
- typical: both together, shuffled.

Rows:
- baseline  serial math-verify in this process, as most harnesses call it:
            verify(parse("\\boxed{gold}"), parse(response)), default extraction configs;
- pool      Grader with the fast path off: every pair goes through the worker processes;
- grader    Grader as shipped (numeric fast path on), result cache off;
- cached    Grader as shipped, second pass over the same pairs (cache on).

Workers are started and warmed (antlr's parser caches fill with use) on other data before timing,
since a trainer's grader is long-lived; the first-batch time including worker start-up is printed
separately.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import time
from pathlib import Path

from replaylab.grading import Grader

DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "math"


def _rows(root: Path, name: str) -> list[dict]:
    with (root / f"{name}.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def workloads(root: Path) -> dict[str, list[tuple[str, str]]]:
    rng = random.Random(0)
    latex = [(r["solution"], r["answer"]) for r in _rows(root, "math500")]
    integer = []
    for i, r in enumerate(_rows(root, "gsm8k_test")):
        n = int(r["answer"]) + (i % 2)  # odd rows are wrong by one
        integer.append((f"Adding these up gives the total. So the answer is \\boxed{{{n}}}.", r["answer"]))
    typical = latex + integer
    rng.shuffle(typical)
    return {"latex": latex, "integer": integer, "typical": typical}


def warmup_pairs(root: Path) -> list[tuple[str, str]]:
    """MATH train answers (disjoint from MATH-500) in boxed responses, to warm workers."""
    rows = _rows(root, "math_train")[:600]
    return [(f"The answer is $\\boxed{{{r['answer']}}}$.", r["answer"]) for r in rows]


def serial_baseline(pairs: list[tuple[str, str]]) -> float:
    """Items/s of plain serial math-verify in this process (its default timeouts, main thread)."""
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    for response, gold in pairs[:50]:  # warm antlr like the workers are warmed
        verify(parse("\\boxed{" + gold + "}"), parse(response))
    start = time.perf_counter()
    for response, gold in pairs:
        verify(parse("\\boxed{" + gold + "}"), parse(response))
    return len(pairs) / (time.perf_counter() - start)


def timed(grader: Grader, pairs: list[tuple[str, str]]) -> float:
    start = time.perf_counter()
    grader.grade(pairs)
    return len(pairs) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", type=Path, default=Path(os.environ.get("REPLAYLAB_DATA_ROOT", DEFAULT_DATA)))
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    loads = workloads(args.data_root)
    warm = warmup_pairs(args.data_root)
    print(f"CPUs: {os.cpu_count()}  workers: {args.workers}  "
          f"pairs: " + ", ".join(f"{k}={len(v)}" for k, v in loads.items()))

    baseline = {name: serial_baseline(pairs) for name, pairs in loads.items()}
    table: dict[str, dict[str, float]] = {"baseline (serial math-verify)": baseline}

    with Grader(args.workers, fast_path=False, cache_size=0) as pool:
        start = time.perf_counter()
        pool.grade(warm[:100])
        print(f"first batch of 100 incl. worker start-up: {time.perf_counter() - start:.2f}s")
        pool.grade(warm[100:])
        table["pool (workers only)"] = {name: timed(pool, pairs) for name, pairs in loads.items()}

    with Grader(args.workers, cache_size=0) as grader:
        grader.grade(warm)
        table["grader (fast path)"] = {name: timed(grader, pairs) for name, pairs in loads.items()}
        counts = grader.counters

    with Grader(args.workers) as cached:
        cached.grade(warm)
        for pairs in loads.values():
            cached.grade(pairs)
        table["grader, cached repeat"] = {name: timed(cached, pairs) for name, pairs in loads.items()}

    names = list(loads)
    print(f"\n{'items/s':<32}" + "".join(f"{n:>12}" for n in names))
    for row, values in table.items():
        print(f"{row:<32}" + "".join(f"{values[n]:>12.0f}" for n in names))
    print(f"{'grader / baseline':<32}" + "".join(f"{table['grader (fast path)'][n] / baseline[n]:>11.1f}x" for n in names))
    print(f"{'pool / baseline':<32}" + "".join(f"{table['pool (workers only)'][n] / baseline[n]:>11.1f}x" for n in names))
    decided = counts["fast_path"] / max(1, counts["items"])
    print(f"\nfast path share over the grader row's items (incl. warm-up): {decided:.0%}; "
          f"statuses: " + ", ".join(f"{s}={counts[s]}" for s in ("ok", "no_answer", "timeout", "unparseable_gold", "error")))


if __name__ == "__main__":
    main()
