"""Result rows as one pandas DataFrame, with each run's status, from run directories.

Tables and notebooks work on a single tidy frame (one metric value per row, the run's identity on
every row). On top of `rows.jsonl` this adds what the rows cannot say about themselves: whether
the run finished (`status`), so a table can mark a failed or still running run instead of
quietly averaging its last, earlier evaluation with finished ones. A run directory that has a
config but no rows yet (it failed before its first log) gets one placeholder row (split "") built
from its config, so it is still counted and marked.

The identity mapping from a resolved config is shared with the wandb loader, whose runs carry the
config rather than the rows' identity columns.
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from replaylab.results.rows import read_rows
from replaylab.storage import read_done_marker

if TYPE_CHECKING:
    import pandas as pd

# Identity columns of a training run's rows, and the config key each comes from (see train.py);
# a tuple lists alternatives, the first one present and non-empty wins (`order` was `order.index` in
# early configs; a strategy without a label is named by its registry name).
IDENTITY_FROM_CONFIG: dict[str, str | tuple[str, ...]] = {
    "experiment": "experiment",
    "strategy": ("strategy.label", "strategy.name"),  # a preset's label, else the strategy's name
    "trainer": "trainer.kind",
    "objective": "trainer.objective",
    "model": "model.name_or_path",
    "teacher": "teacher.name_or_path",
    "data": "data.name",
    "order": ("order", "order.index"),
    "budget": "budget.name",
    "max_response_tokens": "budget.max_response_tokens",
    "seed": "trainer.seed",
    "prompts_per_iteration": "trainer.prompts_per_iteration",
    "samples_per_prompt": "trainer.samples_per_prompt",
    "resample_period": "trainer.resample_period",
    "eval_tail": "eval.tail",  # evaluations averaged into the run's final value (results.aggregation.final_eval)
}
# `eval_setting` (eval_setting() of the eval config) is derived, not one key: accuracies measured with other
# decoding, samples, budget or problems do not compare, so tables split or refuse on it like any identity column
# `eval_data` and `train_data` are fingerprints of the benchmarks' problems and golds and of the run's training
# prompt stream (data order), which no config names (a data root, an edited file): results.provenance checks them
IDENTITY = ("run", "config_hash", *IDENTITY_FROM_CONFIG, "eval_setting", "eval_data", "train_data", "versions")
SPLITS = ("train", "eval", "strategy", "probe")
DONE, UNFINISHED = "done", "failed/running"
# Run directories are named `<trainer>-<strategy>-<hash>` (or `eval-<hash>`): 16 hex digits at the
# end tell them from other folders that hold a config.yaml (Hydra's .hydra/, wandb's files/).
RUN_DIR_NAME = re.compile(r"-[0-9a-f]{16}$")
EVALUATION_DIR_NAME = re.compile(r"^eval-[0-9a-f]{16}$")  # `python -m replaylab.evaluate`'s (cli/evaluate.py)
# What every written row says (RowWriter.write): whose it is, and where and what it measured.
ROW_KEYS = ("run", "split", "update", "metric", "value")


class NoRowsError(FileNotFoundError):
    """The source named holds no result rows (missing path, empty directory, empty export)."""


class BadRunDirectory(ValueError):
    """A run directory whose files cannot be read as one run's results: the message names the file and line
    or the directories (the commands' error path prints it and exits 2)."""


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> {"strategy.name": ..., ...}: the key style of the wandb UI and of --by."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def identity_from_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The rows' identity columns from a resolved config (nested or already flattened)."""
    flat = flatten(config)
    ident = {}
    for col, keys in IDENTITY_FROM_CONFIG.items():
        found = [flat[k] for k in ((keys,) if isinstance(keys, str) else keys)
                 if k in flat and not is_missing(flat[k]) and flat[k] != ""]
        ident[col] = found[0] if found else None
    if ident["trainer"] is not None and ident["trainer"] != "opd":
        ident["teacher"] = ""  # train.py records a teacher only for OPD runs
    evaluation = {k[len("eval."):]: v for k, v in flat.items() if k.startswith("eval.")}
    ident["eval_setting"] = eval_setting(evaluation) if evaluation else None
    return ident


def eval_setting(evaluation: Mapping[str, Any]) -> str:
    """What an evaluation measured, in the eval config's terms (config.EvalConfig): benchmarks, problems,
    decoding, samples per problem, response budget, the sampled pass beside it, instruction and thinking mode,
    e.g. `tiny8 greedy 64tok + sampled T=1 x4`. Two runs whose strings differ scored different things."""
    e = dict(evaluation)
    what = ",".join(map(str, e.get("benchmarks") or [])) or str(e.get("suite", ""))
    if e.get("max_problems"):
        what += f"[{e['max_problems']} problems]"
    temperature = float(e.get("temperature", 0.0))
    if temperature == 0:
        decoding = "greedy"
    else:
        decoding = f"T={temperature:g}"
        if float(e.get("top_p", 1.0)) < 1:
            decoding += f" top_p={float(e['top_p']):g}"
        if e.get("top_k"):
            decoding += f" top_k={e['top_k']}"
        decoding += f" x{e['samples']}" if e.get("samples") else " x(benchmark k)"
    text = f"{what} {decoding} {e.get('max_new_tokens')}tok"
    if e.get("sampled_k"):
        text += f" + sampled T={float(e.get('sampled_temperature', 1.0)):g} x{e['sampled_k']}"
    if e.get("instruction"):
        text += f" + instruction {hashlib.sha256(str(e['instruction']).encode()).hexdigest()[:8]}"
    if e.get("enable_thinking"):
        text += " + thinking"
    return text


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def placeholder_row(identity: Mapping[str, Any], status: str) -> dict[str, Any]:
    """The single row standing for a run that logged nothing, so tables still see (and mark) it."""
    return {**identity, "split": "", "update": math.nan, "iteration": math.nan, "benchmark": "",
            "metric": "", "value": math.nan, "n": math.nan, "status": status}


def run_status(run_dir: Path, rows: list[dict] | None = None) -> str:
    """`done` when the run wrote its done marker (an eval-only run: its summary.json) and its rows (`rows`, else
    read from its rows.jsonl) end at the update the marker names; else why it is not a finished run."""
    if (run_dir / "done.json").exists():
        if rows is None:
            rows = read_rows(run_dir / "rows.jsonl") if (run_dir / "rows.jsonl").exists() else []
        return rows_short_of_done(run_dir, rows) or DONE
    finished = run_dir.name.startswith("eval-") and (run_dir / "summary.json").exists()
    return DONE if finished else UNFINISHED


def rows_short_of_done(run_dir: Path, rows: list[dict]) -> str | None:
    """Why a run with a done marker is not finished, or None: a run evaluates at its final update before it
    writes the marker (training/trainer.py), so rows whose last evaluation is not at the marker's `update` (cut
    or relabelled afterwards) do not hold the run's final value. Markers without `update` (hand-written,
    older) and runs without eval rows are taken at their word."""
    final = read_done_marker(run_dir / "done.json").get("update")
    evaluated = [r["update"] for r in rows if r.get("split") == "eval" and isinstance(r.get("update"), (int, float))]
    if not isinstance(final, (int, float)) or isinstance(final, bool) or not evaluated or max(evaluated) == final:
        return None
    return (f"done.json says update {final:g}, but {run_dir / 'rows.jsonl'}'s last evaluation is at update "
            f"{max(evaluated):g} (rows changed after the run finished?): not a finished run")


def ended_by(run_dir: Path) -> str | None:
    """The budget that ended a finished training run (its done marker's `ended_by`, training/budget.py);
    None for unfinished runs, evaluation runs and markers written before the field existed."""
    marker = run_dir / "done.json"
    if not marker.exists():
        return None
    value = read_done_marker(marker).get("ended_by")
    return str(value) if value is not None else None


def find_run_dirs(root: Path) -> tuple[list[Path], list[Path]]:
    """(every run directory under `root`, or `root` itself: those with rows, and named ones with a config but
    no rows yet; `replaylab evaluate`'s directories beside training runs, left out of the first list). An
    evaluation (eval-<hash>/) has no strategy: among a sweep's runs it would be tabled as a phantom "n/a" one;
    a tree of evaluations alone is still read."""
    if (root / "rows.jsonl").exists() or ((root / "config.yaml").exists() and RUN_DIR_NAME.search(root.name)):
        return [root], []
    with_rows = {p.parent for p in root.rglob("rows.jsonl")}
    configured = {p.parent for p in root.rglob("config.yaml") if RUN_DIR_NAME.search(p.parent.name)}
    found = sorted(with_rows | configured)
    training = [d for d in found if not EVALUATION_DIR_NAME.match(d.name)]
    return (training, [d for d in found if d not in training]) if training else (found, [])


def _config_identity(run_dir: Path) -> dict[str, Any]:
    """Identity of a run that logged no rows, from its config.yaml (just its name if that is gone too)."""
    import yaml
    from omegaconf import OmegaConf

    hash_ = RUN_DIR_NAME.search(run_dir.name)
    ident = {"run": run_dir.name, "config_hash": hash_.group(0)[1:] if hash_ else ""}
    path = run_dir / "config.yaml"
    if path.exists():
        try:
            config = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            mark = getattr(e, "problem_mark", None)  # a parser's or scanner's error knows its line
            where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
            why = (" ".join(filter(None, (getattr(e, "context", None), getattr(e, "problem", None))))
                   or " ".join(str(e).split()))
            raise BadRunDirectory(f"{where}: not readable YAML ({why}); it is the config of a run that "
                                  "logged no rows, read to name it in the tables: repair it or move the run out") from e
        if not isinstance(config, dict):
            raise BadRunDirectory(f"{path}: a YAML {type(config).__name__}, not a mapping of config keys")
        ident.update(identity_from_config(config))
    return ident


def read_run_rows(run_dir: Path, read_from: dict[str, Path]) -> list[dict]:
    """A run directory's rows, each carrying the row keys and the identity columns its first row has, all of
    one run, and of no run whose rows `read_from` (run -> directory) already came from, else BadRunDirectory
    naming the file and line or both directories. Tables merge rows by their `run`, so a stray row or a
    copied directory would otherwise change a run's numbers silently."""
    path = run_dir / "rows.jsonl"
    rows = read_rows(path) if path.exists() else []
    first = rows[0] if rows else {"run": run_dir.name}
    identity = [c for c in IDENTITY if c in first and c not in ROW_KEYS]
    # train.py and evaluate name a run after its directory; rows named otherwise (written by hand, imported)
    # are held to one run per directory, as is a renamed copy (RUN.bak), which the check of `read_from` catches
    run = (run_dir.name if RUN_DIR_NAME.search(run_dir.name) and RUN_DIR_NAME.search(str(first.get("run")))
           else first.get("run"))
    for line, row in enumerate(rows, 1):
        missing = [c for c in ROW_KEYS if c not in row]
        if missing:
            raise BadRunDirectory(f"{path}:{line}: a row without {', '.join(missing)}, which every row carries: not a "
                                  "row a run wrote")
        missing = [c for c in identity if c not in row]
        if missing:
            raise BadRunDirectory(f"{path}:{line}: a row without the identity column(s) {', '.join(missing)} that "
                                  "the run's first row carries: not a row this run wrote")
        if not isinstance(row["run"], str):
            raise BadRunDirectory(f"{path}:{line}: `run` is {row['run']!r}, not a run's name")
        if row["run"] != run:
            raise BadRunDirectory(f"{path}:{line}: a row of run {row['run']!r} among the rows of run {run!r} "
                                  f"({run_dir}): a run's rows name their run directory; rows of another run appended "
                                  "or copied here?")
    if run in read_from:
        raise BadRunDirectory(f"{read_from[run]} and {run_dir} both hold rows of run {run!r}: a copy of the run "
                              "directory (a backup, an older attempt)? Move all but one out of the experiment")
    read_from[run] = run_dir
    return rows


def load_experiment(path: str | Path) -> pd.DataFrame:
    """All rows of every run under `path` as one DataFrame with `status` and `run_dir` columns; `attrs`
    ["evaluations_left_out"] lists the evaluation directories beside its training runs (find_run_dirs)."""
    root = Path(path)
    if not root.exists():
        raise NoRowsError(f"{root}: no such file or directory; no rows found")
    left_out: list[Path] = []
    if root.is_file():
        rows = read_rows(root)
        records = [{**r, "status": run_status(root.parent, rows)} for r in rows]
    else:
        records, read_from = [], {}
        run_dirs, left_out = find_run_dirs(root)
        for run_dir in run_dirs:
            rows = read_run_rows(run_dir, read_from)
            status = run_status(run_dir, rows)
            if not rows:
                rows = [placeholder_row(_config_identity(run_dir), status)]
            extra = {"status": status, "run_dir": str(run_dir), "ended_by": ended_by(run_dir) if status == DONE else None}
            records += [{**r, **extra} for r in rows]
    if not records:
        raise NoRowsError(f"{root}: no rows found (no rows.jsonl or run directory under it)")
    df = tidy_frame(records)
    df.attrs["evaluations_left_out"] = [str(d) for d in left_out]
    return df


def tidy_frame(records: list[dict]) -> pd.DataFrame:
    """Records -> DataFrame with every identity and row column present (missing ones as NA)."""
    import pandas as pd

    df = pd.DataFrame.from_records(records)
    for col in (*IDENTITY, "split", "update", "iteration", "benchmark", "metric", "value", "n", "status", "ended_by"):
        if col not in df.columns:
            df[col] = pd.NA if col != "value" else math.nan
    df["status"] = df["status"].fillna(DONE)
    df["eval_tail"] = df["eval_tail"].fillna(1)  # rows written before the column existed: the final evaluation only
    for col in ("update", "iteration", "value", "n"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    return df
