"""Mirror result rows to wandb (offline unless the user sets WANDB_MODE or wandb.mode).

The local rows stay the source of truth; wandb gets the resolved config as its run config (so the
web UI can group and filter by any key) and every metric row as a logged value at its update.
"""

from __future__ import annotations

import os
from pathlib import Path


class WandbMirror:
    def __init__(self, run_dir: Path, run_id: str, name: str, config: dict, project: str,
                 entity: str | None, group: str | None, mode: str | None, tags: list[str]):
        import wandb

        mode = mode or os.environ.get("WANDB_MODE") or "offline"
        self.run = wandb.init(
            project=project, entity=entity, group=group, name=name, id=run_id, config=config,
            dir=str(run_dir), mode=mode, resume="allow", tags=tags, reinit="finish_previous",
            settings=wandb.Settings(silent=True, console="off"),
        )

    def log_rows(self, rows: list[dict]) -> None:
        by_step: dict[int, dict[str, float]] = {}
        for r in rows:
            key = "/".join(x for x in (r["split"], r["benchmark"], r["metric"]) if x)
            by_step.setdefault(r["update"], {})[key] = r["value"]
        for step, values in sorted(by_step.items()):
            if step >= self.run.step:  # a resumed run re-logs rows wandb already has: skip them
                self.run.log(values, step=step)

    def finish(self) -> None:
        self.run.finish()
