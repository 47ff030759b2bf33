"""`python -m replaylab.plan +sweep=NAME [overrides]`: a dry listing of a sweep's grid.

Expands the grid as Hydra's basic sweeper does for `python -m replaylab.train -m +sweep=NAME ...`:
the experiment's `hydra.sweeper.params`, where a command-line override of the same key replaces that
axis and a comma list on the command line (`trainer.lr=1e-4,3e-4`) adds one; the Cartesian product in
order. Every cell is composed and checked like a run (a wrong pair fails here, naming the key, and no
run directory is created), then listed: strategy label, model, teacher, budget, data order, updates,
whether it is done, and its run directory. Nothing is loaded.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from replaylab.config import ConfigError, register_configs, to_object
from replaylab.config_checks import check_training_run
from replaylab.paths import conf_dir
from replaylab.training.runs import is_done, run_dir

USAGE = """usage: python -m replaylab.plan +sweep=NAME [KEY=VALUE ...] [KEY=V1,V2 ...]

List the cells `python -m replaylab.train -m +sweep=NAME ...` would run, without running them.
An override of a sweep axis (e.g. strategy=repo, order=0) replaces that axis; a comma list adds an
axis; any other override applies to every cell. Sweeps: the files in experiments/ (conf/sweep)."""
COLUMNS = ("#", "strategy", "model", "teacher", "budget", "tokens", "order", "updates", "status", "run directory")


def axis(override) -> list[str]:
    key = override.get_key_element()
    if override.is_sweep_override():
        return [f"{key}={v}" for v in override.sweep_string_iterator()]
    return [override.input_line]


def grid(sweep_params: dict[str, str], overrides: list[str]) -> tuple[list[str], list[list[str]]]:
    """(fixed overrides, cells): command-line axes replace the sweep file's axes of the same key."""
    parser = OverridesParser.create()
    axes: dict[str, list[str]] = {}
    for key, value in sweep_params.items():
        axes[key] = axis(parser.parse_override(f"{key}={value}"))
    fixed = []
    for text in overrides:
        o = parser.parse_override(text)
        key = o.get_key_element()
        if key in axes or o.is_sweep_override():
            axes[key] = axis(o)
        else:
            fixed.append(text)
    return fixed, [list(cell) for cell in itertools.product(*axes.values())]


def plan(overrides: list[str]) -> list[dict]:
    register_configs()
    with initialize_config_dir(config_dir=conf_dir(), version_base=None):
        parser = OverridesParser.create()
        plain = [o for o in overrides if not parser.parse_override(o).is_sweep_override()]
        base = compose(config_name="config", overrides=plain, return_hydra_config=True)
        fixed, cells_overrides = grid(dict(base.hydra.sweeper.params or {}), overrides)
        # cells the launcher runs at once (joblib's n_jobs; -1: one per core; a cluster's array: assume all)
        jobs = base.hydra.launcher.get("n_jobs") or base.hydra.launcher.get("array_parallelism") or 1
        jobs = os.cpu_count() or 1 if jobs == -1 else int(jobs)
        cells = []
        for cell in cells_overrides:
            cfg = compose(config_name="config", overrides=fixed + cell)
            try:
                obj = to_object(cfg)  # every cell passes the run's config checks, or the listing fails naming the key
                check_training_run(obj)
            except ConfigError as e:
                raise ConfigError(f"cell {' '.join(cell)}: {e}") from e
            path = run_dir(cfg)
            cells.append({"identity": cell_identity(cfg),
                "strategy": cfg.strategy.get("label") or cfg.strategy.name, "model": cfg.model.name_or_path,
                "teacher": cfg.teacher.name_or_path if cfg.trainer.kind == "opd" else "-",
                "budget": cfg.budget.name, "max_response_tokens": cfg.budget.max_response_tokens,
                "order": cfg.order, "updates": cfg.budget.max_updates, "compute": cfg.budget.max_compute,
                "done": is_done(path), "run_dir": str(path),
                "branch": branch_facts(cfg, obj, path), "jobs": jobs,
            })
    assign_donors(cells)
    return cells


