"""torch's BLAS vs oneDNN for the lean forward's and decoder's matmuls (`trainer.matmul=blas|onednn`), on the real trainer.

Both sides run replaylab's iteration (`Trainer.run_iteration`, benchmarks/common.py) on the tiny world,
`--steps` iterations of which the first `--warmup` are dropped, `--threads` torch threads, each side in
its own fresh process, alternated (benchmarks/alternate.py). Three recipes (`--recipe`):

- opd:      the default run's iteration (64 prompts x 1, full-vocabulary reverse KL, responses <= 48 tokens);
- grpo:     the tiny GRPO replay recipe (`+sweep=tiny_grpo_replay strategy=current`: 32 x 8, <= 48 tokens);
- tinylong: a cell of the R-OPD tiny table (`+sweep=tiny_ropd strategy=current budget=tinylong_long`:
            64 x 1, responses of ~70-190 tokens), one thread as in its sweep (`--threads 1`).

The kernels compute the same products in another summation order (bitwise equal for inner dimensions
up to 128), so the sides' rollouts drift apart after the first update; the token counts of both are
printed. Printed: time blas / time onednn per iteration and per generated token, pair by pair and the
median (above 1: oneDNN is faster), and each run's generation, scoring and forward/backward seconds.

    python benchmarks/bench_matmul_kernel.py [--recipe opd|grpo|tinylong|all] [--pairs 5] [--steps 6] [--warmup 1] [--threads 2]
"""

from __future__ import annotations

import alternate
from common import recipe_side

RECIPES = {"opd": ["order=0"], "grpo": ["+sweep=tiny_grpo_replay", "strategy=current", "order=0"],
           "tinylong": ["+sweep=tiny_ropd", "strategy=current", "budget=tinylong_long", "order=0"]}


SIDES = {kernel: recipe_side(RECIPES, "trainer.matmul", kernel) for kernel in ("blas", "onednn")}


def main() -> None:
    p = alternate.parser(__doc__, SIDES)
    p.add_argument("--recipe", choices=[*RECIPES, "all"], default="opd")
    p.add_argument("--steps", type=int, default=6, help="iterations per run, warm-up included")
    p.add_argument("--warmup", type=int, default=1, help="iterations dropped at the start of each run")
    args = p.parse_args()
    if args.side:
        return alternate.run_side(args, SIDES)
    results = []
    for recipe in (list(RECIPES) if args.recipe == "all" else [args.recipe]):
        title = f"{recipe} iteration: trainer.matmul=blas vs onednn, {args.threads} thread(s)"
        result = alternate.parent(__file__, args, "blas", "onednn", title, ("--recipe", recipe))
        for r in result["pairs"]:
            phases = {s: {k: r[s]["phase_seconds"].get(k) for k in ("generate", "score", "forward_backward")}
                      for s in ("blas", "onednn")}
            print(f"  pair {r['pair']}: seconds over all iterations {phases}")
        results.append(result)
        print()
    alternate.save(args.out, results)


if __name__ == "__main__":
    main()
