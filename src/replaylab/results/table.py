"""`replaylab table`: the comparison table of a sweep, built from its tidy rows.

A sweep is compared at matched budgets, over several data orders. `build_table` is the pure
aggregation: each run's evaluation at one update (its final one by default), then per row group
(strategy, and whatever else varies) and response budget the mean and a 95% t-interval over the
data orders, together with the budget each group really spent (ledger updates, trajectories,
teacher tokens), so a reader sees that the budgets matched. Nothing is dropped silently: a run
without its done marker, or an order other groups have but this one lacks, shows up in `n`
(e.g. 2/3) and in `notes`. The rest of the module renders that tidy table as Markdown, LaTeX and
CSV, and wires the command.
"""

from __future__ import annotations

import argparse
import math
import numbers
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from replaylab.results.frame import DONE, NoRowsError, load_experiment

if TYPE_CHECKING:  # the replaylab CLI imports this module for every subcommand: pandas only when used
    import pandas as pd

# Identity columns that may become row keys when they vary (so different configs never get
# averaged as if they were data orders); `order` and `seed` are what a cell aggregates over.
ROW_CANDIDATES = ("experiment", "trainer", "objective", "model", "teacher", "data", "max_response_tokens",
                  "prompts_per_iteration", "samples_per_prompt", "resample_period")
NOT_IDENTITY = {"run", "config_hash", "versions", "status", "run_dir", "order", "seed"}
ACCURACY = {"avg@k", "pass@k", "pass@1", "ci_low", "ci_high", "truncation_rate", "accuracy"}
LEDGER = {"updates": "ledger_updates", "trajectories": "ledger_trajectories", "teacher_tokens": "ledger_teacher_tokens_scored"}


# --- statistics ---------------------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Student-t quantile by bisection (scipy is not a dependency; this runs once per cell)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2.0


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float, float, int]:
    """(mean, sd, ci_low, ci_high, n): mean ± t_{(1+level)/2, n-1} · sd / sqrt(n); no interval for n < 2."""
    n = len(values)
    if n == 0:
        return (math.nan,) * 4 + (0,)
    mean = sum(values) / n
    if n == 1:
        return mean, math.nan, math.nan, math.nan, 1
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile((1.0 + level) / 2.0, n - 1) * sd / math.sqrt(n)
    return mean, sd, mean - half, mean + half, n


# --- aggregation --------------------------------------------------------------------------------

def is_accuracy(metric: str) -> bool:
    return metric in ACCURACY or "@" in metric


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


def _select_eval(df: pd.DataFrame, runs: pd.DataFrame, update: str | int) -> tuple[pd.DataFrame, dict[str, str]]:
    """Each run's eval rows at the chosen update, and a remark per run that is left out (or, at a
    fixed update, included although unfinished)."""
    ev = df[df["split"] == "eval"]
    excluded: dict[str, str] = {}
    if update == "final":
        last = ev.groupby("run")["update"].max()
        finished = runs.index[runs["status"] == DONE]
        chosen = ev[ev["run"].isin(finished) & (ev["update"] == ev["run"].map(last))]
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
    import pandas as pd

    for _, group in runs.groupby(keys + ["order"], dropna=False):
        if len(group) > 1:
            a, b = group.iloc[0], group.iloc[1]
            diff = [c for c in runs.columns if c not in NOT_IDENTITY and c not in keys
                    and (pd.isna(a[c]) != pd.isna(b[c]) or (not pd.isna(a[c]) and a[c] != b[c]))]
            raise ValueError(
                f"runs {a['run']} and {b['run']} share row keys {dict(zip(keys, (a[k] for k in keys)))} and order "
                f"{a['order']}: they differ in {diff or 'seed or nothing recorded'}; add the varying column to --by "
                "instead of averaging different configs as data orders")


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


def build_table(df: pd.DataFrame, metrics: str | Sequence[str] = ("avg@k",), benchmarks: Sequence[str] | None = None,
                by: Sequence[str] | None = None, block: str | None = "budget", update: str | int = "final",
                percent: bool = True, level: float = 0.95) -> pd.DataFrame:
    """Tidy table: one row per (block, row keys, benchmark, metric) cell with numeric mean, sd,
    ci_low, ci_high, n (orders present), n_expected (orders any run of the block has), the
    group's mean ledger budget (updates, trajectories, teacher_tokens) and notes on what is
    missing or excluded. Accuracy metrics are in percent when `percent`. `benchmarks=["mean"]`
    selects the suite means; `by=None` picks strategy plus whatever else varies."""
    import pandas as pd

    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    evals = df[df["split"] == "eval"]
    if evals.empty:
        raise NoRowsError("no eval rows found: no run has evaluated yet (split=eval rows are what tables show)")
    unknown = [m for m in metrics if m not in set(evals["metric"])]
    if unknown:
        raise ValueError(f"metric {unknown} not found among eval metrics {sorted(set(evals['metric']))}")
    runs = run_index(df)
    by = list(by) if by else default_by(runs, block)
    keys = ([block] if block and block not in by else []) + by
    missing_cols = [k for k in keys if k not in runs.columns]
    if missing_cols:
        raise KeyError(f"--by/--block column {missing_cols} is not in the rows; identity columns: "
                       f"{sorted(c for c in runs.columns if c not in {'status', 'run_dir'})}")
    runs = runs.astype({k: object for k in keys}).fillna({k: "n/a" for k in keys})
    _check_replicates(runs, keys)
    chosen, excluded = _select_eval(df[df["metric"].isin(metrics)], runs, update)
    chosen = chosen.drop_duplicates(["run", "benchmark", "metric"], keep="last")
    all_benches = order_benchmarks(evals.loc[evals["metric"].isin(metrics), "benchmark"])
    if benchmarks:
        wanted = set(benchmarks)
        all_benches = [b for b in all_benches if b in wanted or ("mean" in wanted and is_suite_mean(b))]
        if not all_benches:
            raise ValueError(f"benchmark {list(benchmarks)} not found among {order_benchmarks(evals['benchmark'])}")
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
    table.attrs.update(keys=keys, block=block_col, by=by, update=update, metrics=metrics, level=level)
    return table


