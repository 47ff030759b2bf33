"""Generate the analysis notebooks from this file (`python analysis/make_notebooks.py`).

The .ipynb files are committed without outputs; keeping their source here makes them reviewable
as Python and keeps them small. Each notebook reads REPLAYLAB_SOURCE (a wandb CSV export,
wandb:ENTITY/PROJECT or wandb-offline:DIR) or else REPLAYLAB_EXPERIMENT_DIR (default runs/tiny_ropd),
and writes PNGs to REPLAYLAB_FIGURES_DIR (default analysis/figures); its helpers are
`replaylab.results.plots`, so it runs against an installed replaylab too.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent

SETUP = '''\
from replaylab.results import plots
from replaylab.results.table import load_source

SOURCE, NAME = plots.source(), plots.source_name()  # run directories, or a wandb export / offline runs
df = load_source(SOURCE)
print(f"{SOURCE}: {df['run'].nunique()} runs, {len(df)} rows; figures -> {plots.figures_dir()}")'''

NOTEBOOKS = {
    "tables": [
        ("markdown", "# Comparison table\n\nEach run's final evaluation (the mean over its last eval.tail ones when runs end with several), "
                     "mean ± 95% t-interval over data orders, "
                     "one block per response budget; `n` = orders present / expected; the budget columns show "
                     "the ledger each row spent (`replaylab table` prints the same)."),
        ("code", SETUP),
        ("code", '''\
from IPython.display import Markdown, display
from replaylab.results.table import build_table, to_markdown

table = build_table(df)
display(Markdown(to_markdown(table, NAME)))'''),
        ("code", '''\
plots.save(plots.table_bars(table, f"{NAME}: suite mean, 95% CI over data orders"), "table_mean")'''),
    ],
    "curves": [
        ("markdown", "# Learning curves\n\nSuite-mean accuracy and response length vs optimizer update per strategy "
                     "(line: mean over data orders, band: its 95% t-interval, as in the tables); training signals (reverse KL for OPD, reward "
                     "for GRPO, response tokens). Dashed lines: R-OPD's switch to replay (`switch_iteration`)."),
        ("code", SETUP),
        ("code", '''\
eval_metrics = set(df.loc[df["split"] == "eval", "metric"])
panels = [("eval", m, "mean") for m in ("avg@k", "mean_response_tokens") if m in eval_metrics]
plots.save(plots.grid(df, panels, f"{NAME}: evaluation vs update"), "accuracy_vs_update")'''),
        ("markdown", "Accuracy against compute: x = the estimated FLOPs each evaluation's ledger had spent "
                     "(`flops_total`: generation, teacher scoring and training, 2N per token forward and 6N "
                     "forward+backward; `replaylab.training.compute`), log scale; the comparison "
                     "`budget.max_compute` matches runs on."),
        ("code", '''\
fig = plots.accuracy_vs_compute(df, f"{NAME}: evaluation vs compute")
if fig is not None:
    plots.save(fig, "accuracy_vs_compute")
else:
    print("no eval rows with the compute ledger (ledger_flops_total) in this experiment")'''),
        ("code", '''\
train_metrics = set(df.loc[df["split"] == "train", "metric"])
panels = [("train", m, None) for m in ("reverse_kl", "reward", "response_tokens") if m in train_metrics]
if panels:
    plots.save(plots.grid(df, panels, f"{NAME}: training signals vs update"), "train_curves")
else:
    print("no reverse_kl / reward / response_tokens train rows in this experiment")'''),
    ],
    "diagnostics": [
        ("markdown", "# Replay diagnostics\n\nZero-variance groups, replay counts, importance / behaviour weights "
                     "(whichever metrics the strategies logged), and the budget ledger's replayed samples and "
                     "trajectories by source."),
        ("code", SETUP),
        ("code", '''\
GROUPS = {
    "zero_variance": r"zero_variance",
    "replay": r"replay",
    # not a bare "ratio": it would also match switch_iteration and grad_change_ratio
    "importance_weights": r"behaviour_weight|^ratio_|log_ratio|clip_frac|is_weight",
}
for name, pattern in GROUPS.items():
    found = plots.metrics_matching(df, pattern)
    if not found:
        print(f"{name}: no metric matching {pattern!r} in this experiment")
        continue
    panels = [(split, metric, None) for split, metric in found]
    plots.save(plots.grid(df, panels, f"{NAME}: {name}"), f"diagnostics_{name}")'''),
        ("markdown", "## The R-OPD premise on a fixed probe\n\nEvery run draws the same probe set of initial-policy "
                     "rollouts before its first update and measures it at every evaluation: the current student's mean "
                     "per-token log-likelihood of those tokens (`probe_student_logprob`: falls if the student moves away "
                     "from its initial prefixes) and the teacher-student reverse KL on them (`probe_reverse_kl`: the "
                     "disagreement that is left there). Below: R-OPD's trigger statistic (change of window means in "
                     "standard errors; the switch needs consecutive values under the tolerance) and the age of the "
                     "trained samples."),
        ("code", '''\
PREMISE = [("probe", "probe_student_logprob", None), ("probe", "probe_reverse_kl", None),
           ("strategy", "grad_change_ratio", None), ("train", "staleness_mean", None)]
present = set(zip(df["split"], df["metric"]))
panels = [p for p in PREMISE if p[:2] in present]
if panels:
    plots.save(plots.grid(df, panels, f"{NAME}: probe set, trigger and staleness"), "diagnostics_probe")
else:
    print("no probe / trigger / staleness rows in this experiment")'''),
        ("code", '''\
LEDGER = ("ledger_replayed_samples", "ledger_fresh_trajectories", "ledger_initial_trajectories", "ledger_teacher_tokens_scored")
ledger = plots.ledger_rows(df, LEDGER)
panels = [("ledger", col, None) for col in LEDGER if col in set(ledger["metric"])]
plots.save(plots.grid(ledger, panels, f"{NAME}: budget ledger"), "diagnostics_ledger")'''),
    ],
}


def build(name: str, cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python"}}
    nb.cells = [nbformat.v4.new_markdown_cell(src) if kind == "markdown" else nbformat.v4.new_code_cell(src)
                for kind, src in cells]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{name}-{i}"  # stable ids: regenerating does not churn the committed files
    return nb


def main() -> None:
    for name, cells in NOTEBOOKS.items():
        path = HERE / f"{name}.ipynb"
        nbformat.write(build(name, cells), path)
        print(path)


if __name__ == "__main__":
    main()
