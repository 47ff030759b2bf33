"""`replaylab show RUN_DIR`: what a finished or interrupted run shows, from its rows alone.

Prints the run's identity and status, the accuracy at its first and last evaluation per benchmark
(the before/after table a run prints when it ends) and the budget it spent; writes
`RUN_DIR/accuracy.png` (accuracy vs update, suite mean with its 95% interval; `--figure` elsewhere).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_show(args: argparse.Namespace) -> int:
    from replaylab.results.frame import run_status
    from replaylab.results.report import accuracy_figure, run_report
    from replaylab.results.rows import read_rows

    run = Path(args.run_dir)
    rows_path = run / "rows.jsonl"
    if not rows_path.exists():
        print(f"replaylab show: {rows_path}: no such file (is {run} a run directory?)", file=sys.stderr)
        return 2
    try:
        rows = read_rows(rows_path)
        report = run_report(run, rows, run_status(run))
    except ValueError as e:  # names the file and line (rows.jsonl, or a damaged done.json)
        print(f"replaylab show: {e}", file=sys.stderr)
        return 2
    print(report)
    figure = Path(args.figure) if args.figure else run / "accuracy.png"
    ident = rows[0] if rows else {}
    written = accuracy_figure(rows, figure, f"{run.name}: {ident.get('strategy', '?')}, order {ident.get('order', '?')}")
    print(f"wrote {written}" if written else "no evaluation rows: no figure")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("show", help="a run's before/after accuracy, its budget, and an accuracy-vs-update figure")
    p.add_argument("run_dir")
    p.add_argument("--figure", help="where the PNG goes (default RUN_DIR/accuracy.png)")
    p.set_defaults(func=cmd_show)
    return p