# --- rendering ----------------------------------------------------------------------------------

def _short_benchmarks(names: list[str]) -> dict[str, str]:
    """Drop the suite prefix when one suite holds every benchmark ("tiny8/add2" -> "add2", the suite
    mean -> "mean") to keep columns narrow; several suites keep their full names."""
    parts = [n for n in names if not is_suite_mean(n)]
    prefixes = {n.split("/", 1)[0] if "/" in n else None for n in parts}
    if len(prefixes) != 1 or None in prefixes or sum(map(is_suite_mean, names)) > 1:
        return {n: n for n in names}
    return {n: "mean" if is_suite_mean(n) else n.split("/", 1)[1] for n in names}


def _cell(mean: float, lo: float, hi: float, n: int, n_row: int) -> str:
    if n == 0 or math.isnan(mean):
        return "—"
    text = f"{mean:.1f}" if n == 1 or math.isnan(lo) else f"{mean:.1f} ± {(hi - lo) / 2:.1f}"
    return text + (f" (n={n})" if n == 1 or n < n_row else "")


def _count(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:,.0f}"


def wide_blocks(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """[(block title, display frame)]: rows = row keys, columns = cells, then n, budget, notes."""
    import pandas as pd

    keys, block = table.attrs["keys"], table.attrs["block"]
    row_keys = [k for k in keys if k != block]
    metrics = list(dict.fromkeys(table["metric"]))
    benches = list(dict.fromkeys(table["benchmark"]))
    short = _short_benchmarks(benches)
    units = dict(zip(table["metric"], table["unit"]))

    def label(bench: str, metric: str) -> str:
        unit = f" ({units[metric]})" if units[metric] and len(metrics) > 1 else ""
        if len(metrics) == 1:
            return short[bench]
        return metric + unit if len(benches) == 1 else f"{short[bench]} {metric}{unit}"

    out = []
    for bkey, part in (table.groupby(block, sort=False, dropna=False) if block else [(None, table)]):
        rows = []
        for _, g in part.groupby(row_keys, sort=False, dropna=False):
            first = g.iloc[0]
            row = {k: first[k] for k in row_keys}
            for _, c in g.iterrows():
                row[label(c["benchmark"], c["metric"])] = _cell(c["mean"], c["ci_low"], c["ci_high"], c["n"], first["n_runs"])
            flag = "" if first["n_runs"] >= first["n_expected"] else f"/{first['n_expected']}"
            row.update({"n": f"{first['n_runs']}{flag}", "updates": _count(first["updates"]),
                        "trajectories": _count(first["trajectories"]), "teacher tokens": _count(first["teacher_tokens"]),
                        "notes": first["notes"]})
            rows.append(row)
        title = f"{block} = {bkey}" if block else "all runs"
        out.append((title, pd.DataFrame(rows)))
    return out


def describe(table: pd.DataFrame) -> str:
    """One sentence saying what the cells are, for the top of every rendering."""
    at = "each run's final evaluation" if table.attrs["update"] == "final" else f"update {table.attrs['update']}"
    metrics = ", ".join(f"{m} ({u})" if u else m for m, u in dict(zip(table["metric"], table["unit"])).items())
    level = round(100 * table.attrs["level"])
    return (f"{metrics} at {at}; mean ± {level}% t-interval over data orders (n = orders present / expected); "
            "budget columns are mean ledger counts at that evaluation; — = no value (see notes)")


def to_markdown(table: pd.DataFrame, title: str = "") -> str:
    parts = [f"## {title}\n" if title else "", describe(table) + "\n"]
    for name, frame in wide_blocks(table):
        parts.append(f"\n### {name}\n\n{frame.to_markdown(index=False)}\n")
    return "".join(parts)


TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
               "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}", "±": r"$\pm$", "—": "--"}


def _tex(text: Any) -> str:
    return "".join(TEX_ESCAPES.get(ch, ch) for ch in str(text))


