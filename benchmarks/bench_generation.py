"""Rollout throughput: rollout=fast (FastGenerator) vs rollout=hf (HFGenerator), generated tokens per second.

Both sample from the tiny student (float32, on `--device`, default the CPU) for the same 64 rendered tiny_arith training prompts
(`training_rows` + `render_prompts`, the trainer's own prompt path), one sequence each, up to 64 new
tokens, temperature 1.0, through `generator.generate(prompts, SamplingParams(64, temperature=1.0), seed)`
with the same seeds on both sides, `--threads` torch threads (default 2). Each side runs in a fresh
process (benchmarks/alternate.py), hf then fast, `--pairs` times (default 5); each run times
`--repeats` generate calls after `--warmup`. Two modes, both reported:

- natural: sequences stop at EOS (what training sees; both sides print their token counts);
- fixed:   every sequence runs the full 64 tokens (`SamplingParams(ignore_eos=True)`: EOS is an ordinary
           token on both engines).

The ratios printed are time hf / time fast, per generate call and per generated token, pair by pair
and their median; the per-token median is the speed-up of rollout=fast in tokens per second.
Target: at least 4x in generated tokens per second.

`--candidate compiled` puts `rollout=fast rollout.compile=true` (the inductor-compiled decode step,
rollout/compiled.py) on the B side instead; its compilation happens in the warm-up call, which is not
timed (the first process compiles, about 20 s on 2 cores; later ones load inductor's disk cache).
`--baseline fast` puts eager rollout=fast on the A side (the compiled step's own speed-up).

    python benchmarks/bench_generation.py [--pairs 5] [--mode both|natural|fixed] [--repeats 3] [--threads 2]
                                          [--device cpu|cuda] [--baseline hf|fast] [--candidate fast|compiled]
"""

from __future__ import annotations

import argparse
import time

import alternate


def side(engine: str):
    def run(args: argparse.Namespace) -> dict:
        from replaylab.models.loading import load_causal_lm, load_tokenizer
        from replaylab.models.tiny_world import ensure_tiny_world
        from replaylab.rollout.base import SamplingParams
        from replaylab.rollout.fast import FastGenerator
        from replaylab.rollout.hf import HFGenerator
        from replaylab.tasks.datasets import render_prompts, training_rows

        path = str(ensure_tiny_world(progress=False) / "student")
        tokenizer, model = load_tokenizer(path), load_causal_lm(path, "float32").eval().to(args.device)
        prompts = render_prompts(training_rows("tiny_arith", args.sequences, 1, None), tokenizer, "", False)
        if engine == "hf":
            generator = HFGenerator(model, tokenizer)
        else:
            generator = FastGenerator(model, tokenizer, compile=engine == "compiled")
        params = SamplingParams(args.max_new_tokens, temperature=1.0, ignore_eos=args.mode == "fixed")
        seconds, tokens = [], []
        for i in range(args.warmup + args.repeats):
            t0 = time.perf_counter()
            groups = generator.generate(prompts, params, seed=i)
            seconds.append(time.perf_counter() - t0)
            tokens.append(sum(s.num_tokens for g in groups for s in g))
        result = alternate.measured(seconds, tokens, args.warmup, mode=args.mode, sequences=len(prompts))
        result["tokens_per_second"] = result["tokens_generated"] / result["seconds_measured"]
        return result

    return run


SIDES = {"hf": side("hf"), "fast": side("fast"), "compiled": side("compiled")}


def main() -> None:
    p = alternate.parser(__doc__, SIDES)
    p.add_argument("--mode", choices=["both", "natural", "fixed"], default="both")
    p.add_argument("--sequences", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="measured generate calls per run")
    p.add_argument("--warmup", type=int, default=1, help="generate calls before timing")
    # Both engines return CPU tensors, so each timed call ends after the GPU finished its work.
    p.add_argument("--device", default="cpu", help="where the student runs: cpu | cuda")
    p.add_argument("--baseline", choices=["hf", "fast"], default="hf", help="the A side")
    p.add_argument("--candidate", choices=["fast", "compiled"], default="fast", help="the B side (compiled: rollout.compile=true)")
    args = p.parse_args()
    if args.side:
        return alternate.run_side(args, SIDES)
    results = []
    for mode in (["natural", "fixed"] if args.mode == "both" else [args.mode]):
        title = (f"Generation ({mode} lengths): {args.baseline} vs {args.candidate}, tiny student, {args.sequences} "
                 f"sequences x <= {args.max_new_tokens} tokens, {args.threads} threads, on {args.device}")
        results.append(alternate.parent(__file__, args, args.baseline, args.candidate, title, ("--mode", mode),
                                        target=("ratio_token", ">=", 4.0) if args.baseline == "hf" else None))
        print()
    alternate.save(args.out, results)


if __name__ == "__main__":
    main()
