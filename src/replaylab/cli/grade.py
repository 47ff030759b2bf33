"""`replaylab grade INPUT.jsonl --out OUTPUT.jsonl`: grade model responses against gold answers.

Each input line is a JSON object with `response` and `gold` (strings; JSON numbers are accepted
for `gold`) and optionally `id`, `benchmark` and `truncated` (true: the token budget cut the
response, which is then graded by a complete \\boxed{} only, not by an anchored "the answer is" in
its tail). Each output line is that object plus `correct` and `status` (ok, no_answer, timeout,
unparseable_gold or error), and `message` when there is something to explain. A summary (per
status, accuracy, per benchmark) goes to stdout.

Malformed lines (bad JSON, missing or non-string fields) never stop the run: they are reported on
stderr as FILE:LINE: reason and written out with status "error", so the output has exactly one row
per non-blank input line, in input order. Exit status: 0, or 1 when any line was malformed, or 2
when the input cannot be read.

Also runnable on its own: `python -m replaylab.cli.grade INPUT.jsonl --out OUTPUT.jsonl`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from replaylab.grading import ERROR, Grader
from replaylab.grading.summary import format_summary, summarize

_BATCH_ROWS = 2048  # rows graded per Grader.grade call: bounds memory on large files


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="JSONL file with `response` and `gold` per line")
    p.add_argument("--out", required=True, help="where to write the graded JSONL")
    p.add_argument("--workers", type=int, default=None, help="grading processes (default: min(2, CPUs))")
    p.add_argument("--parsing-timeout", type=int, default=2, help="math-verify parse timeout, whole seconds (default 2)")
    p.add_argument("--verify-timeout", type=int, default=2, help="math-verify comparison timeout, whole seconds (default 2)")
    p.add_argument("--item-timeout", type=float, default=None,
                   help="hard wall-clock seconds per item before its worker is killed "
                        "(default: 3 x parse + 2 x verify timeout + 2)")
    p.add_argument("--boxed-only", action="store_true",
                   help="grade only \\boxed{} answers; unboxed responses get status no_answer")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the `grade` subcommand on an argparse subparsers object."""
    p = subparsers.add_parser("grade", help="grade responses against gold answers (math-verify)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(p)
    p.set_defaults(func=run)
    return p


def _read_rows(path: str) -> Iterator[tuple[int, dict, str | None]]:
    """(line number, row, problem) per non-blank line; problem is None for a well-formed row."""
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                yield lineno, {"line": lineno, "raw": line.rstrip("\n")}, f"invalid JSON ({e.msg} at column {e.colno})"
                continue
            if not isinstance(row, dict):
                yield lineno, {"line": lineno, "raw": row}, f"expected a JSON object, got {type(row).__name__}"
                continue
            if isinstance(row.get("gold"), (int, float)) and not isinstance(row.get("gold"), bool):
                row["gold"] = str(row["gold"])  # AIME-style integer golds
            missing = [k for k in ("response", "gold") if not isinstance(row.get(k), str)]
            if missing:
                what = " and ".join(f"`{k}`" for k in missing)
                yield lineno, row, f"{what} missing or not a string"
                continue
            if not isinstance(row.get("truncated", False), bool):  # "true" or 1 read as not truncated: another rule
                yield lineno, row, f"`truncated` must be true or false, got {row['truncated']!r}"
                continue
            yield lineno, row, None


def _grade_batch(grader: Grader, batch: list[tuple[int, dict, str | None]], path: str) -> list[dict]:
    good = [row for _, row, problem in batch if problem is None]
    results = iter(grader.grade([(row["response"], row["gold"]) for row in good],
                                truncated=[row.get("truncated") is True for row in good]))
    out = []
    for lineno, row, problem in batch:
        if problem is not None:
            message = f"{path}:{lineno}: {problem}"
            print(message, file=sys.stderr)
            row.update(correct=False, status=ERROR, message=message)
        else:
            r = next(results)
            row.update(correct=r.correct, status=r.status)
            if r.message:
                row["message"] = r.message
        out.append(row)
    return out


def _batches(items: Iterator, size: int) -> Iterator[list]:
    it = iter(items)
    while batch := list(islice(it, size)):
        yield batch


def run(args: argparse.Namespace) -> int:
    """Grade args.input into args.out; print the summary. Returns the process exit status."""
    target = Path(args.out)
    if target.resolve() == Path(args.input).resolve() or (target.exists() and os.path.samefile(target, args.input)):
        print(f"replaylab grade: --out {args.out} is the input file; writing it would destroy the responses being graded",
              file=sys.stderr)
        return 2
    partial = target.with_name(target.name + ".tmp")  # renamed over --out once every row is written
    try:
        open(args.input, "rb").close()
        out = open(partial, "w", encoding="ascii")
    except OSError as e:
        print(f"replaylab grade: cannot open {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    try:
        grader = Grader(
            args.workers, parsing_timeout=args.parsing_timeout, timeout_seconds=args.verify_timeout,
            item_timeout=args.item_timeout, fallback_unboxed=not args.boxed_only,
        )
    except ValueError as e:
        out.close()
        partial.unlink(missing_ok=True)
        print(f"replaylab grade: {e}", file=sys.stderr)
        return 2
    graded: list[dict] = []
    malformed = 0
    with grader, out:
        for batch in _batches(_read_rows(args.input), _BATCH_ROWS):
            malformed += sum(problem is not None for _, _, problem in batch)
            for (_, _, problem), row in zip(batch, _grade_batch(grader, batch, args.input)):
                # ASCII-only JSON: no raw U+2028/U+0085 that line splitters take for newlines, and
                # undecodable input bytes (kept as surrogates) round-trip as escapes.
                out.write(json.dumps(row) + "\n")
                graded.append({"correct": row["correct"], "status": row["status"],
                               "benchmark": row.get("benchmark"), "malformed": problem is not None})
    os.replace(partial, target)
    print(format_summary(*summarize(graded)))
    if malformed:
        print(f"{malformed} malformed line(s) in {args.input}; written with status error", file=sys.stderr)
    return 1 if malformed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="replaylab-grade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
