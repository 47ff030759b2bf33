"""`python -m replaylab.evaluate [model=...] [eval=math8|tiny8] [eval.checkpoint=RUN_DIR]`.

Evaluates a model (a hub id, a local directory, the tiny world, or a training run's checkpoint)
on a benchmark suite through the same Generator, grader and metrics as training's periodic
evaluation, and writes tidy rows (`split=eval`) plus per-sample records next to them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from replaylab.config import ConfigError, register_configs, to_object
from replaylab.config_checks import check_evaluation_run
from replaylab.paths import conf_dir
from replaylab.storage import atomic_write
from replaylab.training.runs import config_hash

register_configs()


def checkpoint_target(checkpoint: str) -> Path:
    """The checkpoint `eval.checkpoint` names: a run directory's latest, a .pt file or a sharded
    directory. Resolved before any model loads, so a wrong path is a config error in seconds."""
    from replaylab.training.runs import latest_checkpoint

    path = Path(checkpoint)
    target = latest_checkpoint(path) if (path / "checkpoints").is_dir() else path
    sharded = target is not None and target.is_dir() and (target / ".metadata").exists()
    if target is None or not (target.is_file() or sharded):
        raise ConfigError(f"eval.checkpoint: no checkpoint found at {checkpoint!r} (expected a run directory with "
                          "checkpoints/latest, a checkpoint .pt file or a sharded checkpoint directory)")
    return target


def load_checkpoint_into(model, target: Path) -> int:
    """Load a run's policy weights; returns the update the checkpoint was taken at."""
    from replaylab.training.runs import load_checkpoint

    if target.is_dir():  # sharded (torchrun) checkpoint: DCP loads it into a plain model in one process
        from replaylab.parallel import load_sharded

        return int(load_sharded(model, None, target)["update"])
    state = load_checkpoint(target)
    model.load_state_dict(state["policy"])
    return int(state["update"])


def evaluate(cfg: DictConfig) -> list[dict]:
    obj = to_object(cfg)
    check_evaluation_run(obj)  # before any model loads
    from dataclasses import asdict

    import torch
    from replaylab.models import kernels
    from replaylab.evaluation.benchmarks import benchmarks_fingerprint
    from replaylab.results.frame import eval_setting
    from replaylab.results.rows import RowWriter
    from replaylab.training.build import (
        build_evaluate,
        build_generator,
        build_grader,
        evaluated_benchmarks,
        load_policy,
        pick_device,
    )

    target = checkpoint_target(obj.eval.checkpoint) if obj.eval.checkpoint else None
    benchmarks = evaluated_benchmarks(obj)  # a bad data file is named before any model loads
    t0 = time.time()
    if obj.trainer.threads:  # as a training run's build does
        torch.set_num_threads(obj.trainer.threads)
    device = pick_device(obj.trainer.device)
    kernels.use(obj.trainer.matmul, device)  # the kernel the trainer's own evaluations ran with
    model, tokenizer = load_policy(obj, device)
    update = load_checkpoint_into(model, target) if target is not None else 0
    generator = build_generator(obj, model, tokenizer)
    grader = build_grader(obj)
    run = Path(obj.output_root) / obj.experiment / f"eval-{config_hash(cfg)}"
    run.mkdir(parents=True, exist_ok=True)
    identity = {"run": run.name, "config_hash": config_hash(cfg), "experiment": obj.experiment,
                "model": obj.model.name_or_path, "checkpoint": obj.eval.checkpoint or "", "budget": obj.eval.budget,
                "max_response_tokens": obj.eval.max_new_tokens, "seed": obj.trainer.seed,
                "eval_setting": eval_setting(asdict(obj.eval)), "eval_data": benchmarks_fingerprint(benchmarks)}
    try:
        results = build_evaluate(obj, generator, tokenizer, grader, benchmarks)(update)
    finally:
        grader.close()
    # An earlier evaluation's rows and summary are replaced only now, whole: a failure or an interrupt
    # above (bad data, a crash, Ctrl-C) leaves them as they were.
    fresh = run / "rows.jsonl.new"
    fresh.unlink(missing_ok=True)
    rows = RowWriter(fresh, identity)
    out = []
    for benchmark, metrics, n in results:
        out += rows.write("eval", update, 0, metrics, {"wall_time": round(time.time() - t0, 3)}, benchmark=benchmark, n=n)
    os.replace(fresh, run / "rows.jsonl")
    atomic_write(run / "summary.json", json.dumps({b: m for b, m, _ in results}, indent=2))
    for benchmark, metrics, _ in results:
        shown = "  ".join(f"{k}={v:.4g}" for k, v in metrics.items() if k in ("avg@k", "pass@k", "ci_low", "ci_high", "mean_response_tokens", "truncation_rate"))
        print(f"{benchmark:28s} {shown}")
    print(f"replaylab: evaluated in {time.time() - t0:.1f}s; rows in {run / 'rows.jsonl'}")
    return out


@hydra.main(version_base=None, config_path=conf_dir(), config_name="config")
def main(cfg: DictConfig) -> None:
    from replaylab.storage import CorruptCheckpoint, UnsafeCheckpoint
    from replaylab.tasks.data_root import DataError, MissingData

    try:
        evaluate(cfg)
    except ConfigError as e:
        print(f"replaylab: invalid config: {e}", file=sys.stderr)
        sys.exit(2)
    except (DataError, MissingData) as e:
        print(f"replaylab: invalid data: {e}", file=sys.stderr)
        sys.exit(2)
    except (UnsafeCheckpoint, CorruptCheckpoint) as e:
        print(f"replaylab: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
