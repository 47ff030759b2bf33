"""GRPO's forward/backward over every row vs without the inert rows (advantage exactly 0: a zero-variance
group's), on the real trainer.

Both sides run replaylab's iteration (`Trainer.run_iteration`, benchmarks/common.py) on the tiny GRPO replay
recipe (`+sweep=tiny_grpo_replay strategy=current`: 32 prompts x 8, temperature 1.0, responses <= 48 tokens,
the lean forward), `--steps` iterations of which the first `--warmup` are dropped, each side in its own fresh
process, alternated (benchmarks/alternate.py). The skipped rows add exactly 0 to the loss's numerator and
nothing to its gradient (tests/test_grpo_inert_rows.py), so both sides sample the same rollouts. Printed:
time all-rows / time skip per iteration and per generated token, pair by pair and the median (above 1:
skipping is faster), and each run's forward/backward seconds from its ledger.

    python benchmarks/bench_inert_rows.py [--pairs 5] [--steps 6] [--warmup 1] [--threads 1]
"""

from __future__ import annotations

import alternate
from common import replaylab_side

RECIPE = ["+sweep=tiny_grpo_replay", "strategy=current", "order=0"]


def side(skip: bool):
    def run(args) -> dict:
        from replaylab.objectives.grpo import GRPO

        GRPO.skip_inert = skip
        return replaylab_side(RECIPE + [f"trainer.threads={args.threads}"], args)
    return run


SIDES = {"all_rows": side(False), "skip": side(True)}


def main() -> None:
    p = alternate.parser(__doc__, SIDES)
    p.add_argument("--steps", type=int, default=6, help="iterations per run, warm-up included")
    p.add_argument("--warmup", type=int, default=1, help="iterations dropped at the start of each run")
    p.set_defaults(threads=1)
    args = p.parse_args()
    if args.side:
        return alternate.run_side(args, SIDES)
    title = f"grpo iteration: every row vs inert rows skipped, {args.threads} thread(s)"
    result = alternate.parent(__file__, args, "all_rows", "skip", title)
    for r in result["pairs"]:
        fb = {s: r[s]["phase_seconds"].get("forward_backward") for s in ("all_rows", "skip")}
        print(f"  pair {r['pair']}: forward_backward seconds over all iterations {fb}")
    alternate.save(args.out, [result])


if __name__ == "__main__":
    main()
