"""What a run says about itself: one line per evaluation, a before/after table at the end, and an
accuracy-vs-update figure (`replaylab show RUN_DIR` prints and draws the same from its rows).

Accuracy is avg@k in percent; the suite mean (`tiny8/mean`, `math8/mean`) leads, then each benchmark.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from replaylab.storage import read_done_marker

ACCURACY = "avg@k"


def is_mean(benchmark: str) -> bool:
    return benchmark == "mean" or benchmark.endswith("/mean")


def short(benchmark: str) -> str:
    """`tiny8/add2` -> `add2` for the per-benchmark columns; suite means keep their suite."""
    return benchmark if is_mean(benchmark) else benchmark.rsplit("/", 1)[-1]


def ordered(benchmarks: Iterable[str]) -> list[str]:
    return sorted(dict.fromkeys(benchmarks), key=lambda b: (not is_mean(b), b))


def suite_label(benchmark: str, others: Iterable[str]) -> str:
    """A suite mean's name for people: `tiny8 mean` when it is `mean` and the benchmarks are `tiny8/...`."""
    if benchmark != "mean":
        return benchmark.replace("/", " ")
    prefixes = {b.split("/", 1)[0] for b in others if "/" in b}
    return f"{prefixes.pop()} mean" if len(prefixes) == 1 else "mean"


def eval_line(update: int, results: Iterable[tuple[str, Mapping[str, float], Any]]) -> str:
    """`eval at update 50: tiny8 mean 38.2% | add2 76.0 sub2 19.0 ...` from one evaluation's results."""
    acc = {b: m[ACCURACY] for b, m, _ in results if ACCURACY in m}
    if not acc:
        return f"eval at update {update}: no {ACCURACY} rows"
    names = ordered(acc)
    head = ", ".join(f"{suite_label(b, names)} {100 * acc[b]:.1f}%" for b in names if is_mean(b))
    rest = " ".join(f"{short(b)} {100 * acc[b]:.1f}" for b in names if not is_mean(b))
    return f"eval at update {update} ({ACCURACY}): {head or 'accuracy'}" + (f" | {rest}" if rest else "")


def accuracy_by_update(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[int, tuple[float, float | None, float | None]]]:
    """{benchmark: {update: (avg@k, ci_low, ci_high)}} from a run's eval rows."""
    out: dict[str, dict[int, list]] = {}
    for r in rows:
        if r.get("split") != "eval" or r.get("metric") not in (ACCURACY, "ci_low", "ci_high"):
            continue
        cell = out.setdefault(r["benchmark"], {}).setdefault(int(r["update"]), [None, None, None])
        cell[(ACCURACY, "ci_low", "ci_high").index(r["metric"])] = r["value"]
    return {b: {u: tuple(v) for u, v in sorted(series.items()) if v[0] is not None} for b, series in out.items()}


def summary_table(rows: list[Mapping[str, Any]]) -> str:
    """Accuracy at the first and the last evaluation of a run, per benchmark, with the change."""
    from tabulate import tabulate

    acc = accuracy_by_update(rows)
    if not acc:
        return "no evaluation rows yet"
    first = min(min(s) for s in acc.values())
    last = max(max(s) for s in acc.values())
    table = []
    for b in ordered(acc):
        s = acc[b]
        before, after = s.get(first, (None,))[0], s.get(last, (None,))[0]
        change = f"{100 * (after - before):+.1f}" if before is not None and after is not None else ""
        table.append([suite_label(b, acc) if is_mean(b) else b, _pct(before), _pct(after), change])
    return tabulate(table, headers=["benchmark", f"update {first}", f"update {last}", "change (pts)"],
                    tablefmt="simple", disable_numparse=True)


def _pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.1f}%"


def ledger_line(rows: list[Mapping[str, Any]]) -> str:
    """The budget the run spent, from the ledger on its last row."""
    if not rows:
        return ""
    last = rows[-1]
    parts = [f"{last.get('ledger_updates', 0)} updates", f"{last.get('ledger_trajectories', 0)} trajectories"]
    if last.get("ledger_teacher_tokens_scored"):
        parts.append(f"{last['ledger_teacher_tokens_scored']} teacher tokens")
    if last.get("ledger_flops_total"):
        parts.append(f"{last['ledger_flops_total']:.2g} FLOPs (estimated)")
    if last.get("ledger_wall_time") is not None:
        parts.append(f"{last['ledger_wall_time']:.0f} s in the training loop")
    return ", ".join(parts)


def run_report(run_dir: Path, rows: list[Mapping[str, Any]], status: str) -> str:
    ident = rows[0] if rows else {}
    head = (f"{run_dir} ({status}): {ident.get('trainer', '?')}/{ident.get('strategy', '?')}, "
            f"order {ident.get('order', '?')}, seed {ident.get('seed', '?')}, budget {ident.get('budget', '?')}")
    return "\n".join(x for x in (head, summary_table(rows), ledger_line(rows), branch_line(run_dir)) if x)


def branch_line(run_dir: Path) -> str:
    """For a run that started from a sibling's checkpoint (training/branch.py): whose, and that the
    ledger above counts that run's updates and seconds up to there."""
    done = run_dir / "done.json"
    donor = read_done_marker(done).get("branched_from") if done.is_file() else None
    if not donor:
        return ""
    run, update = donor.rsplit("@", 1)
    return (f"started from {run}'s checkpoint at update {update}: the updates and seconds above include that "
            "run's up to there")


def accuracy_figure(rows: list[Mapping[str, Any]], path: Path, title: str) -> Path | None:
    """Accuracy (percent) against update: the suite mean bold with its 95% interval, each benchmark thin."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acc = accuracy_by_update(rows)
    if not acc:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for b in ordered(acc):
        updates = list(acc[b])
        values = [100 * acc[b][u][0] for u in updates]
        if is_mean(b):
            ax.plot(updates, values, "o-", color="black", lw=2.2, label=suite_label(b, acc), zorder=3)
            lows = [acc[b][u][1] for u in updates]
            highs = [acc[b][u][2] for u in updates]
            if all(x is not None for x in lows + highs):
                ax.fill_between(updates, [100 * x for x in lows], [100 * x for x in highs], color="black", alpha=0.12,
                                label="95% CI (bootstrap over problems)", zorder=2)
        else:
            ax.plot(updates, values, ".-", lw=1.0, alpha=0.75, label=short(b))
    ax.set_xlabel("optimizer update")
    ax.set_ylabel(f"{ACCURACY} (%)")
    from matplotlib.ticker import MaxNLocator

    last = max(max(s) for s in acc.values())
    ax.set_xlim(-0.03 * max(1, last), 1.03 * max(1, last))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
