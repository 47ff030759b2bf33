"""`replaylab figures EXPERIMENT_DIR`: a sweep's figures, saying what its tables say.

* `accuracy_vs_update.png`: the suite mean (avg@k, percent) against the optimizer update, from
  update 0, one line per strategy label and one panel per response budget; the line is the mean
  over data orders (and seeds) and the band the same 95% t-interval `replaylab table` prints.
* `diagnostics_<trainer>.png`, one per trainer family present: the training signals that explain
  a difference, mean over orders per label.
  GRPO: zero-variance group fraction, mean |advantage|, replay fraction, response length, truncation.
  OPD: sampled reverse KL, R-OPD's trigger ratio (change of window means in standard errors) and
  consecutive hits, the replay phase, and the staleness of trained samples.
A panel whose metric no run logged is left out, and the figure says which were absent.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DIAGNOSTICS = {
    "grpo": [("train", "zero_variance_groups", "zero-variance groups (fraction)"),
             ("train", "abs_advantage", "mean |advantage|"),
             ("train", "replay_fraction", "replayed samples (fraction)"),
             ("train", "response_tokens", "response tokens (mean)"),
             ("train", "truncation_rate", "truncated responses (fraction)")],
    "opd": [("train", "reverse_kl", "reverse KL (sampled, per token)"),
            ("strategy", "grad_change_ratio", "R-OPD trigger: change / SE"),
            ("strategy", "consecutive_hits", "R-OPD consecutive hits"),
            ("strategy", "phase_replay", "replay phase (1 = initial-policy replay)"),
            ("train", "staleness_mean", "staleness of trained samples (updates)")],
}


def _panels(n: int, width: float = 4.6, height: float = 3.3):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _band(df, split: str, metric: str, benchmark: str | None):
    """Per (block, label, update): mean and 95% t-interval over runs (`plots.curves`, the tables' interval)."""
    from replaylab.results.plots import curves, select

    c = curves(select(df, split, metric, benchmark))
    return list(c[["budget", "strategy", "update", "mean", "ci_low", "ci_high", "count"]].itertuples(index=False, name=None))


def aligned_finals(df):
    """`df` with each run's final evaluation moved to its curve's mean final update, where the runs of a
    (budget, strategy) curve end at different updates beyond all their other evaluations (runs matched on
    compute stop where their ledger does: 189, 191, 196, ...). Otherwise the curve's last points held one or
    two runs each, with no interval or a wild one, instead of the final value the tables report."""
    ev = df[df["split"] == "eval"]
    out = df.copy()
    for _, g in ev.groupby(["budget", "strategy"], dropna=False):
        per_run = g.groupby("run")["update"].max()
        last = g["run"].map(per_run)
        finals, earlier = g["update"][g["update"] == last], g["update"][g["update"] < last]
        if finals.nunique() > 1 and (earlier.empty or finals.min() > earlier.max()):
            out.loc[finals.index, "update"] = round(per_run.mean())
    return out


def accuracy_figure(df, path: Path, title: str) -> Path | None:
    rows = _band(aligned_finals(df), "eval", "avg@k", "mean")
    if not rows:
        return None
    budgets = sorted({r[0] for r in rows}, key=str)
    labels = sorted({r[1] for r in rows}, key=str)
    fig, axes = _panels(len(budgets), 6.0, 4.2)
    import matplotlib.pyplot as plt

    colours = plt.get_cmap("tab10")
    for ax, budget in zip(axes, budgets):
        for i, label in enumerate(labels):
            pts = sorted((r for r in rows if r[0] == budget and r[1] == label), key=lambda r: r[2])
            if not pts:
                continue
            x = [p[2] for p in pts]
            n = max(p[6] for p in pts)
            ax.plot(x, [p[3] for p in pts], "o-", color=colours(i % 10), lw=1.6, ms=3.5, label=f"{label} (n={n})")
            has = [p[4] == p[4] for p in pts]  # an interval exists where n >= 2
            if any(has):
                ax.fill_between(x, [p[4] for p in pts], [p[5] for p in pts], where=has, color=colours(i % 10), alpha=0.15)
        _shade_tail(ax, df[df["budget"] == budget])
        ax.set_title(f"budget {budget}", fontsize=10)
        ax.set_xlabel("optimizer update")
        ax.set_ylabel("suite mean avg@k (%)")
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{title}: accuracy vs update, mean and 95% t-interval over data orders", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _shade_tail(ax, df) -> None:
    """Shade the updates whose evaluations the tables average (eval.tail > 1), so a reader sees which
    points the tables' values are the mean of."""
    if "eval_tail" not in df.columns:
        return
    ev = df[(df["split"] == "eval") & (df["metric"] == "avg@k")]
    tail = int(ev["eval_tail"].max()) if len(ev) else 1
    if tail <= 1:
        return
    updates = sorted(set(ev["update"]))[-tail:]
    ax.axvspan(updates[0], updates[-1], color="0.5", alpha=0.12, lw=0,
               label=f"tables: mean of these {tail} evaluations")


def diagnostics_figure(df, family: str, path: Path, title: str) -> Path | None:
    import matplotlib.pyplot as plt

    runs = df[df["trainer"] == family]
    present = [(s, m, t) for s, m, t in DIAGNOSTICS[family] if ((runs["split"] == s) & (runs["metric"] == m)).any()]
    if not present:
        return None
    absent = [m for _, m, _ in DIAGNOSTICS[family] if m not in {p[1] for p in present}]
    fig, axes = _panels(len(present))
    colours = plt.get_cmap("tab10")
    labels = sorted(set(runs["strategy"].dropna()), key=str)
    for ax, (split, metric, text) in zip(axes, present):
        rows = _band(runs, split, metric, None)
        for i, label in enumerate(labels):
            for budget in sorted({r[0] for r in rows if r[1] == label}, key=str):
                pts = sorted((r for r in rows if r[1] == label and r[0] == budget), key=lambda r: r[2])
                style = "-" if budget == min({r[0] for r in rows}, key=str) else "--"
                ax.plot([p[2] for p in pts], [p[3] for p in pts], style, color=colours(i % 10), lw=1.2,
                        label=f"{label} ({budget})")
        ax.set_title(text, fontsize=9)
        ax.set_xlabel("optimizer update")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    note = f"; not logged by any run: {', '.join(absent)}" if absent else ""
    fig.suptitle(f"{title}: {family.upper()} diagnostics, mean over data orders{note}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def cmd_figures(args: argparse.Namespace) -> int:
    from replaylab.results.aggregation import by_configuration
    from replaylab.results.frame import NoRowsError
    from replaylab.results.table import load_source

    try:
        df = by_configuration(load_source(args.source))  # one line per configuration, as the tables' rows
    except (NoRowsError, ValueError) as e:
        print(f"replaylab figures: {e}", file=sys.stderr)
        return 2
    local = args.source.removeprefix("wandb-offline:")
    name = Path(local.rstrip("/")).stem
    out = Path(args.out) if args.out else (Path(local) if Path(local).is_dir() else Path(".")) / "figures"
    out.mkdir(parents=True, exist_ok=True)
    written = [accuracy_figure(df, out / "accuracy_vs_update.png", name)]
    for family in DIAGNOSTICS:
        written.append(diagnostics_figure(df, family, out / f"diagnostics_{family}.png", name))
    for path in written:
        if path:
            print(f"wrote {path}")
    return 0 if any(written) else 2


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("figures", help="a sweep's accuracy-vs-update and diagnostics figures (PNG)")
    p.add_argument("source", help="experiment directory, wandb CSV export, wandb:ENTITY/PROJECT or wandb-offline:DIR")
    p.add_argument("--out", help="directory for the PNGs (default SOURCE/figures)")
    p.set_defaults(func=cmd_figures)
    return p
