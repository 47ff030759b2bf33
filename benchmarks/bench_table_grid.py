"""The fast-engine issue's table target: the R-OPD tiny table's grid as it was at 306b9f3, run by that
commit's `make tiny-table-ropd` and by this checkout, side by side on this machine.

At 306b9f3 `make tiny-table-ropd` was `python -m replaylab.train -m +sweep=tiny_ropd`: 30 cells (5
strategies x budgets tiny_short / tiny_long x 3 orders) of 120 OPD updates on tiny8, evaluated at updates
0, 40, 80 and 120 on 800 problems, one cell at a time (26 minutes on the machine of that day). The
table has since moved to the tinylong world with more orders (issue 14), so today's target runs other
work; this script runs the old grid through today's code instead: the same sweep axes, updates, learning
rate, evaluation points and evaluation size (`eval.max_problems=100`), with today's table machinery
(`launcher=parallel`, branching from recent's checkpoint at update 80) and today's engine. The two
sides' worlds differ (each tree builds the world its own spec describes), as in bench_default_run.py.

Each side is one sweep into a fresh output root, alternated (A B, or B A with --candidate-first), and
the script prints per side the sweep's wall time, cells finished, and the tiny8 mean at updates 0 and
120 per budget; per pair the ratio baseline / candidate; and the median over pairs.

    git worktree add /tmp/base 306b9f3
    python benchmarks/bench_table_grid.py --baseline /tmp/base [--pairs 1] [--candidate-first] [-- overrides...]

Overrides after `--` go to the candidate only (e.g. `branch=false`, `trainer.stat_groups_for_all=true`);
`--both KEY=VALUE` (repeatable) goes to both sides and replaces the grid's own setting of that key, e.g. a
smoke run: `--both order=0 --both strategy=current --both budget.max_updates=2`. A pair of the full grid
takes about 35 minutes on 2 cores.
"""

from __future__ import annotations

import collections
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from replaylab.results.rows import read_rows

from bench_default_run import tree_env, tree_parser

# The 306b9f3 sweep file's settings, as overrides of today's config (trainer opd's lr 1e-3 and tiny8's
# world are today's defaults too; today's tiny_ropd sweep file sets the tinylong world, lr 3e-4 and more).
OLD_GRID = ["trainer=opd", "experiment=tiny_ropd_old", "budget=tiny_short,tiny_long", "budget.max_updates=120",
            "trainer.eval_every=40", "trainer.checkpoint_every=40", "trainer.keep_checkpoints=2",
            "eval.max_new_tokens=${budget.max_response_tokens}", "eval.budget=${budget.name}", "eval.at_start=true",
            "eval.max_problems=100", "progress=false", "launcher=parallel",
            "strategy=recent_80_40,current,fixed_schedule_80_40,initial,ropd_tiny", "order=0,1,2"]


def tiny8_means(root: Path) -> dict[str, float]:
    """Mean over runs of each run's tiny8 mean, keyed `budget@update` for updates 0 and 120."""
    runs = collections.defaultdict(list)
    for rows in root.glob("*/*/rows.jsonl"):
        per = collections.defaultdict(list)
        for r in read_rows(rows):
            if r.get("split") == "eval" and r.get("metric") == "avg@k" and str(r.get("benchmark", "")).startswith("tiny8/"):
                per[f"{r.get('budget')}@{r['update']}"].append(r["value"])
        for key, values in per.items():
            if key.endswith(("@0", "@120")):
                runs[key].append(statistics.mean(values))
    return {k: round(100 * statistics.mean(v), 2) for k, v in sorted(runs.items())}


def run_sweep(tree: Path, overrides: list[str]) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"grid-{tree.name}-"))
    cmd = [sys.executable, "-m", "replaylab.train", "-m", *overrides, f"output_root={out}"]
    t0 = time.perf_counter()
    with open(out / "sweep.log", "w") as log:
        proc = subprocess.run(cmd, cwd=tree, env=tree_env(tree), stdout=log, stderr=subprocess.STDOUT, check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{tree}: exit {proc.returncode}; see {out / 'sweep.log'}")
    return {"tree": str(tree), "root": str(out), "sweep_s": round(seconds, 1),
            "cells_done": len(list(out.glob("*/*/done.json"))), "tiny8_mean": tiny8_means(out)}


def main() -> None:
    ap = tree_parser(__doc__, "source tree of 306b9f3 (or another commit with the same sweep)")
    ap.add_argument("--candidate-first", action="store_true", help="run the candidate first in every pair")
    ap.add_argument("--both", action="append", default=[], metavar="KEY=VALUE", help="override for both sides")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for the candidate")
    a = ap.parse_args()
    replaced = {o.split("=", 1)[0] for o in a.both}
    grid = [o for o in OLD_GRID if o.split("=", 1)[0] not in replaced]
    sides = {"baseline": (a.baseline.resolve(), ["+sweep=tiny_ropd", *a.both]),
             "candidate": (a.candidate.resolve(), [*grid, *a.both, *a.overrides])}
    order = ["candidate", "baseline"] if a.candidate_first else ["baseline", "candidate"]
    ratios = []
    for pair in range(a.pairs):
        result = {side: run_sweep(*sides[side]) for side in order}
        for side in order:
            print(json.dumps({"pair": pair, "side": side, **result[side]}), flush=True)
        ratios.append(result["baseline"]["sweep_s"] / result["candidate"]["sweep_s"])
        print(f"pair {pair}: sweep {result['baseline']['sweep_s']:.0f} s vs {result['candidate']['sweep_s']:.0f} s = "
              f"{ratios[-1]:.2f}x (target: at least 3x)", flush=True)
    print(f"median speed-up (baseline / candidate sweep wall time) over {len(ratios)} pair(s): {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
