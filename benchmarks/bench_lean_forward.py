"""The transformers module forward vs the packed lean forward (`trainer.forward=module|auto`), on the real trainer.

Both sides run replaylab's iteration (`Trainer.run_iteration`, benchmarks/common.py) on the tiny world,
`--steps` iterations of which the first `--warmup` are dropped, `--threads` torch threads, each side in
its own fresh process, alternated (benchmarks/alternate.py). Two recipes (`--recipe`):

- opd:  the default run's iteration (64 prompts x 1, exact full-vocabulary reverse KL, responses <= 48
        tokens): the loss forward/backward and the teacher's scoring both take the chosen forward;
- grpo: the tiny GRPO replay recipe (`+sweep=tiny_grpo_replay strategy=current`: 32 x 8, temperature
        1.0, responses <= 48 tokens).

The lean forward computes the same logits (bitwise on these models) and the same gradients up to float
summation order, so both sides sample the same first rollouts. Printed: time module / time lean per
iteration and per generated token, pair by pair and the median (above 1: lean is faster), and each
run's forward/backward and scoring seconds from its ledger.

    python benchmarks/bench_lean_forward.py [--recipe opd|grpo|both] [--pairs 5] [--steps 6] [--warmup 1] [--threads 2]
"""

from __future__ import annotations

import alternate
from common import recipe_side

RECIPES = {"opd": ["order=0"], "grpo": ["+sweep=tiny_grpo_replay", "strategy=current", "order=0"]}


SIDES = {"module": recipe_side(RECIPES, "trainer.forward", "module"),
         "lean": recipe_side(RECIPES, "trainer.forward", "auto")}


def main() -> None:
    p = alternate.parser(__doc__, SIDES)
    p.add_argument("--recipe", choices=["opd", "grpo", "both"], default="both")
    p.add_argument("--steps", type=int, default=6, help="iterations per run, warm-up included")
    p.add_argument("--warmup", type=int, default=1, help="iterations dropped at the start of each run")
    args = p.parse_args()
    if args.side:
        return alternate.run_side(args, SIDES)
    results = []
    for recipe in (["opd", "grpo"] if args.recipe == "both" else [args.recipe]):
        title = f"{recipe} iteration: trainer.forward=module vs auto (lean, packed), {args.threads} thread(s)"
        result = alternate.parent(__file__, args, "module", "lean", title, ("--recipe", recipe))
        for r in result["pairs"]:
            phases = {s: {k: r[s]["phase_seconds"].get(k) for k in ("forward_backward", "score")} for s in ("module", "lean")}
            print(f"  pair {r['pair']}: seconds over all iterations {phases}")
        results.append(result)
        print()
    alternate.save(args.out, results)


if __name__ == "__main__":
    main()
