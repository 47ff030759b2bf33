"""`python -m replaylab.train [overrides]`: one training run (or a `-m` sweep) from the config tree.

Composition errors (unknown option, mistyped key, wrong type) come from Hydra; range and choice
errors from the config dataclasses; both name the key and happen before any model is loaded.
A finished run (its directory has a done marker) is skipped, once its rows' data fingerprints match the
data this config reads now (else exit 4: its rows are of other data); an interrupted one resumes.
Exit codes: 2 invalid config, 3 run directory in use by another process, 4 run directory or disk
problem (rows that do not match the checkpoint, unreadable or unsafe checkpoints, a failed write),
5 training diverged or dynamic sampling could not fill a batch (docs/run_directories.md).
In a `-m` sweep a failing cell does not exit: it prints its error naming the cell and raises
`CellFailed`, which Hydra records, so the other cells still run (an exit would end the sweep and,
under the parallel launcher, its running siblings); the sweep then exits 1 naming the first failure.
"""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from replaylab.config import ConfigError, register_configs, to_object
from replaylab.config_checks import check_training_run
from replaylab.paths import conf_dir
from replaylab.training.runs import config_hash, is_done, run_dir

register_configs()
log = logging.getLogger("replaylab.train")


def train(cfg: DictConfig) -> dict:
    obj = to_object(cfg)  # every config error is raised here: before a model loads or a directory exists
    check_training_run(obj)
    path = run_dir(cfg)
    if is_done(path):
        return _skip(path, obj)
    from replaylab import parallel as D
    from replaylab.training.run_lock import RunDirectoryBusy, RunLock

    D.init_from_env(obj.trainer.device, obj.trainer.dist_timeout_s)  # a no-op in a single process
    lock, refusal = None, None
    if D.is_main():  # one lock per run; the other ranks of a torchrun job are its own processes
        path.mkdir(parents=True, exist_ok=True)
        lock = RunLock(path, obj.run_lock_wait)
        try:
            lock.__enter__()
        except RunDirectoryBusy as e:
            lock, refusal = None, str(e)
    refusal = D.broadcast_object(refusal)
    if refusal:
        raise RunDirectoryBusy(refusal)
    try:
        if D.broadcast_object(is_done(path)):  # finished while this process waited for the lock
            return _skip(path, obj)
        return _train_locked(cfg, obj, path)
    finally:
        if lock is not None:
            lock.__exit__(None, None, None)


def _skip(path, obj) -> dict:
    from replaylab.storage import read_done_marker

    summary = read_done_marker(path / "done.json")
    check_finished_data(path, obj)
    log.info("replaylab: %s is already done (update %s); skipping (replaylab show %s)", path, summary.get("update"), path)
    return summary


