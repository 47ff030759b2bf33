"""Alternated A/B timing: each side in its own fresh process, A B A B ... for `--pairs` pairs.

A bench script defines its sides as functions `side(args) -> dict`, builds its arguments with
`parser`, and calls `run_side` (given `--side`) or `parent` (otherwise). Run without `--side`, the
script is the parent: it starts `python <script> --side A --json FILE ...`,
then the same for B, `--pairs` times (every other argument is passed on), and reads back the JSON
each child wrote. Each child measures its steps after a warm-up and reports at least

    seconds_per_step   median wall time of its measured steps
    steps              measured steps
    tokens_generated   response tokens generated in the measured steps
    seconds_measured   total wall time of the measured steps

The parent takes the ratio A/B pair by pair, per step (median step times) and per generated token
(seconds_measured / tokens_generated), prints every pair, both sides' token counts and the median
of the pair ratios (statistics.median), so one slow moment on a noisy machine moves one pair, not
the result. Each child also records the 1-minute load average before and after its run ("max load"
per pair): on a 2-core machine a competing process can slow a 2-thread torch run several-fold. Each
child also times a fixed matmul probe before and after its run ("probe ms", the slower of the two per
side): the 2-core VM runs two-thread matmuls at the one-thread rate for stretches of seconds
(docs/speed.md), so a side whose probe reads about 1.5x the others' ran slow for that reason, not for
its code. Nothing is dropped for it: the medians use every pair. `--out FILE` also saves every
child's JSON and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

Side = Callable[[argparse.Namespace], dict]


def measured(step_seconds: list[float], step_tokens: list[int], warmup: int, **extra) -> dict:
    """A child's result from its per-step wall times and generated tokens (the first `warmup` dropped)."""
    secs, toks = step_seconds[warmup:], step_tokens[warmup:]
    if not secs:
        raise ValueError(f"no measured steps: {len(step_seconds)} steps with {warmup} warm-up")
    return {"seconds_per_step": statistics.median(secs), "steps": len(secs), "tokens_generated": int(sum(toks)),
            "seconds_measured": sum(secs), "step_seconds": secs, "step_tokens": toks, **extra}