def to_latex(table: pd.DataFrame, title: str = "") -> str:
    """A booktabs tabular, one section per block (no jinja2 needed, unlike DataFrame.to_latex)."""
    blocks = wide_blocks(table)
    columns = list(dict.fromkeys(c for _, f in blocks for c in f.columns))
    lines = [f"% {title}" if title else "%", f"% {describe(table)}", r"\begin{tabular}{" + "l" * len(columns) + "}",
             r"\toprule", " & ".join(_tex(c) for c in columns) + r" \\"]
    for name, frame in blocks:
        lines += [r"\midrule", rf"\multicolumn{{{len(columns)}}}{{l}}{{\textit{{{_tex(name)}}}}} \\"]
        for _, row in frame.iterrows():
            lines.append(" & ".join(_tex(row.get(c, "")) for c in columns) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


def write_outputs(table: pd.DataFrame, out_dir: Path, stem: str, formats: Sequence[str], title: str = "") -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        path = out_dir / f"{stem}.{ {'markdown': 'md', 'latex': 'tex', 'csv': 'csv'}[fmt] }"
        if fmt == "markdown":
            path.write_text(to_markdown(table, title))
        elif fmt == "latex":
            path.write_text(to_latex(table, title))
        else:
            table.to_csv(path, index=False)
        written.append(path)
    return written


# --- command ------------------------------------------------------------------------------------

def load_source(source: str) -> pd.DataFrame:
    """A run directory tree, a wandb runs-table CSV export, or `wandb:ENTITY/PROJECT` (public API)."""
    if source.startswith("wandb:"):
        from replaylab.results.wandb_export import load_wandb_api

        return load_wandb_api(source[len("wandb:"):])
    if source.endswith(".csv"):
        from replaylab.results.wandb_export import load_wandb_csv

        return load_wandb_csv(source)
    return load_experiment(source)


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def _update_arg(value: str) -> str | int:
    if value == "final":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'final' or an update number, got {value!r}") from None


def table_stem(metrics: list[str], by: list[str] | None, update: str) -> str:
    parts = ["table", *(m.replace("@", "_at_") for m in metrics)]
    if by:
        parts.append("by_" + "-".join(by))
    if update != "final":
        parts.append(f"update{update}")
    return "_".join(parts)


def cmd_table(args: argparse.Namespace) -> int:
    columns_metric = args.columns == "metric"
    metrics = _split(args.metric) or (["avg@k", "mean_response_tokens"] if columns_metric else ["avg@k"])
    benchmarks = _split(args.benchmark) or (["mean"] if columns_metric else None)
    by = _split(args.by)
    update = args.update
    try:
        df = load_source(args.source)
        if args.experiment:
            df = df[df["experiment"] == args.experiment]
            if df.empty:
                raise NoRowsError(f"{args.source}: no rows found for experiment {args.experiment!r}")
        table = build_table(df, metrics=metrics, benchmarks=benchmarks, by=by, block=args.block or None, update=update)
    except (NoRowsError, ValueError, KeyError) as e:
        print(f"replaylab table: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    title = Path(args.source.rstrip("/")).name
    print(to_markdown(table, title))
    source_dir = Path(args.source) if Path(args.source).is_dir() else Path(args.source).parent
    out = Path(args.out) if args.out else (source_dir / "tables" if not args.source.startswith("wandb:") else Path("tables"))
    formats = ["markdown", "latex", "csv"] if args.format == "all" else [args.format]
    for path in write_outputs(table, out, table_stem(metrics, by, str(update)), formats, title):
        print(f"wrote {path}", file=sys.stderr)
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "table", help="the comparison table of a sweep (mean ± 95%% CI over data orders, matched budgets)",
        description="Build the comparison table of a sweep: each run's final evaluation, mean ± 95% t-interval "
                    "over data orders, one block per response budget, with the ledger budget each row spent. "
                    "Budget-axes study: --by prompts_per_iteration,resample_period --columns metric.")
    p.add_argument("source", help="experiment directory (runs/<experiment>), a wandb runs-table CSV export, "
                                  "or wandb:ENTITY/PROJECT")
    p.add_argument("--format", choices=["markdown", "latex", "csv", "all"], default="all", help="files to write")
    p.add_argument("--metric", help="eval metric(s), comma-separated (default avg@k; with --columns metric "
                                    "avg@k,mean_response_tokens)")
    p.add_argument("--benchmark", help="benchmarks to show, comma-separated; 'mean' = the suite mean "
                                       "(default: all; with --columns metric: mean)")
    p.add_argument("--columns", choices=["benchmark", "metric"], default="benchmark",
                   help="what the columns are: each benchmark (one metric) or each metric (suite mean)")
    p.add_argument("--by", help="row keys, comma-separated identity columns (default: strategy plus any "
                                "identity column that varies, e.g. model)")
    p.add_argument("--block", default="budget", help="one table block per value of this column ('' for none)")
    p.add_argument("--update", default="final", type=_update_arg,
                   help="'final' (each finished run's last eval) or an update number")
    p.add_argument("--experiment", help="keep only rows of this experiment (useful for wandb sources)")
    p.add_argument("--out", help="output directory (default: SOURCE/tables)")
    p.set_defaults(func=cmd_table)
    return p
