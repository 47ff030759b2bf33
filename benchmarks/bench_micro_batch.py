"""One pass per gradient group vs length-sorted chunks (`trainer.micro_batch`), on the real trainer.

Both sides run replaylab's GRPO iteration (`time_replaylab`: the real `Trainer.run_iteration`) with the
tiny GRPO replay recipe (`+sweep=tiny_grpo_replay`: 32 prompts x 8 samples, temperature 1.0, lr 1e-4,
strategy=current, responses up to 64 tokens) on the tiny world, `--steps` iterations after `--warmup`,
`--threads` torch threads, in fresh processes alternated (benchmarks/alternate.py): `whole` with
trainer.micro_batch=0 (one forward/backward over all 256 rows, padded to the longest), `chunked` with
trainer.micro_batch=`--micro-batch` (default 64: four chunks of similar length). Both sides sample the
same first rollouts; their updates differ only in float summation order.

Printed: per iteration and per generated token, time whole / time chunked pair by pair and the
median (above 1: chunked is faster), and each side's forward/backward seconds from its ledger.

    python benchmarks/bench_micro_batch.py [--pairs 5] [--steps 4] [--warmup 1] [--micro-batch 64] [--threads 1]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import alternate
from common import time_replaylab

RECIPE = ["+sweep=tiny_grpo_replay", "strategy=current", "order=0"]


def side(micro_batch: int | None):
    def run(args: argparse.Namespace) -> dict:
        mb = args.micro_batch if micro_batch is None else micro_batch
        overrides = RECIPE + [f"trainer.micro_batch={mb}", f"trainer.threads={args.threads}"]
        with tempfile.TemporaryDirectory() as tmp:
            seconds, tokens, facts = time_replaylab(overrides, args.warmup + args.steps, Path(tmp))
        return alternate.measured(seconds, tokens, args.warmup, micro_batch=mb, **facts)
    return run


SIDES = {"whole": side(0), "chunked": side(None)}


def main() -> None:
    p = alternate.parser(__doc__, SIDES)
    p.add_argument("--steps", type=int, default=4, help="measured iterations per run")
    p.add_argument("--warmup", type=int, default=1, help="iterations before timing")
    p.add_argument("--micro-batch", type=int, default=64, help="trainer.micro_batch of the chunked side")
    p.set_defaults(threads=1)
    args = p.parse_args()
    if args.side:
        return alternate.run_side(args, SIDES)
    title = (f"GRPO iteration, tiny_grpo_replay recipe (32 x 8): trainer.micro_batch=0 vs {args.micro_batch}, "
             f"{args.threads} thread(s)")
    result = alternate.parent(__file__, args, "whole", "chunked", title)
    for r in result["pairs"]:
        fb = {s: r[s]["phase_seconds"].get("forward_backward") for s in ("whole", "chunked")}
        print(f"  pair {r['pair']}: forward_backward seconds (all iterations) whole {fb['whole']}, chunked {fb['chunked']}")
    alternate.save(args.out, [result])


if __name__ == "__main__":
    main()
