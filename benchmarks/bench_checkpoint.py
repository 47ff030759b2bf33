"""Saving and loading a replay buffer's samples: the compact pickling of `types.Sample` vs the earlier one.

A checkpoint holds a strategy's whole buffer. The buffer here is shaped like the tiny GRPO table's RePO
buffer at update 200 (4,096 prompts x 12 samples of ~30 tokens; its real checkpoint was 69 MB in 102,567
archive records): `--prompts` x `--per-prompt` samples, each with response ids, behaviour log-probs, a
reward and an advantage. Sides, each in its own fresh process, alternated A B A B for `--pairs` pairs:

- `tensors`: the earlier pickling (every field, each tensor one record in torch.save's archive), by
  replacing `Sample.__getstate__` with the plain `__dict__` in that process;
- `compact`: the code as it ships (small tensors inline as bytes, fields at their defaults left out).

Each side writes the buffer with `storage.atomic_torch_save` and reads it back with `storage.safe_torch_load`
(the weights-only unpickler checkpoints go through), `--repeats` times; printed per pair: median save and
load seconds and the file size, then the median over pairs of the ratios tensors / compact (above 1:
compact is faster).

    python benchmarks/bench_checkpoint.py [--pairs 5] [--prompts 4096] [--per-prompt 12] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def buffer(prompts: int, per_prompt: int):
    import torch

    from replaylab.types import Prompt, Sample

    g = torch.Generator().manual_seed(0)
    out = []
    for p in range(prompts):
        prompt = Prompt(f"arith-{p:06d}", f"question {p}", tuple(range(20 + p % 9)), str(p))
        for k in range(per_prompt):
            n = 20 + int(torch.randint(0, 20, (1,), generator=g))
            out.append(Sample(prompt=prompt, response_ids=torch.randint(4, 128, (n,), generator=g),
                              behaviour_logprobs=-torch.rand(n, generator=g), policy_version=k, source="fresh",
                              truncated=False, sample_id=f"fresh-v{k}-{p}-{k}", reward=float(k % 2),
                              advantage=0.5 - k % 2))
    return out


def side(name: str, args) -> dict:
    from replaylab.storage import atomic_torch_save, safe_torch_load
    from replaylab.types import Sample

    if name == "tensors":
        Sample.__getstate__ = lambda self: dict(self.__dict__)
    samples = buffer(args.prompts, args.per_prompt)
    saves, loads = [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "update_0000200.pt"
        for _ in range(args.repeats):
            t = time.perf_counter()
            atomic_torch_save({"strategy": {"buffer": samples}}, path)
            saves.append(time.perf_counter() - t)
            t = time.perf_counter()
            back = safe_torch_load(path)["strategy"]["buffer"]
            loads.append(time.perf_counter() - t)
            assert len(back) == len(samples)
        size = path.stat().st_size
    return {"save": statistics.median(saves), "load": statistics.median(loads), "mb": size / 2**20}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--prompts", type=int, default=4096)
    p.add_argument("--per-prompt", type=int, default=12)
    p.add_argument("--repeats", type=int, default=3, help="save/load rounds per process (median)")
    p.add_argument("--side", choices=["tensors", "compact"], help="child: measure this side only")
    args = p.parse_args()
    if args.side:
        print(json.dumps(side(args.side, args)))
        return
    child = [sys.executable, __file__, "--prompts", str(args.prompts), "--per-prompt", str(args.per_prompt),
             "--repeats", str(args.repeats)]
    n = args.prompts * args.per_prompt
    print(f"a buffer of {n} samples, saved and loaded {args.repeats} times per process; {args.pairs} pairs, "
          "tensors then compact, each in a fresh process")
    ratios = {"save": [], "load": []}
    for i in range(args.pairs):
        r = {s: json.loads(subprocess.run(child + ["--side", s], check=True, capture_output=True, text=True).stdout)
             for s in ("tensors", "compact")}
        for k in ratios:
            ratios[k].append(r["tensors"][k] / r["compact"][k])
        print(f"pair {i + 1}: save {r['tensors']['save']:.2f} s vs {r['compact']['save']:.2f} s, load "
              f"{r['tensors']['load']:.2f} s vs {r['compact']['load']:.2f} s, file {r['tensors']['mb']:.1f} vs "
              f"{r['compact']['mb']:.1f} MiB")
    for k, v in ratios.items():
        print(f"{k}: tensors / compact per pair {', '.join(f'{x:.2f}' for x in v)}; median {statistics.median(v):.2f}x")


if __name__ == "__main__":
    main()
