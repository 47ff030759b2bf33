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
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from replaylab.results.aggregation import (  # noqa: F401 (re-exported)
    LEDGER,
    build_table,
    default_by,
    is_accuracy,
    is_suite_mean,
    order_benchmarks,
    run_index,
)
from replaylab.results.frame import NoRowsError, load_experiment
from replaylab.results.rendering import (  # noqa: F401 (re-exported)
    describe,
    to_latex,
    to_markdown,
    wide_blocks,
    write_outputs,
)
from replaylab.results.statistics import t_interval, t_quantile  # noqa: F401 (re-exported)

if TYPE_CHECKING:  # the replaylab CLI imports this module for every subcommand: pandas only when used
    import pandas as pd

# Identity columns that may become row keys when they vary (so different configs never get
# averaged as if they were data orders); `order` and `seed` are what a cell aggregates over.

def load_source(source: str) -> pd.DataFrame:
    """A run directory tree, a wandb runs-table CSV export, `wandb:ENTITY/PROJECT` (public API) or
    `wandb-offline:DIR` (the offline runs under DIR)."""
    if source.startswith("wandb-offline:"):
        from replaylab.results.wandb_export import load_wandb_offline

        return load_wandb_offline(source[len("wandb-offline:"):])
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
    if args.plan is not None and not args.paired:
        print("replaylab table: --plan projects paired MDEs: it needs --paired REF", file=sys.stderr)
        return 2
    inert = []  # flags the chosen mode never reads
    if args.paired:
        inert += [f for f, set_ in (("--by", args.by), ("--format", args.format != "all"),
                                    ("--columns", args.columns != "benchmark")) if set_]
    elif args.columns == "metric" and args.metric and args.benchmark:
        inert.append("--columns")  # it only picks the defaults of --metric and --benchmark; the layout follows their numbers
    if inert:
        why = ("with --paired (one row per strategy, benchmark and metric, written as .md and .csv)" if args.paired else
               "with both --metric and --benchmark given: it only chooses their defaults, and the layout follows how "
               "many of each there are")
        print(f"replaylab table: {', '.join(inert)} has no effect {why}", file=sys.stderr)
        return 2
    try:
        df = load_source(args.source)
        if args.experiment:
            df = df[df["experiment"] == args.experiment]
            if df.empty:
                raise NoRowsError(f"{args.source}: no rows found for experiment {args.experiment!r}")
        if args.paired:
            from replaylab.results.paired import paired_table

            table = paired_table(df, args.paired, metrics=metrics, benchmarks=benchmarks or ["mean"],
                                 block=args.block or None, update=update, plan=args.plan)
        else:
            table = build_table(df, metrics=metrics, benchmarks=benchmarks, by=by, block=args.block or None, update=update)
    except (NoRowsError, ValueError, KeyError) as e:
        print(f"replaylab table: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    local = args.source.removeprefix("wandb-offline:")
    title = Path(local.rstrip("/")).name
    source_dir = Path(local) if Path(local).is_dir() else Path(local).parent
    out = Path(args.out) if args.out else (source_dir / "tables" if not args.source.startswith("wandb:") else Path("tables"))
    if args.paired:
        from replaylab.results.paired import paired_markdown

        text = paired_markdown(table, title)
        print(text)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"paired_{args.paired}_{table_stem(metrics, None, str(update))}"
        (out / f"{stem}.md").write_text(text + "\n")
        table.to_csv(out / f"{stem}.csv", index=False)
        print(f"wrote {out / stem}.md and .csv", file=sys.stderr)
        return 0
    print(to_markdown(table, title))
    formats = ["markdown", "latex", "csv"] if args.format == "all" else [args.format]
    for path in write_outputs(table, out, table_stem(metrics, by, str(update)), formats, title):
        print(f"wrote {path}", file=sys.stderr)
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "table", help="the comparison table of a sweep (mean ± 95%% CI over data orders, matched budgets)",
        description="Build the comparison table of a sweep: each run's final evaluation (the mean over its last "
                    "eval.tail evaluations when the runs ended with several), mean ± 95% t-interval "
                    "over data orders, one block per response budget, with the ledger budget each row spent. "
                    "Budget-axes study: --by prompts_per_iteration,resample_period --columns metric.")
    p.add_argument("source", help="experiment directory (runs/<experiment>), a wandb runs-table CSV export, "
                                  "wandb:ENTITY/PROJECT, or wandb-offline:DIR (the offline wandb runs under DIR)")
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
    p.add_argument("--paired", metavar="REF", help="instead: each strategy's difference to strategy REF, paired by data "
                                                   "order and seed, with its 95%% interval and minimum detectable effect")
    p.add_argument("--plan", type=float, metavar="EFFECT",
                   help="with --paired: add each row's projected number of pairs (data orders; seeds in a one-order "
                        "sweep) at which its MDE would be at most EFFECT, in the row's units (points for accuracy metrics), from the spread "
                        "observed so far")
    p.add_argument("--update", default="final", type=_update_arg,
                   help="'final' (each finished run's last eval, or the mean over its eval.tail last ones) or an update number")
    p.add_argument("--experiment", help="keep only rows of this experiment (useful for wandb sources)")
    p.add_argument("--out", help="output directory (default: SOURCE/tables)")
    p.set_defaults(func=cmd_table)
    return p
