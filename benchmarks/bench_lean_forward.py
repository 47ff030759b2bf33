"""The transformers module forward vs the packed lean forward (`trainer.forward=module|auto`), on the real
trainer; with `--compare no_grad`, the default with and without its last layer pruned where that changes no
number (prefills, forwards without autograd); with `--compare pruned`, the default vs `trainer.forward=pruned`
(the loss forward pruned too).

Both sides run replaylab's iteration (`Trainer.run_iteration`, benchmarks/common.py) on the tiny world,
`--steps` iterations of which the first `--warmup` are dropped, `--threads` torch threads, each side in
its own fresh process, alternated (benchmarks/alternate.py). Three recipes (`--recipe`):

- opd:  the default run's iteration (64 prompts x 1, exact full-vocabulary reverse KL, responses <= 48
        tokens): the loss forward/backward and the teacher's scoring both take the chosen forward;
- grpo: the tiny GRPO replay recipe (`+sweep=tiny_grpo_replay strategy=current`: 32 x 8, temperature
        1.0, responses <= 48 tokens);
- tinylong: a cell of the R-OPD tiny table (`+sweep=tiny_ropd strategy=current budget=tinylong_long`:
        64 x 1, responses <= 192 tokens, every update in ropd's four gradient groups; use --threads 1 as
        in a sweep cell).

The lean forward computes the same logits (bitwise on these models) and the same gradients up to float
summation order, so both sides sample the same first rollouts. Printed: time A / time B per iteration and
per generated token, pair by pair and the median (above 1: B is faster), and each run's forward/backward
and scoring seconds from its ledger.

    python benchmarks/bench_lean_forward.py [--compare module|no_grad|pruned] [--recipe opd|grpo|tinylong|both|all] [--pairs 5]
        [--steps 6] [--warmup 1] [--threads 2]
"""

from __future__ import annotations

import alternate
from common import recipe_side

RECIPES = {"opd": ["order=0"], "grpo": ["+sweep=tiny_grpo_replay", "strategy=current", "order=0"],
           "tinylong": ["+sweep=tiny_ropd", "strategy=current", "budget=tinylong_long", "order=0"]}

SIDES = {side: recipe_side(RECIPES, "trainer.forward", value)
         for side, value in (("module", "module"), ("lean", "auto"), ("pruned", "pruned"))}


def full_last_layer(args) -> dict:
    """trainer.forward=auto as it ran before the last layer was pruned anywhere (the same numbers, bit for
    bit): no forward and no prefill has MIN_PRUNED_ROWS rows to prune."""
    from replaylab.models import lean
    from replaylab.rollout import decoder

    lean.MIN_PRUNED_ROWS = decoder.MIN_PRUNED_ROWS = 1 << 62
    return SIDES["lean"](args)


SIDES["full"] = full_last_layer
SIDE_NAMES = {"module": "trainer.forward=module", "full": "trainer.forward=auto, nothing pruned",
              "lean": "trainer.forward=auto", "pruned": "trainer.forward=pruned"}
# --compare: (side A, side B). no_grad: the default's pruning (prefills, forwards without autograd) on and off
COMPARE = {"module": ("module", "lean"), "no_grad": ("full", "lean"), "pruned": ("lean", "pruned")}


def main() -> None:
    p = alternate.parser(__doc__, SIDES)
    p.add_argument("--compare", choices=list(COMPARE), default="module",
                   help="module: the module forward (A) vs the lean one (B); no_grad: auto without (A) and with (B) its "
                        "pruned prefills and no-grad forwards; pruned: auto (A) vs trainer.forward=pruned (B)")
    p.add_argument("--recipe", choices=[*RECIPES, "both", "all"], default="both", help="both: opd and grpo")
    p.add_argument("--steps", type=int, default=6, help="iterations per run, warm-up included")
    p.add_argument("--warmup", type=int, default=1, help="iterations dropped at the start of each run")
    args = p.parse_args()
    if args.side:
        return alternate.run_side(args, SIDES)
    results = []
    a, b = COMPARE[args.compare]
    chosen = {"all": list(RECIPES), "both": ["opd", "grpo"]}.get(args.recipe, [args.recipe])
    for recipe in chosen:
        title = f"{recipe} iteration: {a} ({SIDE_NAMES[a]}) vs {b} ({SIDE_NAMES[b]}), {args.threads} thread(s)"
        result = alternate.parent(__file__, args, a, b, title, ("--recipe", recipe, "--compare", args.compare))
        for r in result["pairs"]:
            phases = {s: {k: r[s]["phase_seconds"].get(k) for k in ("generate", "forward_backward", "score")} for s in (a, b)}
            print(f"  pair {r['pair']}: seconds over all iterations {phases}")
        results.append(result)
        print()
    alternate.save(args.out, results)


if __name__ == "__main__":
    main()
