"""Result rows from wandb, in the same DataFrame shape as local rows, so the same tables follow.

The local rows are the source of truth, but a sweep on a cluster is often looked at from wandb.
The mirror (`wandb_mirror.py`) logs each row as `f"{split}/{benchmark}/{metric}"` (benchmark
omitted when empty) at step = update, with the resolved config as run config and the run
directory's name as run name. Read back:

* `rows_from_wandb_runs(runs)`: run-like objects (`wandb.Api().runs(path)` or fakes with
  `.name`, `.id`, `.state`, `.config` and `.scan_history()` / `.history()`), every logged step;
* `load_wandb_csv(path)`: the web UI's runs-table CSV export (config columns such as
  `strategy.name`, summary columns such as `eval/tiny8/mean/avg@k` and `ledger/trajectories`),
  final values only.

The mirror also logs the budget ledger as `ledger/<counter>` at each step; the history readers give
every row of a step that step's ledger (`ledger_<counter>` columns, as in local rows). What wandb
does not have stays missing (NaN) rather than guessed: the iteration and `n`; a CSV export holds the
final ledger only, which is the ledger of a run's final evaluation (the last rows a run writes). `wandb-offline:DIR` reads offline runs (`wandb_offline.py`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import pandas as pd

from replaylab.results.frame import (DONE, SPLITS, UNFINISHED, NoRowsError, flatten, identity_from_config,
                                     is_missing, placeholder_row, tidy_frame)

# Columns of the web UI export that describe the run rather than its config or summary.
UI_NAME, UI_STATE, UI_ID, UI_STEP = ("name",), ("state",), ("id", "run id"), ("_step",)
ID = re.compile(r"([0-9a-f]{16})(?:-[0-9a-f]{12})?")  # the mirror's run id: config hash, code digest


def parse_key(key: str) -> tuple[str, str, str] | None:
    """`eval/tiny8/add2/avg@k` -> ("eval", "tiny8/add2", "avg@k"); None for keys the mirror did not write."""
    parts = key.split("/")
    if len(parts) < 2 or parts[0] not in SPLITS:
        return None
    return parts[0], "/".join(parts[1:-1]), parts[-1]


def _row(identity: Mapping[str, Any], key: str, value: Any, step: Any, status: str) -> dict | None:
    parsed = parse_key(key)
    if parsed is None or is_missing(value) or isinstance(value, (str, dict, list)):
        return None
    split, benchmark, metric = parsed
    update = math.nan if is_missing(step) else int(step)
    return {**identity, "split": split, "update": update, "iteration": math.nan, "benchmark": benchmark,
            "metric": metric, "value": float(value), "n": math.nan, "ledger_updates": update, "status": status}


def _history(run: Any) -> Iterator[Mapping[str, Any]]:
    """Every logged step: `scan_history()` when the object has it, because `history()` samples
    (500 steps by default) and may skip the final evaluation; else `history()` records."""
    if hasattr(run, "scan_history"):
        yield from run.scan_history()
        return
    hist = run.history(samples=1_000_000, pandas=False)
    yield from (hist.to_dict("records") if isinstance(hist, pd.DataFrame) else hist)


def _status(state: Any) -> str:
    return DONE if str(state).lower() == "finished" else UNFINISHED


def run_identity(run_id: Any, name: Any, config: Mapping[str, Any]) -> tuple[Any, Any]:
    """(run, config_hash) of a wandb run: the mirror's id is `<config hash>-<code digest>` (wandb_mirror), so the
    run is named as its local run directory, `<trainer>-<strategy label or name>-<config hash>` (training.runs.
    run_dir). The display name (strategy, order, seed, budget) is not unique: cells of a sweep that differ in
    anything else (a pairing, budget axes) share it. An id of another shape keeps the display name."""
    match = ID.fullmatch(str(run_id)) if not is_missing(run_id) else None
    if match is None:
        return name, run_id
    flat = flatten(config)
    label = next((flat[k] for k in ("strategy.label", "strategy.name") if not is_missing(flat.get(k)) and flat.get(k) != ""), None)
    kind = flat.get("trainer.kind")
    if is_missing(kind) or label is None:
        return name, match.group(1)
    return f"{kind}-{label}-{match.group(1)}", match.group(1)


def _ended_by(run: Any) -> Any:
    summary = getattr(run, "summary", None) or {}
    value = summary.get("ended_by") if hasattr(summary, "get") else None
    return value if isinstance(value, str) else pd.NA


def rows_from_wandb_runs(runs: Iterable[Any]) -> pd.DataFrame:
    """Rows of public-API runs (or run-like objects): identity from `run.config`, values from history, how the
    run ended from its summary (`ended_by`, written by the mirror at a run's end). Several wandb runs of one
    local run (a run resumed after a code change gets a new wandb id) are one run: a step logged by both
    reads the finished one's values, and the run is done when one of them finished."""
    runs = sorted(runs, key=lambda run: _status(getattr(run, "state", "")) == DONE)  # finished ones last: they win
    records = []
    for run in runs:
        config = dict(run.config)
        name, config_hash = run_identity(run.id, run.name, config)
        identity = {"run": name, "config_hash": config_hash, **identity_from_config(config)}
        status = _status(getattr(run, "state", ""))
        extra = {"ended_by": _ended_by(run)}
        rows = []
        for step in _history(run):
            ledger = {f"ledger_{k[len('ledger/'):]}": v for k, v in step.items() if k.startswith("ledger/")}
            rows += [{**r, **ledger, **extra} for key, value in step.items()
                     if (r := _row(identity, key, value, step.get("_step"), status))]
        records += rows or [{**placeholder_row(identity, status), **extra}]
    if not records:
        raise NoRowsError("wandb: no runs found; no rows found")
    frame = tidy_frame(records)
    return _one_status_per_run(frame.drop_duplicates(["run", "split", "update", "benchmark", "metric"], keep="last"))


def _one_status_per_run(frame: pd.DataFrame) -> pd.DataFrame:
    """A run is done (and ended as it says) when any of its wandb runs finished."""
    finished = frame[frame["status"] == DONE].drop_duplicates("run", keep="last").set_index("run")
    if finished.empty:
        return frame.reset_index(drop=True)
    done = frame["run"].isin(finished.index)
    frame.loc[done, "status"] = DONE
    frame.loc[done, "ended_by"] = frame.loc[done, "run"].map(finished["ended_by"])
    return frame.reset_index(drop=True)


def _ui_column(columns: Iterable[str], names: tuple[str, ...]) -> str | None:
    return next((c for c in columns if c.strip().lower() in names), None)


def rows_from_wandb_csv(frame: pd.DataFrame, source: str = "wandb export") -> pd.DataFrame:
    """Rows of a runs-table export: one row per run, config as dotted columns, summary metrics as
    `split/benchmark/metric` columns; the update is `_step` when exported (else unknown)."""
    name, state, id_, step = (_ui_column(frame.columns, n) for n in (UI_NAME, UI_STATE, UI_ID, UI_STEP))
    if name is None:
        raise ValueError(f"{source}: no Name column; is this the runs-table CSV export? columns: {list(frame.columns)}")
    metric_cols = [c for c in frame.columns if parse_key(c)]
    ledger_cols = [c for c in frame.columns if str(c).startswith("ledger/")]
    records = []
    for _, line in frame.iterrows():
        config = {k: v for k, v in line.items() if k not in metric_cols and k not in ledger_cols and not is_missing(v)}
        ledger = {f"ledger_{c[len('ledger/'):]}": line[c] for c in ledger_cols if not is_missing(line[c])}
        run, config_hash = run_identity(line[id_] if id_ else pd.NA, line[name], config)
        identity = {"run": run, "config_hash": config_hash, **identity_from_config(config)}
        extra = {"ended_by": line["ended_by"] if isinstance(line.get("ended_by"), str) else pd.NA}  # from the summary
        for key in ("order", "seed", "max_response_tokens", "prompts_per_iteration", "samples_per_prompt", "resample_period", "eval_tail"):
            if isinstance(identity[key], float) and identity[key].is_integer():
                identity[key] = int(identity[key])  # CSV columns with a gap read back as floats
        status = _status(line[state]) if state else DONE
        rows = [{**r, **ledger, **extra} for c in metric_cols
                if (r := _row(identity, c, line[c], line[step] if step else None, status))]
        records += rows or [{**placeholder_row(identity, status), **extra}]
    if not records:
        raise NoRowsError(f"{source}: no rows found (the export has no runs)")
    tailed = next((r for r in records if (r.get("eval_tail") or 1) > 1), None)
    if tailed is not None:  # the export's one value per metric cannot give the mean over a run's last evaluations
        raise ValueError(f"{source}: run {tailed['run']} ends with eval.tail={tailed['eval_tail']} evaluations whose mean "
                         "is its final value, but a runs-table export holds only its last one: read the runs with "
                         "wandb:ENTITY/PROJECT, wandb-offline:DIR or from their run directories")
    return tidy_frame(records)


def load_wandb_csv(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    if not path.exists():
        raise NoRowsError(f"{path}: no such file; no rows found")
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError as e:
        raise NoRowsError(f"{path}: an empty CSV file ({e}); no rows found") from e
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a readable CSV file ({' '.join(str(e).split())}); is this the runs-table CSV "
                         "export of the wandb web UI?") from e
    return rows_from_wandb_csv(frame, str(path))


def load_wandb_offline(root: str | Path) -> pd.DataFrame:
    """Offline runs under `root` (their transaction logs; see wandb_offline.py)."""
    from replaylab.results.wandb_offline import offline_runs

    runs = offline_runs(root)
    if not runs:
        raise NoRowsError(f"{root}: no wandb offline runs (wandb/offline-run-*/run-*.wandb) found; no rows found")
    return rows_from_wandb_runs(runs)


def load_wandb_api(project_path: str, filters: dict | None = None) -> pd.DataFrame:
    """`ENTITY/PROJECT` through `wandb.Api()` (needs network and a login)."""
    import wandb

    return rows_from_wandb_runs(wandb.Api().runs(project_path, filters=filters))

