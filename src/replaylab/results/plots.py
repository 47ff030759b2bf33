"""Plot helpers shared by the analysis notebooks (analysis/*.ipynb), so each notebook stays a few short
cells; part of the package, so the notebooks run against an installed replaylab as well.

Curves are means over data orders per strategy (shaded: the tables' 95% t-interval over orders;
accuracy in percent), one column of panels per response budget, x = optimizer update: the axis
budgets are matched on (`accuracy_vs_compute`: x = the ledger's estimated FLOPs instead). R-OPD's
switch to replay is drawn where it happened, from the `switch_iteration` strategy rows.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from replaylab.results.table import is_suite_mean  # noqa: E402

# Relative paths resolve from the repository root when replaylab runs from its checkout (so a notebook
# opened in analysis/ finds the same directories as run_notebooks.py), else from the working directory.
_CHECKOUT = Path(__file__).resolve().parents[3]
REPO = _CHECKOUT if (_CHECKOUT / "pyproject.toml").exists() and (_CHECKOUT / "analysis").is_dir() else Path.cwd()


def experiment_dir() -> Path:
    """REPLAYLAB_EXPERIMENT_DIR (default runs/tiny_ropd); relative paths are from the repository root,
    so a notebook opened from analysis/ finds the same directory as run_notebooks.py."""
    path = Path(os.environ.get("REPLAYLAB_EXPERIMENT_DIR", "runs/tiny_ropd"))
    return path if path.is_absolute() else REPO / path


def source() -> str:
    """What the notebooks read: REPLAYLAB_SOURCE (a run directory tree, a wandb runs-table CSV export,
    wandb:ENTITY/PROJECT or wandb-offline:DIR; `replaylab.results.table.load_source`), else the
    experiment directory."""
    return os.environ.get("REPLAYLAB_SOURCE") or str(experiment_dir())


def source_name() -> str:
    """A short title for figures: the experiment directory's (or export's) name."""
    return Path(source().split(":", 1)[-1].rstrip("/")).stem


def figures_dir() -> Path:
    path = Path(os.environ.get("REPLAYLAB_FIGURES_DIR", "analysis/figures"))
    path = path if path.is_absolute() else REPO / path
    path.mkdir(parents=True, exist_ok=True)
    return path


def select(df: pd.DataFrame, split: str, metric: str, benchmark: str | None = None) -> pd.DataFrame:
    """Rows of one metric; benchmark "mean" matches the suite mean whatever the suite is called."""
    rows = df[(df["split"] == split) & (df["metric"] == metric)]
    if benchmark == "mean":
        rows = rows[rows["benchmark"].map(is_suite_mean)]
    elif benchmark is not None:
        rows = rows[rows["benchmark"] == benchmark]
    return rows


def curves(rows: pd.DataFrame, keys: tuple[str, ...] = ("budget", "strategy"), level: float = 0.95) -> pd.DataFrame:
    """Mean and the tables' t-interval over runs (data orders) of one metric per (keys, update):
    columns mean, ci_low, ci_high (NaN for a single run), count; evaluation accuracy in percent."""
    from replaylab.results.aggregation import is_accuracy
    from replaylab.results.statistics import t_interval

    per_run = rows.drop_duplicates(["run", "benchmark", "update"], keep="last")
    first = per_run.iloc[0] if len(per_run) else None
    scale = 100.0 if first is not None and first["split"] == "eval" and is_accuracy(str(first["metric"])) else 1.0
    out = []
    for key, g in per_run.groupby([*keys, "update"], dropna=False):
        mean, _, lo, hi, n = t_interval([scale * v for v in g["value"].dropna()], level)
        out.append({**dict(zip([*keys, "update"], key)), "mean": mean, "ci_low": lo, "ci_high": hi, "count": n})
    return pd.DataFrame(out, columns=[*keys, "update", "mean", "ci_low", "ci_high", "count"])


def switch_points(df: pd.DataFrame) -> pd.DataFrame:
    """(budget, strategy, run, update) where a strategy switched to replay (R-OPD's switch_iteration)."""
    return select(df, "strategy", "switch_iteration")[["budget", "strategy", "run", "update", "value"]]


def metrics_matching(df: pd.DataFrame, pattern: str, splits: tuple[str, ...] = ("train", "strategy")) -> list[tuple[str, str]]:
    """(split, metric) pairs whose metric name matches `pattern`, in name order."""
    rows = df[df["split"].isin(splits) & df["metric"].astype(str).str.contains(pattern, regex=True)]
    return sorted(set(zip(rows["split"], rows["metric"])), key=lambda sm: (sm[1], sm[0]))


def grid(df: pd.DataFrame, panels: list[tuple[str, str, str | None]], title: str, mark_switch: bool = True):
    """Rows = panels (split, metric, benchmark), columns = budgets; a line per strategy (and configuration)."""
    from replaylab.results.aggregation import by_configuration

    df = by_configuration(df)
    df = df.assign(budget=df["budget"].astype(object).fillna("n/a"), strategy=df["strategy"].astype(object).fillna("n/a"))
    budgets = sorted(df["budget"].unique(), key=str)
    strategies = sorted(df["strategy"].unique(), key=str)
    colors = {s: plt.get_cmap("tab10")(i % 10) for i, s in enumerate(strategies)}
    fig, axes = plt.subplots(len(panels), len(budgets), figsize=(4.2 * len(budgets), 2.8 * len(panels)),
                             squeeze=False, sharex="col")
    switches = switch_points(df) if mark_switch else pd.DataFrame(columns=["budget", "strategy", "update"])
    for i, (split, metric, bench) in enumerate(panels):
        data = curves(select(df, split, metric, bench))
        for j, budget in enumerate(budgets):
            ax = axes[i][j]
            for strategy, c in data[data["budget"] == budget].groupby("strategy"):
                ax.plot(c["update"], c["mean"], color=colors[strategy], label=strategy)
                ax.fill_between(c["update"], c["ci_low"], c["ci_high"], color=colors[strategy], alpha=0.2, linewidth=0)
            for _, s in switches[switches["budget"] == budget].iterrows():
                ax.axvline(s["update"], color=colors.get(s["strategy"], "k"), linestyle="--", linewidth=0.8)
            ax.set_title(f"{budget}" if i == 0 else "", fontsize=9)
            unit = " (%)" if split == "eval" and "@" in metric else ""
            ax.set_ylabel(f"{metric}{unit}" + (f"\n({bench})" if bench else ""), fontsize=8)
            if i == len(panels) - 1:
                ax.set_xlabel("update")
    if axes[0][-1].get_legend_handles_labels()[0]:
        axes[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle(title + (" (dashed: switch to replay)" if mark_switch and len(switches) else ""), fontsize=10)
    fig.tight_layout()
    return fig


def accuracy_vs_compute(df: pd.DataFrame, title: str, metric: str = "avg@k", benchmark: str = "mean"):
    """Evaluation `metric` against the compute spent to reach it: x = the eval rows' ledger
    `flops_total` (estimated FLOPs, `replaylab.training.compute`; log scale across decades), one panel per response
    budget, a line per strategy through its evaluations, each point the mean over data orders of
    both (band: the tables' 95% t-interval of the metric). Evaluations at zero compute (before any
    rollout) are left out, as is everything when no eval row has the compute ledger (rows from
    before it): then None."""
    from replaylab.results.aggregation import by_configuration

    rows = select(by_configuration(df), "eval", metric, benchmark)
    if "ledger_flops_total" not in rows.columns:
        return None
    rows = rows.assign(flops=pd.to_numeric(rows["ledger_flops_total"], errors="coerce"),
                       budget=rows["budget"].astype(object).fillna("n/a"), strategy=rows["strategy"].astype(object).fillna("n/a"))
    rows = rows[rows["flops"] > 0]
    if rows.empty:
        return None
    keys = ["budget", "strategy", "update"]
    flops = rows.drop_duplicates(["run", "benchmark", "update"], keep="last").groupby(keys)["flops"].mean().reset_index()
    data = curves(rows).merge(flops, on=keys).sort_values("flops")
    budgets = sorted(data["budget"].unique(), key=str)
    strategies = sorted(data["strategy"].unique(), key=str)
    colors = {s: plt.get_cmap("tab10")(i % 10) for i, s in enumerate(strategies)}
    fig, axes = plt.subplots(1, len(budgets), figsize=(4.2 * len(budgets), 3.2), squeeze=False)
    for j, budget in enumerate(budgets):
        ax = axes[0][j]
        for strategy, c in data[data["budget"] == budget].groupby("strategy"):
            ax.plot(c["flops"], c["mean"], marker=".", color=colors[strategy], label=strategy)
            ax.fill_between(c["flops"], c["ci_low"], c["ci_high"], color=colors[strategy], alpha=0.2, linewidth=0)
        span = data.loc[data["budget"] == budget, "flops"]
        if span.max() > 10 * span.min():  # log scale only across decades; within one it labels a single tick
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # a narrow range would label every minor tick
        else:
            ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
        ax.set_title(str(budget), fontsize=9)
        ax.set_xlabel("compute (estimated FLOPs)")
        ax.set_ylabel(f"{metric}{' (%)' if '@' in metric else ''}" + (f"\n({benchmark})" if benchmark else ""), fontsize=8)
    if axes[0][-1].get_legend_handles_labels()[0]:
        axes[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def save(fig, name: str) -> Path:
    path = figures_dir() / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"saved {path}")
    return path


def ledger_rows(df: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """Ledger counters of the train rows as tidy rows (split "ledger"), so `grid` can plot them."""
    train = df[df["split"] == "train"]
    parts = [train.assign(split="ledger", metric=col, benchmark="", value=pd.to_numeric(train[col], errors="coerce"))
             for col in columns if col in train.columns]
    return pd.concat(parts, ignore_index=True) if parts else train.iloc[:0]


def table_bars(table: pd.DataFrame, title: str):
    """Suite-mean cells of a `build_table` result as bars with their 95% CI, one panel per block."""
    cells = table[table["benchmark"].map(is_suite_mean)]
    block = table.attrs.get("block")
    row_keys = [k for k in table.attrs["keys"] if k != block]
    parts = list(cells.groupby(block, sort=False)) if block else [("all runs", cells)]
    metrics = list(dict.fromkeys(cells["metric"]))
    fig, axes = plt.subplots(len(metrics), len(parts), figsize=(4.2 * len(parts), 3.0 * len(metrics)), squeeze=False)
    for j, (name, part) in enumerate(parts):
        for i, metric in enumerate(metrics):
            c = part[part["metric"] == metric]
            labels = [" / ".join(str(v) for v in row) for row in c[row_keys].itertuples(index=False)]
            err = [(c["mean"] - c["ci_low"]).fillna(0), (c["ci_high"] - c["mean"]).fillna(0)]
            axes[i][j].bar(labels, c["mean"].fillna(0), yerr=err, capsize=3, color="tab:blue", alpha=0.8)
            for x, (n, n_exp) in enumerate(zip(c["n"], c["n_expected"])):
                axes[i][j].annotate(f"n={n}" + (f"/{n_exp}" if n < n_exp else ""), (x, 0), ha="center", va="bottom", fontsize=7)
            axes[i][j].set_title(f"{block} = {name}" if block else str(name), fontsize=9)
            unit = c["unit"].iloc[0] if len(c) else ""
            axes[i][j].set_ylabel(metric + (f" ({unit})" if unit else ""), fontsize=8)
            axes[i][j].tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
