"""The default run end to end, this checkout against an older one, side by side on this machine.

Runs `python -m replaylab.train` (the embedded default: 1000 OPD updates, tiny8 evaluations) from
two source trees, alternated A B A B, each in its own process with a fresh output root, and prints
per pair: the trainer's wall time (the ledger's `wall_time`), the process's wall time, the final
tiny8 mean, and the ratio baseline / candidate. The older tree is a checkout of an earlier commit
(e.g. `git worktree add /tmp/base <commit>`); both run in this venv, each with its own `src/` first
on PYTHONPATH and its own `conf/`.

    python benchmarks/bench_default_run.py --baseline /tmp/base [--candidate .] [--pairs 1] [-- overrides...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def tree_env(tree: Path) -> dict[str, str]:
    """The environment that runs `tree`'s code in this venv: its `src/` first and its own `conf/`."""
    return {**os.environ, "PYTHONPATH": str(tree / "src"), "REPLAYLAB_CONF": str(tree / "conf")}


def tree_parser(doc: str, baseline_help: str) -> argparse.ArgumentParser:
    """The arguments every older-tree benchmark takes: --baseline TREE, --candidate TREE (this checkout), --pairs."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, required=True, help=baseline_help)
    ap.add_argument("--candidate", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--pairs", type=int, default=1)
    return ap


def run_once(tree: Path, overrides: list[str]) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"bench-{tree.name}-"))
    env = tree_env(tree)
    cmd = [sys.executable, "-m", "replaylab.train", f"output_root={out}", "progress=false", "wandb.enabled=false", *overrides]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{tree}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    (run,) = [p.parent for p in out.glob("*/*/done.json")]
    done = json.loads((run / "done.json").read_text())
    evals = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines()]
    last = max(r["update"] for r in evals if r["split"] == "eval")
    accuracy = [r["value"] for r in evals if r["split"] == "eval" and r["update"] == last
                and str(r.get("benchmark", "")).startswith("tiny8/") and r.get("metric") == "avg@k"]
    phases = {k.removeprefix("seconds_"): v for k, v in done.items() if k.startswith("seconds_")}
    return {"tree": str(tree), "wall_time": done["wall_time"], "process_s": seconds, "update": done["update"],
            "tiny8_mean": round(statistics.mean(accuracy), 4) if accuracy else None, "phases": phases}


def main() -> None:
    ap = tree_parser(__doc__, "source tree of the older commit")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for both sides")
    a = ap.parse_args()
    ratios = []
    for pair in range(a.pairs):
        base = run_once(a.baseline.resolve(), a.overrides)
        cand = run_once(a.candidate.resolve(), a.overrides)
        ratios.append(base["wall_time"] / cand["wall_time"])
        for side, r in (("baseline", base), ("candidate", cand)):
            print(json.dumps({"pair": pair, "side": side, **r}), flush=True)
        print(f"pair {pair}: trainer wall {base['wall_time']:.1f} s vs {cand['wall_time']:.1f} s = {ratios[-1]:.2f}x; "
              f"process {base['process_s']:.1f} s vs {cand['process_s']:.1f} s; tiny8 mean {base['tiny8_mean']} vs "
              f"{cand['tiny8_mean']}", flush=True)
    print(f"median speed-up (baseline / candidate trainer wall time) over {len(ratios)} pair(s): {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
