"""Where a `rollout=fast` generate call spends its time, and the matmul floor of one decode step.

A profile, not a speed-up ratio (bench_generation.py gives those): on the tiny student, 64 rendered
tiny_arith prompts x 64 new tokens (EOS ignored), temperature 1.0, `--threads` torch threads, it times
`--calls` generate calls after `--warmup` and splits each into prefill, the one-token decode steps,
sampling (`sample_next`) and the rest (bookkeeping, the final copy into Samples). It then times the
same decode step in isolation (the same cache, ids and rotary rows, called back to back) and the step's
nine matmuls alone at its shapes (the floor no fusion removes). Why: the issue's 4x over `rollout=hf` is
a question of how close the step can get to its matmuls; this prints how close it is, and whether the
step is slower inside a call than back to back.

    python benchmarks/profile_generation.py [--engine eager|compiled] [--threads 2] [--calls 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def timed(store: dict, name: str, fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        store[name] = store.get(name, 0.0) + time.perf_counter() - t0
        return out
    return wrapper


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", choices=["eager", "compiled"], default="compiled")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2, help="untimed calls first (the compiled step compiles in the first)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    import replaylab.rollout.fast as fast
    from replaylab.models.loading import load_causal_lm, load_tokenizer
    from replaylab.models.tiny_world import ensure_tiny_world
    from replaylab.rollout import compiled
    from replaylab.rollout.base import SamplingParams
    from replaylab.tasks.datasets import render_prompts, training_rows

    path = str(ensure_tiny_world(progress=False) / "student")
    tokenizer, model = load_tokenizer(path), load_causal_lm(path, "float32").eval()
    prompts = render_prompts(training_rows("tiny_arith", 64, 1, None), tokenizer, "", False)
    generator = fast.FastGenerator(model, tokenizer, compile=args.engine == "compiled")
    params = SamplingParams(64, temperature=1.0, ignore_eos=True)
    dec = generator.decoder

    # Wrap the module-level names _decode looks up, so the split is of the real call path.
    split: dict[str, float] = {}
    step_name = "decode steps"
    fast.decode_step = timed(split, step_name, fast.decode_step)
    fast.sample_next = timed(split, "sampling", fast.sample_next)
    generator._prefill = timed(split, "prefill", generator._prefill)
    eager_forward = dec.forward
    for i in range(args.warmup):
        generator.generate(prompts, params, seed=i)
    split.clear()
    t0 = time.perf_counter()
    if args.engine == "eager":  # the eager step is dec.forward with one token per row; prefill passes the prompts
        stepped = timed(split, step_name, eager_forward)
        dec.forward = lambda ids, *a: (stepped if ids.shape[1] == 1 else eager_forward)(ids, *a)
    for i in range(args.calls):
        generator.generate(prompts, params, seed=args.warmup + i)
    total = (time.perf_counter() - t0) / args.calls
    dec.forward = eager_forward
    steps = params.max_new_tokens - 1  # the last token is sampled from the previous step's logits
    print(f"engine={args.engine} threads={args.threads}: {total * 1000:.1f} ms per generate call "
          f"({len(prompts)} x {params.max_new_tokens} tokens)")
    rest = total - sum(split.values()) / args.calls
    for name, seconds in list(split.items()) + [("everything else", rest * args.calls)]:
        share = seconds / args.calls / total
        print(f"  {name:16s} {seconds / args.calls * 1000:7.1f} ms per call  {share:6.1%}"
              + (f"  {seconds / args.calls / steps * 1000:.3f} ms per step" if name == step_name else ""))

    # The same step back to back, and its nine matmuls alone, at this call's shapes (median of 5 x 63 steps).
    with torch.no_grad():
        cache, logits, prompt_len, P = generator._prefill(prompts, params.max_new_tokens)
        cos, sin = dec.rotary_tables(prompt_len[:, None] + torch.arange(params.max_new_tokens))
        ids = logits.argmax(-1)
        flat = compiled.step_weights(dec)
        if args.engine == "compiled":
            step = lambda t: compiled.decode_step(dec, flat, ids, P + t, cos[:, t], sin[:, t], cache)  # noqa: E731
        else:
            step = lambda t: eager_forward(ids[:, None], cos[:, t : t + 1], sin[:, t : t + 1], cache, P + t,  # noqa: E731
                                           cache.key_bias[:, :, : P + t + 1])
        # step_weights' layout: per layer ln1, qkv, qkv bias, q/k norm, o, ln2, gate_up, down; then norm, head
        mats = [w for i, w in enumerate(flat[:-2]) if i % 8 in (1, 4, 6, 7)] + [flat[-1]]
        inputs = [torch.randn(len(prompts), w.shape[0]) for w in mats]

        def matmuls(_t):
            for x, w in zip(inputs, mats):
                x @ w

        for name, fn in [("step back to back", step), ("its matmuls alone", matmuls)]:
            runs = []
            for _ in range(5):
                t0 = time.perf_counter()
                for t in range(steps):
                    fn(t)
                runs.append((time.perf_counter() - t0) / steps)
            print(f"  {name:18s} {statistics.median(runs) * 1000:.3f} ms per step "
                  f"(runs {' '.join(f'{r * 1000:.3f}' for r in sorted(runs))}; {len(mats)} matmuls)")


if __name__ == "__main__":
    main()