def branch_facts(cfg, obj, path: Path) -> dict:
    """What the plan needs to tell where a cell may start from (training/branch.py): its siblings' key,
    its current prefix, whether it may start from another run, and the checkpoints it leaves."""
    from omegaconf import OmegaConf

    from replaylab.training.branch import sibling_key, strategy_prefix
    from replaylab.training.runs import checkpoint_updates

    from replaylab.replay.base import STRATEGIES

    prefix, keeps_state = strategy_prefix(OmegaConf.to_container(cfg.strategy, resolve=True))
    measured = obj.branch is not False and STRATEGIES[obj.strategy.name].measured_prefix()
    t = obj.trainer
    written = checkpoint_updates(t.checkpoint_every, t.updates_per_iteration, obj.budget.max_updates)
    return {"key": sibling_key(cfg), "prefix": prefix, "root": str(path.parent), "strategy_name": obj.strategy.name,
            "may_branch": prefix > 0 and not keeps_state and obj.branch is not False and t.distributed == "none",
            "kept": written[-t.keep_checkpoints:],  # prune_checkpoints keeps the newest keep_checkpoints
            "measured": measured}


def assign_donors(cells: list[dict]) -> None:
    """For each cell that may branch: the earlier plan cell, or run on disk beside the plan, whose
    checkpoint it would start from, and at which update. Ranked as `branch.ranked` ranks: the latest
    update, then a current run, then the earliest cell."""
    from replaylab.training.branch import donor_checkpoints, prefix_runs

    index = {c["run_dir"]: i for i, c in enumerate(cells)}
    on_disk: dict[str, list] = {}  # each experiment directory's configs, loaded once
    for i, c in enumerate(cells):
        b = c["branch"]
        if not b["may_branch"] or c["done"]:
            continue
        options = []  # (-update, not current, order, donor, first updates both train alike)
        siblings = [j for j, d in enumerate(cells) if j != i and d["branch"]["key"] == b["key"] and d["branch"]["prefix"] > 0]
        b["later"] = [j for j in siblings if j > i and cells[j]["branch"]["may_branch"]]
        for j in siblings:
            d = cells[j]
            if j > i and not d["done"]:
                continue  # cells earlier in the sweep run (or start) first
            within = min(b["prefix"], d["branch"]["prefix"])
            if d["done"]:
                ups = [u for u, _ in donor_checkpoints(Path(d["run_dir"]), within)]
            else:  # a donor that itself starts at update u writes no checkpoint up to u
                ups = [u for u in d["branch"]["kept"] if d["branch"].get("update", 0) < u <= within]
            options.append((-(ups[-1] if ups else 0), d["branch"]["strategy_name"] != "current", j, j, within))
        if b["root"] not in on_disk:
            on_disk[b["root"]] = prefix_runs(Path(b["root"]))
        for key, sib in on_disk[b["root"]]:  # runs beside the plan's cells that are no cell of it
            if key == b["key"] and str(sib.run) not in index:
                within = min(b["prefix"], sib.prefix)
                ups = [u for u, _ in donor_checkpoints(sib.run, within)]
                options.append((-(ups[-1] if ups else 0), sib.strategy != "current", len(cells), str(sib.run), within))
        best = min(options, default=None)
        b["donor"], b["update"], b["within"] = (None, 0, 0) if best is None else (best[3], -best[0], best[4])


def report_branches(cells: list[dict], jobs: int) -> None:
    """One line per cell still to run that may branch: from which cell and update, or why it will not."""
    for i, c in enumerate(cells):
        b = c["branch"]
        if b.get("measured") and not c["done"]:
            print(f"branch: cell #{i} ({c['strategy']}) starts from the latest checkpoint of a run of its config under "
                  "current, fixed_schedule or recent where its trigger, following that run's gradient readings, has not "
                  "yet switched (decided when it starts), else from update 0")
        if not b["may_branch"] or c["done"]:
            continue
        head, j = f"branch: cell #{i} ({c['strategy']})", b.get("donor")
        donor = f"cell #{j} ({cells[j]['strategy']})" if isinstance(j, int) else j
        if j is None and b["later"]:
            print(f"{head} trains from update 0: the first of its siblings in the sweep (cells "
                  f"{', '.join(f'#{k}' for k in b['later'])} may start from it)")
        elif j is None and b["prefix"] < c["updates"]:  # (a whole-run current prefix alone is the plain case)
            print(f"{head} trains from update 0: no run of its config under another strategy with a current-policy "
                  "prefix (current, fixed_schedule, recent) is planned or done")
        elif j is None:
            continue
        elif not b["update"]:
            print(f"{head} trains from update 0: no run it could start from keeps a checkpoint within the first "
                  f"{b['within']} updates (trainer.checkpoint_every, trainer.keep_checkpoints)")
        elif isinstance(j, int) and i - j < jobs and not cells[j]["done"]:
            print(f"{head} may start while its donor, {donor}, runs ({jobs} cells at once): it starts from the "
                  f"donor's last checkpoint at or before update {b['update']} written by then, or from update 0")
        else:
            print(f"{head} starts from {donor} at update {b['update']} (once the donor has written it; else from "
                  "an earlier checkpoint or update 0)")


