"""Mirror result rows to wandb (offline unless the user sets WANDB_MODE or wandb.mode).

The local rows stay the source of truth. wandb gets the resolved config as its run config (so the
web UI can group and filter by any key), every metric row as `split/benchmark/metric` at step =
update, and the budget ledger as `ledger/<counter>` at the same steps (so accuracy can be plotted
against trajectories or teacher tokens). How runs are organised (`wandb_identity`): one project per
experiment, one group per strategy label (grouped curves then compare strategies, averaged over
data orders and seeds), job type = response budget, tags for strategy, trainer, budget, data order
and seed, a readable name (with the short config hash), and a run id of config hash plus code digest, so a
rerun after a code change starts a new wandb run instead of appending to the old one; readers
(wandb_export.run_identity) name the run by its local run directory again. A run ends finished with
`ended_by` in its summary, or failed when it raised.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WandbIdentity:
    project: str
    group: str
    job_type: str
    name: str
    run_id: str
    tags: tuple[str, ...]


def wandb_identity(obj, config_hash: str, code: str) -> WandbIdentity:
    """From the run's `config.Config`: see the module doc."""
    label = obj.strategy.label or obj.strategy.name
    w = obj.wandb
    return WandbIdentity(
        project=w.project or f"replaylab-{obj.experiment}",
        group=w.group or label,
        job_type=obj.budget.name,
        # the short config hash tells apart cells that differ in more than these (a pairing, budget axes)
        name=f"{label} order={obj.order} seed={obj.trainer.seed} {obj.budget.name} {config_hash[:8]}",
        run_id=f"{config_hash}-{code}",
        tags=(label, obj.strategy.name, obj.trainer.kind, obj.trainer.objective, f"budget={obj.budget.name}",
              f"order={obj.order}", f"seed={obj.trainer.seed}"),
    )


class WandbMirror:
    def __init__(self, run_dir: Path, ident: WandbIdentity, config: dict, entity: str | None, mode: str | None):
        import wandb

        mode = mode or os.environ.get("WANDB_MODE") or "offline"
        self.run = wandb.init(
            project=ident.project, entity=entity, group=ident.group, job_type=ident.job_type, name=ident.name,
            id=ident.run_id, config=config, dir=str(run_dir), mode=mode, resume="allow", tags=list(ident.tags),
            reinit="finish_previous", settings=wandb.Settings(silent=True, console="off"),
        )

    def log_rows(self, rows: list[dict]) -> None:
        by_step: dict[int, dict[str, float]] = {}
        for r in rows:
            key = "/".join(x for x in (r["split"], r["benchmark"], r["metric"]) if x)
            values = by_step.setdefault(r["update"], {})
            values[key] = r["value"]
            values.update({f"ledger/{k[len('ledger_'):]}": v for k, v in r.items()
                           if k.startswith("ledger_") and isinstance(v, (int, float))})
        for step, values in sorted(by_step.items()):
            if step >= self.run.step:  # a resumed run re-logs rows wandb already has: skip them
                self.run.log(values, step=step)

    def finish(self, ended_by: str | None) -> None:
        """End the wandb run: finished, with the done marker's `ended_by` in its summary (which budget ended it:
        tables read it as they read done.json), or, when `ended_by` is None (the run raised or was stopped),
        failed, so a reader never takes an interrupted run's last evaluation for its final one."""
        if ended_by is None:
            self.run.finish(exit_code=1)
            return
        self.run.summary["ended_by"] = ended_by
        self.run.finish()
