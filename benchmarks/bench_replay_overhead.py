"""Replay bookkeeping cost: time inside a strategy's hooks as a share of the step time (the baseline).

Runs each strategy for a few iterations of the real trainer on the tiny world and times its hooks
(plan, compose, observe, state_dict, load of the initial store) against the whole iteration; for GRPO
strategies the batch is large enough that replay actually happens (prompts recur: small data set).
Target: under 2% of step time for every strategy.

    python benchmarks/bench_replay_overhead.py [--iterations 12]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

HOOKS = ("plan", "compose", "observe", "state_dict", "receive_initial", "initial_prompts")
CASES = {
    "current": ["trainer=opd"],
    "initial": ["trainer=opd", "strategy=initial"],
    "recent": ["trainer=opd", "strategy=recent", "strategy.current_updates=4", "strategy.window=4"],
    # The schedule's length must equal the budget (4 current + the default 20 replay updates); the first
    # iterations still cover both phases.
    "fixed_schedule": ["trainer=opd", "strategy=fixed_schedule", "strategy.current_updates=4", "budget.max_updates=24"],
    "ropd": ["trainer=opd", "strategy=ropd", "strategy.burn_in=1", "trainer.warmup_updates=0"],  # burn-in >= warm-up
    "prompt_replay": ["trainer=grpo", "teacher=none", "strategy=prompt_replay", "data.size=64", "strategy.cooldown=1"],
    "repo": ["trainer=grpo", "teacher=none", "strategy=repo", "data.size=64", "strategy.min_cache_to_replay=8"],
    "popo": ["trainer=grpo", "teacher=none", "strategy=popo", "data.size=64"],
    "rlep": ["trainer=grpo", "teacher=none", "strategy=rlep", "data.size=64"],
}


def measure(name: str, overrides: list[str], iterations: int, root: Path) -> tuple[float, float]:
    from conftest import compose

    from replaylab.config import to_object
    from replaylab.results.rows import RowWriter
    from replaylab.training.build import build_components
    from replaylab.training.runs import run_dir
    from replaylab.training.trainer import Trainer

    budget = [] if any(o.startswith("budget.max_updates=") for o in overrides) else [f"budget.max_updates={iterations}"]
    cfg = compose(overrides + budget + ["eval=none", "wandb.enabled=false", "progress=false",
                                        f"output_root={root / name}"])
    obj = to_object(cfg)
    comp = build_components(obj)
    spent = {"hooks": 0.0}

    def timed(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent["hooks"] += time.perf_counter() - t0
        return wrapper

    for hook in HOOKS:
        setattr(comp.strategy, hook, timed(getattr(comp.strategy, hook)))
    path = run_dir(cfg)
    path.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(obj, comp, path, RowWriter(path / "rows.jsonl", {}))
    trainer.build_initial_store()
    spent["hooks"] = 0.0  # the one-off store build is generation, not bookkeeping
    t0 = time.perf_counter()
    for _ in range(iterations):
        trainer.run_iteration()
        comp.strategy.state_dict()  # what each checkpoint pays
    total = time.perf_counter() - t0
    comp.grader.close()
    return spent["hooks"], total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--strategies", nargs="*", default=list(CASES))
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "disabled")
    print(f"{'strategy':16s} {'hooks s':>9s} {'step s':>9s} {'hooks / step time':>18s}")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.strategies:
            hooks, total = measure(name, CASES[name], args.iterations, Path(tmp))
            ratio = hooks / total
            worst = max(worst, ratio)
            print(f"{name:16s} {hooks:9.4f} {total / args.iterations:9.3f} {100 * ratio:17.2f}%")
    print(f"worst: {100 * worst:.2f}% of step time (target < 2%)")


if __name__ == "__main__":
    main()