def cell_identity(config) -> tuple:
    """What makes two runs the same cell of a table: the identity columns their rows carry
    (`results.frame.IDENTITY_FROM_CONFIG`: strategy, budget, order, seed, batch shape, eval tail, ...),
    by which tables and claims group and pair runs."""
    from omegaconf import OmegaConf

    from replaylab.results.frame import identity_from_config

    container = OmegaConf.to_container(config, resolve=True) if OmegaConf.is_config(config) else config
    return tuple(sorted((k, str(v)) for k, v in identity_from_config(container).items()))


def strangers(cells: list[dict]) -> list[tuple[str, int | None]]:
    """Run directories beside the plan's cells (in their experiment directories) that are no cell of
    this plan, each with the index of the plan cell whose identity it has under another config hash,
    or None (another sweep of the same experiment, e.g. an extension)."""
    from omegaconf import OmegaConf

    mine = {c["run_dir"] for c in cells}
    by_identity: dict[tuple, int] = {}
    for i, c in enumerate(cells):
        by_identity.setdefault(c["identity"], i)
    out = []
    for root in sorted({str(Path(c["run_dir"]).parent) for c in cells}):
        for path in sorted(Path(root).glob("*-*")) if Path(root).is_dir() else []:
            if str(path) in mine or not (path / "config.yaml").is_file():
                continue
            try:
                twin = by_identity.get(cell_identity(OmegaConf.load(path / "config.yaml")))
            except Exception:  # an unreadable or foreign config is no cell of this plan
                twin = None
            out.append((str(path), twin))
    return out


def report_strangers(cells: list[dict]) -> None:
    others = strangers(cells)
    for path, i in others:
        if i is None:
            continue
        if Path(cells[i]["run_dir"]).is_dir():
            print(f"stale: {path} is cell #{i} under another config hash, beside the cell's own run directory "
                  "(an older commit's or config's run): tables and claims over this directory would meet both: move it out")
        else:
            print(f"elsewhere: {path} is cell #{i} under another config hash: this plan's overrides differ from that "
                  "run's (launcher=parallel, for one, sets trainer.threads=1), or it is an older commit's run; "
                  "running this plan would add the cell beside it")
    rest = sum(i is None for _, i in others)
    if rest:
        print(f"{rest} other run directories beside these cells belong to no cell of this plan "
              "(another sweep of the same experiment, e.g. an extension)")


def main(argv: list[str] | None = None) -> int:
    from tabulate import tabulate

    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(USAGE)
        return 0
    flags = [a for a in args if a.startswith("-")]  # Hydra's (-m, --cfg job, ...): plan lists every cell without them
    if flags:
        print(f"replaylab plan: {' '.join(flags)}: not an option of plan (it takes Hydra overrides only and always lists "
              f"the whole grid, as `-m` would run it)\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        cells = plan(args)
    except ConfigError as e:
        print(f"replaylab plan: invalid config: {e}", file=sys.stderr)
        return 2
    # a compute-matched cell ends on its FLOPs; its update budget is only a cap
    rows = [[i, c["strategy"], c["model"], c["teacher"], c["budget"], c["max_response_tokens"], c["order"],
             f"<= {c['updates']} ({c['compute']:.2g} FLOPs)" if c.get("compute") else c["updates"],
             "done" if c["done"] else "todo", c["run_dir"]] for i, c in enumerate(cells)]
    print(tabulate(rows, headers=COLUMNS, tablefmt="plain", disable_numparse=True))
    print(f"{len(cells)} cells, {sum(c['done'] for c in cells)} done")
    report_strangers(cells)
    report_branches(cells, cells[0]["jobs"] if cells else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
