"""From tidy result rows to a comparison table: one cell per (block, row keys, benchmark, metric),
mean +- 95% t-interval over replicates, with the matched-budget ledger and missing cells marked."""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from replaylab.results.frame import DONE, NoRowsError
from replaylab.results.provenance import run_notes
from replaylab.results.statistics import t_interval

if TYPE_CHECKING:  # the replaylab CLI imports this module for every subcommand: pandas only when used
    import pandas as pd

# Identity columns that may become row keys when they vary (so different configs never get
# averaged as if they were data orders); `order` and `seed` are what a cell aggregates over.
ROW_CANDIDATES = ("experiment", "trainer", "objective", "model", "teacher", "data", "max_response_tokens",
                  "prompts_per_iteration", "samples_per_prompt", "resample_period", "eval_tail", "eval_setting",
                  "eval_data")
NOT_IDENTITY = {"run", "config_hash", "versions", "status", "run_dir", "ended_by", "order", "seed"}
ACCURACY = {"avg@k", "pass@k", "pass@1", "ci_low", "ci_high", "se", "truncation_rate", "accuracy"}
LEDGER = {"updates": "ledger_updates", "trajectories": "ledger_trajectories", "teacher_tokens": "ledger_teacher_tokens_scored",
          "compute": "ledger_flops_total"}  # compute: estimated FLOPs (training.compute)


SAMPLED_PREFIX = "sampled_"  # the metrics of eval.sampled_k's evaluation beside the main one: sampled_avg@k, sampled_se, ...


def is_accuracy(metric: str) -> bool:
    return metric.removeprefix(SAMPLED_PREFIX) in ACCURACY or "@" in metric


# Accuracy-scaled metrics with no known direction under learning: a standard error, or the share of
# responses cut at the budget (longer reasoning raises it, learning to stop lowers it).
NO_DIRECTION = {"se", "truncation_rate"}


def rises_with_learning(metric: str) -> bool:
    """Whether learning is known to raise the metric (accuracy and its interval bounds)."""
    return is_accuracy(metric) and metric.removeprefix(SAMPLED_PREFIX) not in NO_DIRECTION


def is_suite_mean(benchmark: str) -> bool:
    return benchmark == "mean" or str(benchmark).endswith("/mean")


def order_benchmarks(names: Iterable[str]) -> list[str]:
    """Benchmarks sorted by name, suite means last (they are the summary column)."""
    return sorted(set(names), key=lambda b: (is_suite_mean(b), b))


def _sort_key(values: tuple) -> tuple:
    """Numbers before text and in numeric order (8 before 16), whatever their numpy type."""
    return tuple((0, v, "") if isinstance(v, numbers.Real) and not isinstance(v, bool) else (1, 0, str(v)) for v in values)


def run_index(df: pd.DataFrame) -> pd.DataFrame:
    """One row per run: its identity columns and status (the first row of each run)."""
    runs = df.drop_duplicates("run", keep="first").set_index("run", drop=False)
    keep = [c for c in runs.columns if c not in {"split", "update", "iteration", "benchmark", "metric", "value", "n"}
            and not c.startswith("ledger_")]
    return runs[keep]


def default_by(runs: pd.DataFrame, block: str | None) -> list[str]:
    """`strategy`, plus every identity column that still varies inside a (block, row) group."""
    by = ["strategy"]
    for col in ROW_CANDIDATES:
        if col not in runs.columns or col == block:
            continue
        keys = ([block] if block else []) + by
        if runs.fillna({k: "" for k in keys}).groupby(keys, dropna=False)[col].nunique(dropna=False).max() > 1:
            by.append(col)
    return by


