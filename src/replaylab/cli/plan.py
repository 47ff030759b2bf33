"""`python -m replaylab.plan +sweep=NAME [overrides]`: a dry listing of a sweep's grid.

Expands the experiment's `hydra.sweeper.params` exactly as Hydra's basic sweeper does (Cartesian
product, in order), composes every cell, and prints what it would run: strategy, model, teacher,
budget, data order, and the run directory (so finished cells can be spotted). Nothing is loaded.
"""

from __future__ import annotations

import itertools
import sys

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from replaylab.config import register_configs, to_object
from replaylab.paths import conf_dir
from replaylab.training.runs import is_done, run_dir


def expand(params: dict[str, str]) -> list[list[str]]:
    parser = OverridesParser.create()
    axes = []
    for key, value in params.items():
        override = parser.parse_override(f"{key}={value}")
        axes.append([f"{override.get_key_element()}={v}" for v in override.sweep_string_iterator()]
                    if override.is_sweep_override() else [f"{key}={value}"])
    return [list(cell) for cell in itertools.product(*axes)]


def plan(overrides: list[str]) -> list[dict]:
    register_configs()
    with initialize_config_dir(config_dir=conf_dir(), version_base=None):
        base = compose(config_name="config", overrides=overrides, return_hydra_config=True)
        params = dict(base.hydra.sweeper.params or {})
        cells = []
        for cell in expand(params):
            cfg = compose(config_name="config", overrides=overrides + cell)
            to_object(cfg)  # every cell passes the run's config checks, or the listing fails naming the key
            path = run_dir(cfg)
            cells.append({
                "strategy": cfg.strategy.name, "model": cfg.model.name_or_path,
                "teacher": cfg.teacher.name_or_path if cfg.trainer.kind == "opd" else "-",
                "budget": cfg.budget.name, "max_response_tokens": cfg.budget.max_response_tokens,
                "order": cfg.order, "updates": cfg.budget.max_updates, "done": is_done(path), "run_dir": str(path),
            })
    return cells


def main(argv: list[str] | None = None) -> int:
    cells = plan(list(sys.argv[1:] if argv is None else argv))
    for i, c in enumerate(cells):
        print(f"{i:3d}  {c['strategy']:15s} {c['model']:22s} {c['teacher']:22s} {c['budget']:10s} "
              f"{c['max_response_tokens']:6d} order={c['order']} updates={c['updates']} "
              f"{'done' if c['done'] else 'todo'}  {c['run_dir']}")
    print(f"{len(cells)} cells, {sum(c['done'] for c in cells)} done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