def _train_locked(cfg: DictConfig, obj, path) -> dict:
    from dataclasses import asdict

    from replaylab import parallel as D
    from replaylab.results.frame import eval_setting
    from replaylab.results.rows import NullRows, RowWriter
    from replaylab.storage import atomic_write
    from replaylab.training.build import (
        build_components,  # heavy imports only once we know we train
    )
    from replaylab.results.rows import versions
    from replaylab.training.branch import find_branches
    from replaylab.training.shared import SharedWork
    from replaylab.training.trainer import Trainer

    if D.is_main():
        atomic_write(path / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    D.barrier()
    comp = build_components(obj)
    identity = {
        "run": path.name, "config_hash": config_hash(cfg), "experiment": obj.experiment,
        "strategy": obj.strategy.label or obj.strategy.name, "trainer": obj.trainer.kind, "objective": obj.trainer.objective,
        "model": obj.model.name_or_path, "teacher": obj.teacher.name_or_path if obj.trainer.kind == "opd" else "",
        "data": obj.data.name, "order": obj.order, "budget": obj.budget.name,
        "max_response_tokens": obj.budget.max_response_tokens, "seed": obj.trainer.seed,
        "prompts_per_iteration": obj.trainer.prompts_per_iteration, "samples_per_prompt": obj.trainer.samples_per_prompt,
        "resample_period": obj.trainer.resample_period, "eval_tail": obj.eval.tail,
        "eval_setting": eval_setting(asdict(obj.eval)), "eval_data": comp.eval_fingerprint or None,
        "train_data": comp.train_fingerprint,
    }
    rows = RowWriter(path / "rows.jsonl", identity) if D.is_main() else NullRows()
    mirror = None
    if obj.wandb.enabled and D.is_main():
        from replaylab.results.rows import code_digest
        from replaylab.results.wandb_mirror import WandbMirror, wandb_identity

        ident = wandb_identity(obj, config_hash(cfg), code_digest())
        mirror = WandbMirror(path, ident, OmegaConf.to_container(cfg, resolve=True), obj.wandb.entity, obj.wandb.mode)
        rows.mirrors.append(mirror)
    branches = find_branches(cfg, comp.strategy)  # used only if the run has no checkpoint of its own
    shared = SharedWork.for_run(cfg, versions(), comp.eval_fingerprint)
    summary = None
    try:
        summary = Trainer(obj, comp, path, rows, shared).run(branches)
    finally:
        comp.grader.close()
        if mirror:
            mirror.finish(summary["ended_by"] if summary else None)  # None: failed (it raised or was stopped)
    if D.is_main():
        from replaylab.results.report import run_report
        from replaylab.results.rows import read_rows

        try:
            report = run_report(path, read_rows(path / "rows.jsonl"), "done")
        except Exception as e:  # the run is done and its rows are whole; only the summary failed
            report = f"{path} (done); the summary could not be drawn up: {e!r}"
        log.info("replaylab: done\n%s", report)
    return summary


def check_finished_data(path, obj) -> None:
    """StreamChanged unless the finished run's rows were written over the data this config reads now: the
    config hash names no data file, so after a data root changed or a file was edited or regenerated the
    run's directory is the same and skipping it would report the old data's rows for the new data's config.
    Rows from before the fingerprints are not checked."""
    import json

    from replaylab.tasks.stream import StreamChanged
    from replaylab.training.build import data_fingerprints

    try:
        with open(path / "rows.jsonl", "rb") as f:
            first = json.loads(f.readline() or b"{}")
    except (OSError, ValueError):  # damaged rows are the tables' to name (results.frame)
        return
    recorded = {k: first[k] for k in ("eval_data", "train_data") if first.get(k)}
    if not recorded:
        return
    now = dict(zip(("eval_data", "train_data"), data_fingerprints(obj)))
    changed = [f"{k} {v} (now {now[k] or 'none'})" for k, v in recorded.items() if now[k] != v]
    if changed:
        raise StreamChanged(f"{path} finished on other data than this config reads now (rows' {'; '.join(changed)}): "
                            "a benchmark or training file or the data root changed since. Its results are the old "
                            "data's: move the run directory away to train on this data, or restore the old data")


class CellFailed(Exception):
    """A sweep cell ended with an error that exits a single run with `code`."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code

    def __reduce__(self):  # a parallel launcher's worker sends it back pickled
        return CellFailed, (str(self), self.code)


def _sweep_cell() -> str | None:
    """'#N (overrides)' when this process runs a cell of a `-m` sweep, else None."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    job = HydraConfig.get().job
    return f"#{job.num} ({job.override_dirname or 'no overrides'})"


@hydra.main(version_base=None, config_path=conf_dir(), config_name="config")
def main(cfg: DictConfig) -> dict:
    from replaylab.results.rows import RowsMismatch
    from replaylab.storage import CorruptCheckpoint, CorruptDoneMarker, StorageError, UnsafeCheckpoint
    from replaylab.tasks.data_root import DataError, MissingData
    from replaylab.tasks.stream import StreamChanged
    from replaylab.training.components import TrainingDiverged
    from replaylab.training.dynamic_sampling import DynamicSamplingExhausted
    from replaylab.training.run_lock import RunDirectoryBusy
    from replaylab.training.runs import UnsafePointer

    # (errors, message prefix, exit code), first match wins; documented in the module doc
    exits = [
        (ConfigError, "invalid config: ", 2),
        ((DataError, MissingData), "invalid data: ", 2),
        (RunDirectoryBusy, "", 3),
        # the run directory or its disk: nothing already written is lost
        ((RowsMismatch, CorruptCheckpoint, CorruptDoneMarker, UnsafeCheckpoint, UnsafePointer, StorageError,
          StreamChanged), "", 4),
        (TrainingDiverged, "training diverged: ", 5),
        (DynamicSamplingExhausted, "training stopped: ", 5),
    ]
    try:
        return train(cfg)
    except Exception as e:
        for kinds, prefix, code in exits:
            if isinstance(e, kinds):
                cell = _sweep_cell()
                if cell is None:
                    print(f"replaylab: {prefix}{e}", file=sys.stderr)
                    sys.exit(code)
                message = f"sweep cell {cell} failed (exit code {code} as a single run): {prefix}{e}"
                print(f"replaylab: {message}", file=sys.stderr)
                raise CellFailed(message, code) from e
        raise


if __name__ == "__main__":
    main()
