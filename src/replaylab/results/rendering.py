"""Rendering a comparison table: Markdown, LaTeX and CSV, wide blocks per response budget."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from replaylab.results.aggregation import is_suite_mean

if TYPE_CHECKING:  # the replaylab CLI imports this module for every subcommand: pandas only when used
    import pandas as pd

# Identity columns that may become row keys when they vary (so different configs never get
# averaged as if they were data orders); `order` and `seed` are what a cell aggregates over.
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


def _flops(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.1e}"


def wide_blocks(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """[(block title, display frame)]: rows = row keys, columns = cells, then n, budget, notes."""
    import pandas as pd

    keys, block = table.attrs["keys"], table.attrs["block"]
    row_keys = [k for k in keys if k != block]
    metrics = list(dict.fromkeys(table["metric"]))
    benches = list(dict.fromkeys(table["benchmark"]))
    short = _short_benchmarks(benches)
    units = dict(zip(table["metric"], table["unit"]))
    # rows written before the compute ledger have no FLOPs: the column shows once any row has them
    with_compute = "compute" in table.columns and bool(table["compute"].notna().any())

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
                        "trajectories": _count(first["trajectories"]), "teacher tokens": _count(first["teacher_tokens"])})
            if with_compute:
                row["compute (FLOPs)"] = _flops(first["compute"])
            row["notes"] = first["notes"]
            rows.append(row)
        title = f"{block} = {bkey}" if block else "all runs"
        out.append((title, pd.DataFrame(rows)))
    return out


def describe(table: pd.DataFrame) -> str:
    """One sentence saying what the cells are, for the top of every rendering."""
    tail = table.attrs.get("tail", 1)
    at = (f"update {table.attrs['update']}" if table.attrs["update"] != "final" else "each run's final evaluation"
          if tail == 1 else f"each run's mean over its last {tail} evaluations (eval.tail)")
    metrics = ", ".join(f"{m} ({u})" if u else m for m, u in dict(zip(table["metric"], table["unit"])).items())
    level = round(100 * table.attrs["level"])
    note = table.attrs.get("run_notes")
    return (f"{metrics} at {at}; mean ± {level}% t-interval over data orders (n = orders present / expected); "
            "budget columns are mean ledger counts at that evaluation; — = no value (see notes)"
            + (f"\n\n{note}" if note else ""))


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
    # every line of the description commented: run notes (several code versions, other budgets) span lines
    about = [f"% {line}".rstrip() for line in describe(table).splitlines()]
    lines = [f"% {title}" if title else "%", *about, r"\begin{tabular}{" + "l" * len(columns) + "}",
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
