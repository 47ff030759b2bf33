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
BASELINE, POOL, GRADER, CACHED = ("baseline (serial math-verify)", "pool (workers only)",
                                  "grader (fast path)", "grader, cached repeat")


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


def serial_baseline(pairs: list[tuple[str, str]], name: str) -> float:
    """Items/s of plain serial math-verify in this process (its default timeouts, main thread)."""
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    for response, gold in pairs[:50]:  # warm antlr like the workers are warmed
        verify(parse("\\boxed{" + gold + "}"), parse(response))
    cpu0, start = time.process_time(), time.perf_counter()
    for response, gold in pairs:
        verify(parse("\\boxed{" + gold + "}"), parse(response))
    CPU_MS.setdefault(BASELINE, {})[name] = 1000 * (time.process_time() - cpu0) / len(pairs)
    return len(pairs) / (time.perf_counter() - start)


def _cpu_seconds(pids: list[int]) -> float:
    """User+system CPU of this process plus the given workers (Linux /proc; 0 elsewhere)."""
    total = time.process_time()
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total


CPU_MS: dict[str, dict[str, float]] = {}  # row -> workload -> CPU milliseconds per item


def timed(grader: Grader, pairs: list[tuple[str, str]], row: str, name: str) -> float:
    """Wall-clock items/s; also records CPU ms per item (parent + workers) in CPU_MS."""
    cpu0, start = _cpu_seconds(grader.worker_pids()), time.perf_counter()
    grader.grade(pairs)
    wall = time.perf_counter() - start
    CPU_MS.setdefault(row, {})[name] = 1000 * (_cpu_seconds(grader.worker_pids()) - cpu0) / len(pairs)
    return len(pairs) / wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", type=Path, default=Path(os.environ.get("REPLAYLAB_DATA_ROOT", DEFAULT_DATA)))
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    loads = workloads(args.data_root)
    warm = warmup_pairs(args.data_root)
    # Other processes on the machine share these cores; the load average says how much.
    print(f"CPUs: {os.cpu_count()}  load average: {os.getloadavg()[0]:.1f}  workers: {args.workers}  "
          f"pairs: " + ", ".join(f"{k}={len(v)}" for k, v in loads.items()))

    baseline = {name: serial_baseline(pairs, name) for name, pairs in loads.items()}
    table: dict[str, dict[str, float]] = {BASELINE: baseline}

    with Grader(args.workers, fast_path=False, cache_size=0) as pool:
        start = time.perf_counter()
        pool.grade(warm[:100])
        print(f"first batch of 100 incl. worker start-up: {time.perf_counter() - start:.2f}s")
        pool.grade(warm[100:])
        table[POOL] = {name: timed(pool, pairs, POOL, name) for name, pairs in loads.items()}

    with Grader(args.workers, cache_size=0) as grader:
        grader.grade(warm)
        table[GRADER] = {name: timed(grader, pairs, GRADER, name) for name, pairs in loads.items()}
        counts = grader.counters

    with Grader(args.workers) as cached:
        cached.grade(warm)
        for pairs in loads.values():
            cached.grade(pairs)
        table[CACHED] = {name: timed(cached, pairs, CACHED, name) for name, pairs in loads.items()}

    names = list(loads)
    header = "".join(f"{n:>12}" for n in names)
    print(f"\n{'wall-clock items/s':<32}{header}")
    for row, values in table.items():
        print(f"{row:<32}" + "".join(f"{values[n]:>12.0f}" for n in names))
    for row in (GRADER, POOL):
        print(f"{row.split(' (')[0] + ' / baseline':<32}"
              + "".join(f"{table[row][n] / baseline[n]:>11.1f}x" for n in names))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")

    # Wall clock depends on what else runs on the machine; CPU time per item does not. Dividing the
    # cores by it gives the rate the same work would reach on otherwise idle cores.
    cores = min(args.workers, os.cpu_count() or 1)
    print(f"\n{'CPU ms per item (all processes)':<32}{header}")
    for row, values in CPU_MS.items():
        print(f"{row:<32}" + "".join(f"{values[n]:>12.3f}" for n in names))
    print(f"{'=> items/s on idle cores':<32}" + "".join(
        f"{(1 if row == BASELINE else cores) * 1000 / max(v, 1e-9):>12.0f}"
        for row in (GRADER,) for v in (CPU_MS[row][n] for n in names)) + f"   (grader, {cores} cores)")
    print(f"{'':<32}" + "".join(f"{1000 / max(CPU_MS[BASELINE][n], 1e-9):>12.0f}" for n in names)
          + "   (baseline, 1 core)")

    decided = counts["fast_path"] / max(1, counts["items"])
    print(f"\nfast path share over the grader row's items (incl. warm-up): {decided:.0%}; statuses: "
          + ", ".join(f"{s}={counts[s]}" for s in ("ok", "no_answer", "timeout", "unparseable_gold", "error")))

if __name__ == "__main__":
    main()