def run_child(script: Path, side: str, argv: list[str], verbose: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(script), "--side", side, "--json", str(out), *argv]
        capture = {} if verbose else {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
        proc = subprocess.run(cmd, check=False, text=True, **capture)
        if proc.returncode != 0 or not out.exists():
            tail = "" if verbose else "\n".join((proc.stdout or "").splitlines()[-40:])
            raise RuntimeError(f"side {side!r} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
        return json.loads(out.read_text())


def matmul_probe() -> float:
    """Milliseconds for nine float32 products at the tiny student's decode shapes (64 rows; q/k/v, o,
    gate/up, down per layer of two, then the head), on this process's torch threads: median of 5 x 50."""
    import time

    import torch

    gen = torch.Generator().manual_seed(0)  # not the global generator: the sides seed their own runs
    shapes = [(128, 256), (128, 128), (128, 768), (384, 128)] * 2 + [(128, 128)]
    pairs = [(torch.randn(64, i, generator=gen), torch.randn(i, o, generator=gen)) for i, o in shapes]
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(50):
            for x, w in pairs:
                x @ w
        runs.append((time.perf_counter() - t0) / 50)
    return 1e3 * statistics.median(runs)


def per_token(r: dict) -> float:
    return r["seconds_measured"] / max(r["tokens_generated"], 1)


def alternate(script: Path, a: str, b: str, pairs: int, argv: list[str], verbose: bool = False) -> list[dict]:
    """Run A then B in fresh processes, `pairs` times; one record per pair with both results and the ratios."""
    records = []
    for i in range(pairs):
        ra = run_child(script, a, argv, verbose)
        rb = run_child(script, b, argv, verbose)
        records.append({"pair": i + 1, a: ra, b: rb, "ratio_step": ra["seconds_per_step"] / rb["seconds_per_step"],
                        "ratio_token": per_token(ra) / per_token(rb)})
        print(f"  pair {i + 1}/{pairs}: {a} {ra['seconds_per_step']:.3f} s/step, {b} {rb['seconds_per_step']:.3f} s/step",
              flush=True)
    return records


def report(title: str, a: str, b: str, records: list[dict]) -> dict:
    """Print every pair and the medians; returns the medians."""
    print(f"\n{title}\nratios are time {a} / time {b} (below 1: {a} is faster)")
    head = (f"{'pair':>4}  {a + ' s/step':>16} {b + ' s/step':>16} {'ratio/step':>10}  {a + ' tokens':>16} "
            f"{b + ' tokens':>16} {a + ' ms/tok':>16} {b + ' ms/tok':>16} {'ratio/token':>11} {'max load':>8} "
            f"{'probe ms ' + a + '/' + b:>20}")
    print(head)
    for r in records:
        ra, rb = r[a], r[b]
        print(f"{r['pair']:>4}  {ra['seconds_per_step']:>16.3f} {rb['seconds_per_step']:>16.3f} {r['ratio_step']:>10.3f}  "
              f"{ra['tokens_generated']:>16d} {rb['tokens_generated']:>16d} {1e3 * per_token(ra):>16.3f} "
              f"{1e3 * per_token(rb):>16.3f} {r['ratio_token']:>11.3f} {max(ra['load'] + rb['load']):>8.2f} "
              f"{max(ra['probe_ms']):>9.3f}/{max(rb['probe_ms']):.3f}")
    medians = {"ratio_step": statistics.median(r["ratio_step"] for r in records),
               "ratio_token": statistics.median(r["ratio_token"] for r in records)}
    print(f"median ratio {a}/{b} over {len(records)} pairs: per step {medians['ratio_step']:.3f}, "
          f"per generated token {medians['ratio_token']:.3f}")
    for side in (a, b):
        steps = records[0][side]["steps"]
        tokens = [r[side]["tokens_generated"] for r in records]
        print(f"  {side}: {steps} measured steps per run, tokens generated per run {tokens} "
              f"(mean {statistics.mean(tokens) / steps:.1f} per step)")
    return medians


def parser(doc: str, sides: dict[str, Side]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=5, help="alternated A B pairs (parent)")
    p.add_argument("--out", type=Path, help="parent: also write every child's JSON and the ratios here")
    p.add_argument("--verbose", action="store_true", help="parent: show the children's output")
    p.add_argument("--side", choices=list(sides), help="child: measure this side only")
    p.add_argument("--json", type=Path, help="child: write its result here")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads in each child")
    return p


PARENT_ONLY = {"--pairs": 1, "--out": 1, "--verbose": 0}


def child_argv(argv: list[str]) -> list[str]:
    """The arguments a child gets: the parent's, less the parent-only ones."""
    out, i = [], 0
    while i < len(argv):
        key = argv[i].split("=", 1)[0]
        if key in PARENT_ONLY:
            i += 1 + (PARENT_ONLY[key] if "=" not in argv[i] else 0)
            continue
        out.append(argv[i])
        i += 1
    return out


def run_side(args: argparse.Namespace, sides: dict[str, Side]) -> None:
    """Child: measure one side, print its result as one JSON line and write it to --json."""
    import torch

    torch.set_num_threads(args.threads)
    load_before, probe_before = os.getloadavg()[0], matmul_probe()
    result = {"side": args.side, "threads": args.threads, **sides[args.side](args)}
    # The 1-minute load average around the run: above the thread count, something else competed for the cores.
    result["load"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    result["probe_ms"] = [round(probe_before, 3), round(matmul_probe(), 3)]
    line = json.dumps(result)
    print(line, flush=True)
    if args.json:
        args.json.write_text(line)


TARGETS = {"<=": lambda x, y: x <= y, ">=": lambda x, y: x >= y}


def parent(script: str, args: argparse.Namespace, a: str, b: str, title: str, extra_argv: tuple[str, ...] = (),
           target: tuple[str, str, float] | None = None) -> dict:
    """Parent: alternate A and B, print the table and the medians, and check `target` = (ratio key, op, bound),
    e.g. ("ratio_token", "<=", 0.5), against the median. Returns everything measured."""
    print(f"{title}: {args.pairs} pairs, {a} then {b}, each in a fresh process", flush=True)
    argv = child_argv(sys.argv[1:]) + list(extra_argv)
    records = alternate(Path(script).resolve(), a, b, args.pairs, argv, args.verbose)
    medians = report(title, a, b, records)
    out = {"title": title, "sides": [a, b], "pairs": records, "medians": medians}
    if target:
        key, op, bound = target
        met = TARGETS[op](medians[key], bound)
        print(f"target: median {key.replace('_', ' per ')} {a}/{b} {op} {bound}: {'met' if met else 'NOT met'} "
              f"({medians[key]:.3f})")
        out["target"] = {"key": key, "op": op, "bound": bound, "met": met}
    return out


def save(path: Path | None, results: list[dict]) -> None:
    if path:
        path.write_text(json.dumps(results, indent=1))
        print(f"wrote {path}")