def by_configuration(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with each run's `strategy` relabelled by every other identity column that varies inside a budget
    block (`default_by`), e.g. "current (prompts_per_iteration=64)": figures draw a line per label, so runs of
    different configurations are separate lines, as they are separate table rows, not data orders of one."""
    if df.empty or "strategy" not in df.columns:
        return df
    runs = run_index(df)
    extra = [c for c in default_by(runs, "budget" if "budget" in runs.columns else None) if c != "strategy"]
    if not extra:
        return df
    labels = runs["strategy"].astype(str) + " (" + runs[extra].astype(str).apply(
        lambda r: ", ".join(f"{c}={v}" for c, v in r.items()), axis=1) + ")"
    return df.assign(strategy=df["run"].map(labels))


def final_eval(ev: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """Each run's final value of every (benchmark, metric) in eval rows `ev`: its last evaluation, or,
    for a run that ended with `eval_tail` = N > 1 evaluations (config eval.tail), the mean over its last N,
    given as the row of its final update with the mean as value. Returns (rows, {run: why left out}) for
    runs with a (benchmark, metric) measured fewer times in that window than their tail asks for."""
    import pandas as pd

    if ev.empty:
        return ev, {}
    tail = (pd.to_numeric(ev["eval_tail"], errors="coerce").fillna(1).astype(int) if "eval_tail" in ev.columns
            else pd.Series(1, index=ev.index))
    per_run = tail.groupby(ev["run"]).max()
    if per_run.nunique() > 1:  # a tail mean beside a single final point would not be a like-for-like comparison
        a, b = per_run.drop_duplicates().index[:2]
        raise ValueError(f"runs end with different numbers of averaged evaluations: {a} eval_tail={per_run[a]}, {b} "
                         f"eval_tail={per_run[b]}; compare runs of one eval.tail (filter the rows first)")
    depth = ev.groupby("run")["update"].rank(method="dense", ascending=False)  # 1 = the run's final update
    window = ev[depth <= tail]
    if (tail == 1).all():
        return window, {}
    cell = ["run", "benchmark", "metric"]
    # one value per (run, update, benchmark, metric): a resumed run may have written an evaluation twice
    window = window.drop_duplicates([*cell, "update"], keep="last")
    window = window[window["value"].notna()]
    count = window.groupby(cell, dropna=False)["update"].transform("nunique")
    gaps = window[count < tail[window.index]]
    short = {run: (f"{part['benchmark'].iloc[0]} {part['metric'].iloc[0]}: {int(count[part.index[0]])} evaluation(s) "
                   f"in its last {int(per_run[run])}, but eval_tail={int(per_run[run])} averages that many")
             for run, part in gaps.groupby("run")}
    short.update(_odd_windows(window[~window["run"].isin(set(short))]))
    window = window[~window["run"].isin(set(short))]
    mean = window.groupby(cell, dropna=False)["value"].transform("mean")
    window = window.assign(value=mean)
    return window[window["update"] == window.groupby("run")["update"].transform("max")], short


def _odd_windows(window: pd.DataFrame) -> dict[str, str]:
    """Runs whose tail window lies at other updates than that of most runs ending at the same update:
    a tail evaluation missing from a run's rows altogether lets an earlier one slip into its last N."""
    spans = window.groupby("run")["update"].agg(lambda u: tuple(sorted(set(u))))
    odd = {}
    for _, group in spans.groupby(spans.map(lambda t: t[-1])):
        common = group.value_counts().idxmax()
        odd.update({run: f"its last {len(span)} evaluations are at updates {list(span)}, most runs' at {list(common)} "
                         "(an evaluation missing from its rows)" for run, span in group.items() if span != common})
    return odd


def _select_eval(df: pd.DataFrame, runs: pd.DataFrame, update: str | int) -> tuple[pd.DataFrame, dict[str, str]]:
    """Each run's eval rows at the chosen update, and a remark per run that is left out (or, at a
    fixed update, included although unfinished)."""
    ev = df[df["split"] == "eval"]
    excluded: dict[str, str] = {}
    if update == "final":
        last = ev.groupby("run")["update"].max()
        finished = runs.index[runs["status"] == DONE]
        chosen, excluded = final_eval(ev[ev["run"].isin(finished)])
        for run in runs.index:
            if runs.at[run, "status"] != DONE:
                excluded[run] = runs.at[run, "status"]
            elif run not in last.index:
                excluded[run] = "no eval rows"
    else:
        chosen = ev[ev["update"] == int(update)]
        reached = set(chosen["run"])
        for run in runs.index:
            status = runs.at[run, "status"]
            if run not in reached:
                excluded[run] = f"no eval at update {update}" + ("" if status == DONE else f" ({status})")
            elif status != DONE:
                excluded[run] = f"{status}, included (it reached update {update})"
    return chosen, excluded


def _check_replicates(runs: pd.DataFrame, keys: list[str]) -> None:
    """Two runs with the same row keys and data order are different configs: refuse to average them."""
    for _, group in runs.groupby(keys + ["order"], dropna=False):
        if len(group) > 1:
            a, b = group.iloc[0], group.iloc[1]
            diff = identity_difference(a, b, [c for c in runs.columns if c not in keys])
            if "seed" in runs.columns and str(a["seed"]) != str(b["seed"]):
                diff.append("seed")
            if not diff:
                raise ValueError(stale_twin(a, b))
            raise ValueError(f"runs {a['run']} and {b['run']} share row keys {dict(zip(keys, (a[k] for k in keys)))} "
                             f"and order {a['order']}: they differ in {diff}; add the varying column to --by instead "
                             "of averaging different configs as data orders")


def identity_difference(a: pd.Series, b: pd.Series, columns) -> list[str]:
    """The identity columns (of `columns`) in which two runs' index rows differ."""
    import pandas as pd

    return [c for c in columns if c not in NOT_IDENTITY
            and (pd.isna(a[c]) != pd.isna(b[c]) or (not pd.isna(a[c]) and a[c] != b[c]))]


def stale_twin(a: pd.Series, b: pd.Series) -> str:
    """Why two runs with one identity but different config hashes cannot both be read, and what to do."""
    return (f"runs {a['run']} (config {a.get('config_hash')}) and {b['run']} (config {b.get('config_hash')}) are the "
            f"same cell under two config hashes, of versions {a.get('versions')!r} and {b.get('versions')!r} (a run of "
            "an older commit or config left beside the new one): move the stale one out "
            "(`python -m replaylab.plan +sweep=NAME` names every such run)")


def _ledger_means(chosen: pd.DataFrame) -> dict[str, float]:
    import pandas as pd

    per_run = chosen.drop_duplicates("run")
    out = {}
    for name, col in LEDGER.items():
        if col in per_run.columns:
            values = pd.to_numeric(per_run[col], errors="coerce")
        elif name == "trajectories" and {"ledger_fresh_trajectories", "ledger_initial_trajectories"} <= set(per_run.columns):
            values = per_run["ledger_fresh_trajectories"] + per_run["ledger_initial_trajectories"]
        else:
            values = pd.Series(dtype=float)
        out[name] = float(values.mean()) if values.notna().any() else math.nan
    return out


def _groups(runs: pd.DataFrame, block_col: str | None, by: list[str]):
    """(key, runs of the group, orders expected in its block) for every block x every row-key
    combination seen anywhere: a strategy missing from one budget shows up there as 'no run'."""
    import pandas as pd

    combos = sorted(set(runs[by].itertuples(index=False, name=None)), key=_sort_key)
    blocks = sorted(runs[block_col].unique(), key=lambda v: _block_order(runs, block_col, v)) if block_col else [None]
    for bval in blocks:
        in_block = runs[runs[block_col] == bval] if block_col else runs
        expected = set(in_block["order"].dropna())
        for combo in combos:
            mask = pd.Series(True, index=in_block.index)
            for col, value in zip(by, combo):
                mask &= in_block[col] == value
            yield ((bval,) if block_col else ()) + combo, in_block[mask], expected


def _block_order(runs: pd.DataFrame, block_col: str, value: Any) -> tuple:
    """Response budgets in token order (16K before 32K), other blocks by value."""
    if block_col == "budget" and "max_response_tokens" in runs.columns:
        tokens = runs.loc[runs["budget"] == value, "max_response_tokens"]
        first = tokens.min() if tokens.map(lambda t: isinstance(t, numbers.Real)).all() else math.inf
        return _sort_key((first, value))
    return _sort_key((value,))


def _group_info(group: pd.DataFrame, rows: pd.DataFrame, expected: set, excluded: dict[str, str]) -> dict[str, Any]:
    """Row-level columns: orders present of those expected, the ledger spent, and why any are missing."""
    contributing = group.index.intersection(rows["run"].unique())
    present = set(group.loc[contributing, "order"].dropna())
    notes = [f"order {_fmt_orders([group.at[r, 'order']])}: {why}" for r, why in excluded.items() if r in group.index]
    lacking = expected - set(group["order"].dropna())
    if lacking:
        notes.append(f"order {_fmt_orders(lacking)}: no run")
    return {"n_runs": len(contributing), "n_expected": len(expected), "orders": _fmt_orders(present),
            "missing_orders": _fmt_orders(expected - present), **_ledger_means(rows), "notes": "; ".join(notes)}


def _fmt_orders(orders: Iterable[Any]) -> str:
    return ",".join(str(int(o)) if isinstance(o, float) and o.is_integer() else str(o) for o in sorted(orders, key=str))


def check_requested(evals, metrics: Sequence[str], benchmarks: Sequence[str] | None) -> None:
    """Every requested metric and benchmark names something in the eval rows ('mean': a suite mean), or a
    ValueError names it: a mistyped name would otherwise leave its column empty, or drop out of a list."""
    unknown = [m for m in metrics if m not in set(evals["metric"])]
    if unknown:
        raise ValueError(f"metric {unknown} not found among eval metrics {sorted(set(evals['metric']))}")
    present = set(evals["benchmark"])
    missing = [b for b in benchmarks or () if not (b in present or (b == "mean" and any(map(is_suite_mean, present))))]
    if missing:
        raise ValueError(f"benchmark {missing} not found among {order_benchmarks(evals['benchmark'])}")


def build_table(df: pd.DataFrame, metrics: str | Sequence[str] = ("avg@k",), benchmarks: Sequence[str] | None = None,
                by: Sequence[str] | None = None, block: str | None = "budget", update: str | int = "final",
                percent: bool = True, level: float = 0.95) -> pd.DataFrame:
    """Tidy table: one row per (block, row keys, benchmark, metric) cell with numeric mean, sd,
    ci_low, ci_high, n (orders present), n_expected (orders any run of the block has), the
    group's mean ledger budget (updates, trajectories, teacher_tokens, compute in FLOPs) and notes on what is
    missing or excluded. Accuracy metrics are in percent when `percent`. `benchmarks=["mean"]`
    selects the suite means; `by=None` picks strategy plus whatever else varies."""
    import pandas as pd

    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    evals = df[df["split"] == "eval"]
    if evals.empty:
        raise NoRowsError("no eval rows found: no run has evaluated yet (split=eval rows are what tables show)")
    check_requested(evals, metrics, benchmarks)
    runs = run_index(df)
    by = list(by) if by else default_by(runs, block)
    keys = ([block] if block and block not in by else []) + by
    missing_cols = [k for k in keys if k not in runs.columns]
    if missing_cols:
        raise KeyError(f"--by/--block column {missing_cols} is not in the rows; identity columns: "
                       f"{sorted(c for c in runs.columns if c not in {'status', 'run_dir', 'ended_by'})}")
    runs = runs.astype({k: object for k in keys}).fillna({k: "n/a" for k in keys})
    _check_replicates(runs, keys)
    chosen, excluded = _select_eval(df[df["metric"].isin(metrics)], runs, update)
    chosen = chosen.drop_duplicates(["run", "benchmark", "metric"], keep="last")
    all_benches = order_benchmarks(evals.loc[evals["metric"].isin(metrics), "benchmark"])
    if benchmarks:
        wanted = set(benchmarks)
        all_benches = [b for b in all_benches if b in wanted or ("mean" in wanted and is_suite_mean(b))]
    block_col = keys[0] if block and block not in by else None
    out = []
    for key, group, expected in _groups(runs, block_col, by):
        rows = chosen[chosen["run"].isin(group.index)]
        info = {**dict(zip(keys, key)), **_group_info(group, rows, expected, excluded)}
        for metric in metrics:
            scale = 100.0 if percent and is_accuracy(metric) else 1.0
            for bench in all_benches:
                cell = rows[(rows["metric"] == metric) & (rows["benchmark"] == bench)]["value"].dropna()
                mean, sd, lo, hi, n = t_interval([scale * v for v in cell], level)
                out.append({**info, "benchmark": bench, "metric": metric, "unit": "%" if scale == 100.0 else "",
                            "mean": mean, "sd": sd, "ci_low": lo, "ci_high": hi, "n": n})
    columns = [*keys, "benchmark", "metric", "unit", "mean", "sd", "ci_low", "ci_high", "n", "n_runs", "n_expected",
               "orders", "missing_orders", *LEDGER, "notes"]
    table = pd.DataFrame(out, columns=columns)
    tail = int(chosen["eval_tail"].max()) if update == "final" and "eval_tail" in chosen.columns and len(chosen) else 1
    table.attrs.update(keys=keys, block=block_col, by=by, update=update, metrics=metrics, level=level, tail=tail,
                       run_notes=run_notes(runs))
    return table


# --- rendering ----------------------------------------------------------------------------------
