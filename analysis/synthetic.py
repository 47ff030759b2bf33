"""Write a small synthetic experiment directory: the tables and notebooks without training first.

`python analysis/synthetic.py runs/demo` lays out run directories exactly as a sweep does
(`<trainer>-<strategy>-<hash>/` with config.yaml, rows.jsonl through the real RowWriter, and
done.json), with train, strategy and eval rows whose shapes match the trainer's: accuracy that
rises with updates, reverse KL that falls, an R-OPD switch iteration, replay counts and behaviour
weights. Numbers are made up (seeded); they exercise the tools, not the science.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

STRATEGIES = ("current", "ropd")
BUDGETS = {"tiny_short": 24, "tiny_long": 48}
BENCHMARKS = ("tiny8/add2", "tiny8/mul2")


def _config(experiment: str, strategy: str, budget: str, max_tokens: int, order: int) -> dict:
    return {
        "experiment": experiment, "strategy": {"name": strategy}, "order": order,
        "trainer": {"kind": "opd", "objective": "opd_full_rkl", "seed": 0, "prompts_per_iteration": 8,
                    "samples_per_prompt": 1, "resample_period": 1},
        "model": {"name_or_path": "tiny://student"}, "teacher": {"name_or_path": "tiny://teacher"},
        "data": {"name": "tiny_arith"}, "budget": {"name": budget, "max_response_tokens": max_tokens},
    }


def _identity(run: str, config_hash: str, cfg: dict) -> dict:
    t = cfg["trainer"]
    return {"run": run, "config_hash": config_hash, "experiment": cfg["experiment"], "strategy": cfg["strategy"]["name"],
            "trainer": t["kind"], "objective": t["objective"], "model": cfg["model"]["name_or_path"],
            "teacher": cfg["teacher"]["name_or_path"], "data": cfg["data"]["name"], "order": cfg["order"],
            "budget": cfg["budget"]["name"], "max_response_tokens": cfg["budget"]["max_response_tokens"],
            "seed": t["seed"], "prompts_per_iteration": t["prompts_per_iteration"],
            "samples_per_prompt": t["samples_per_prompt"], "resample_period": t["resample_period"]}


def write_run(root: Path, cfg: dict, updates: int = 40, eval_every: int = 20, finished: bool = True) -> Path:
    """One run directory with rows for `updates` updates (one iteration each); done.json when finished."""
    from omegaconf import OmegaConf

    from replaylab.results.rows import RowWriter

    config_hash = hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]
    name = f"{cfg['trainer']['kind']}-{cfg['strategy']['name']}-{config_hash}"
    path = root / cfg["experiment"] / name
    path.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(cfg), path / "config.yaml")
    rows = RowWriter(path / "rows.jsonl", _identity(name, config_hash, cfg))
    rows.truncate(0)
    rng = random.Random(config_hash)
    replay = cfg["strategy"]["name"] != "current"
    short = cfg["budget"]["max_response_tokens"] < 32
    switch = updates // 2 if cfg["strategy"]["name"] == "ropd" else None
    per_iter = cfg["trainer"]["prompts_per_iteration"]
    for u in range(updates + 1):
        ledger = {"updates": u, "iterations": u, "trajectories": per_iter * u,
                  "fresh_trajectories": per_iter * u if not replay else per_iter * min(u, switch or u),
                  "initial_trajectories": 0, "tokens_generated": 20 * per_iter * u,
                  "teacher_tokens_scored": 20 * per_iter * u, "samples_trained": per_iter * u,
                  "replayed_samples": per_iter * max(0, u - (switch or updates + 1)) if replay else 0,
                  "wall_time": 0.5 * u}
        ledger["initial_trajectories"] = ledger["trajectories"] - ledger["fresh_trajectories"]
        progress = u / updates
        if u > 0:
            train = {"reverse_kl": 1.5 * (1 - 0.6 * progress) + 0.05 * rng.random(), "loss": 1.0 - 0.5 * progress,
                     "response_tokens": (18 if short else 30) - 4 * progress, "grad_norm": 1 + rng.random(),
                     "replay_fraction": float(replay and switch is not None and u > switch),
                     "zero_variance_groups": 0.2 * rng.random()}
            if replay and switch is not None and u > switch:
                train.update(behaviour_weight_mean=1 + 0.1 * rng.random(), behaviour_weight_max=1.8)
            rows.write("train", u, u, train, ledger)
            strategy = {"phase_replay": train["replay_fraction"]}
            if switch is not None and u == switch:
                strategy["switch_iteration"] = float(u + 1)
            rows.write("strategy", u, u, strategy, ledger)
        if u % eval_every == 0:
            accs = []
            for bench in BENCHMARKS:
                acc = min(1.0, 0.4 + 0.3 * progress + (0.05 if replay else 0) - (0.1 if short else 0) + 0.04 * rng.random())
                accs.append(acc)
                rows.write("eval", u, u, _eval_metrics(acc, short), ledger, benchmark=bench, n={"avg@k": 40})
            rows.write("eval", u, u, _eval_metrics(sum(accs) / len(accs), short), ledger,
                       benchmark="mean", n={"avg@k": 80})
    if finished:
        (path / "done.json").write_text(json.dumps({"update": updates}))
    return path


def _eval_metrics(acc: float, short: bool) -> dict:
    return {"avg@k": acc, "pass@k": min(1.0, acc + 0.1), "ci_low": acc - 0.05, "ci_high": acc + 0.05,
            "mean_response_tokens": 20.0 if short else 31.0, "truncation_rate": 0.3 if short else 0.02}


def write_experiment(root: Path, experiment: str = "demo", orders: tuple[int, ...] = (0, 1, 2),
                     unfinished: tuple[str, str, int] | None = None, updates: int = 40) -> Path:
    """Every strategy x budget x order; `unfinished=(strategy, budget, order)` leaves that run without
    done.json, as a failed or still running run looks."""
    for strategy in STRATEGIES:
        for budget, tokens in BUDGETS.items():
            for order in orders:
                done = unfinished != (strategy, budget, order)
                write_run(Path(root), _config(experiment, strategy, budget, tokens, order), updates=updates, finished=done)
    return Path(root) / experiment


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="experiment directory to write, e.g. runs/demo")
    args = p.parse_args()
    out = Path(args.out)
    print(write_experiment(out.parent, experiment=out.name))


if __name__ == "__main__":
    main()
