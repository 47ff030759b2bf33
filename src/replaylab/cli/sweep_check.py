"""A Hydra callback: before a `-m` sweep launches any cell, every cell is composed and checked as a run.

Hydra composes a cell only when its turn comes, so a config error in cell 57 of 90 surfaced after hours of
the cells before it. The grid is expanded as `replaylab.plan` expands it (the sweep file's axes, command-line
axes replacing or adding to them) and each cell goes through the training run's config checks; one that
fails stops the sweep before anything runs, naming the cell and the key (exit 2). Registered in
conf/config.yaml under `hydra.callbacks`.
"""

from __future__ import annotations

import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict


class CheckEveryCell(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.global_hydra import GlobalHydra
        from hydra.types import RunMode

        from replaylab.cli.plan import grid
        from replaylab.config import ConfigError, to_object
        from replaylab.config_checks import check_training_run

        fixed, cells = grid(dict(config.hydra.sweeper.get("params") or {}), list(config.hydra.overrides.task))
        composer = GlobalHydra.instance().hydra
        for cell in cells:
            cfg = composer.compose_config(config.hydra.job.config_name, fixed + cell, run_mode=RunMode.RUN)
            with open_dict(cfg):
                del cfg["hydra"]  # a run's config, as the task function receives it (its job fields are unset here)
            try:
                check_training_run(to_object(cfg))
            except ConfigError as e:
                print(f"replaylab: invalid config: sweep cell {' '.join(cell) or '(the only one)'} of {len(cells)}: {e}; "
                      "no cell was run", file=sys.stderr)
                sys.exit(2)
