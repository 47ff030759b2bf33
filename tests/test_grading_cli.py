"""`replaylab grade` end to end: adversarial model outputs, malformed lines, the summary."""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

from replaylab.cli import grade as cli_grade
from replaylab.grading import STATUSES


def _write_jsonl(path: Path, rows: list) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(row if isinstance(row, str) else json.dumps(row) + "\n")


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _adversarial_rows() -> list[dict]:
    rng = random.Random(7)
    garbage = bytes(rng.randrange(256) for _ in range(20_000)).decode("latin-1")
    cases = {
        "power_tower": "\\boxed{9^{9^{9^{9}}}}",
        "power_tower_unboxed": "The final answer is $9^{9^{9^{9}}}$",
        "huge_power": "\\boxed{2^{2^{30}}}",
        "huge_factorial": "\\boxed{(10^{10})!}",
        "long_expression": "\\boxed{" + "x+" * 50_000 + "x}",
        "long_text": "a" * 100_000,
        "long_digits": "\\boxed{" + "7" * 100_000 + "}",
        "nested_braces": "\\boxed{" + "{" * 5000 + "1" + "}" * 5000 + "}",
        "nested_parens": "\\boxed{" + "(" * 3000 + "1" + ")" * 3000 + "}",
        "binary_garbage": garbage,
        "garbage_in_box": "\\boxed{" + garbage[:2000].replace("}", "") + "}",
        "unbalanced": "}}}}\\boxed{{{{1}" + "{" * 1000,
        "many_boxes": "\\boxed{1}" * 10_000 + "\\boxed{5}",
    }
    return [{"id": k, "benchmark": "adversarial", "response": v, "gold": "5"} for k, v in cases.items()]


def test_adversarial_outputs_through_the_cli(tmp_path):
    rows = _adversarial_rows()
    normal = [
        {"id": "normal_fraction", "benchmark": "normal", "response": "so \\boxed{\\frac{1}{2}}", "gold": "0.5"},
        {"id": "normal_integer", "benchmark": "normal", "response": "\\boxed{475}", "gold": "475"},
        {"id": "normal_wrong", "benchmark": "normal", "response": "\\boxed{\\sqrt{3}}", "gold": "\\sqrt{2}"},
        # the same anchored, unboxed answer, from a response that ended and from one the token budget cut
        {"id": "tail_ended", "benchmark": "normal", "response": "The final answer is 7", "gold": "7"},
        {"id": "tail_cut", "benchmark": "normal", "response": "The final answer is 7? Wait", "gold": "7", "truncated": True},
    ]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write_jsonl(src, rows + normal)
    item_timeout, workers = 3.0, 2
    cmd = [sys.executable, "-m", "replaylab.cli.grade", str(src), "--out", str(out),
           "--workers", str(workers), "--parsing-timeout", "1", "--verify-timeout", "1",
           "--item-timeout", str(item_timeout)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    # Worst case: every adversarial row runs into the outer deadline, spread over the workers,
    # plus interpreter and worker start-up.
    assert elapsed < len(rows) * item_timeout / workers + 20, elapsed

    graded = {r["id"]: r for r in _read_jsonl(out)}
    assert len(graded) == len(rows) + len(normal)
    for row in rows:
        g = graded[row["id"]]
        assert g["response"] == row["response"], "the input row must come back unchanged"
        assert g["status"] in STATUSES and g["status"] != "error", (row["id"], g)
        assert isinstance(g["correct"], bool)
    assert graded["many_boxes"]["correct"] is True  # the last of 10k boxes
    for rid in ("power_tower", "huge_power", "huge_factorial", "long_text", "binary_garbage", "unbalanced"):
        assert graded[rid]["correct"] is False, rid
    # The pool still works after all of that.
    assert graded["normal_fraction"]["correct"] is True
    assert graded["normal_integer"]["correct"] is True
    assert graded["normal_wrong"]["correct"] is False
    assert graded["tail_ended"]["correct"] is True and graded["tail_cut"]["status"] == "no_answer"
    assert "normal" in proc.stdout and "adversarial" in proc.stdout and "accuracy" in proc.stdout


def test_malformed_lines_are_kept_and_named(tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write_jsonl(src, [
        {"id": "a", "response": "\\boxed{2}", "gold": "2", "benchmark": "b1"},
        "{not json\n",
        {"id": "c", "response": "\\boxed{2}"},
        "[1, 2]\n",
        "\n",  # blank lines are skipped, not rows
        {"id": "e", "response": "\\boxed{42}", "gold": 42, "benchmark": "b2"},
        {"id": "f", "response": ["x"], "gold": "1"},
        {"id": "g", "response": "\\boxed{3}", "gold": "\\text{}", "benchmark": "b2"},
    ])
    rc = cli_grade.main([str(src), "--out", str(out), "--workers", "1"])
    captured = capsys.readouterr()
    assert rc == 1, "malformed input must be visible in the exit status"
    graded = _read_jsonl(out)
    assert len(graded) == 7  # one row per non-blank line, in order
    assert [r.get("id") for r in graded] == ["a", None, "c", None, "e", "f", "g"]
    assert [r["status"] for r in graded] == ["ok", "error", "error", "error", "ok", "error", "unparseable_gold"]
    assert [r["correct"] for r in graded] == [True, False, False, False, True, False, False]
    assert graded[1]["raw"] == "{not json" and graded[1]["line"] == 2
    assert f"{src}:2: invalid JSON" in graded[1]["message"]
    assert f"{src}:3: `gold` missing" in graded[2]["message"]
    assert f"{src}:4: expected a JSON object" in graded[3]["message"]
    assert f"{src}:7: `response` missing" in graded[5]["message"]
    for lineno in (2, 3, 4, 7):
        assert f"{src}:{lineno}:" in captured.err
    # Accuracy excludes malformed lines (status error) and unparseable_gold rows: 2 correct of 2 scored.
    assert "accuracy 1.0000 (2/2 scored, 7 rows)" in captured.out
    assert "b1" in captured.out and "b2" in captured.out


def test_a_grading_error_on_a_response_counts_as_wrong_as_in_the_evaluator(tmp_path, capsys, monkeypatch):
    """A response the grader fails on (its worker died on it: injected here into the real Grader's results)
    stays in the accuracy's denominator, as the evaluator scores it 0; a malformed line (no response to grade)
    and an unparseable gold stay out. Before, the error left the denominator and the CLI read 2/2 = 1.0 where
    the evaluator reads 2/3."""
    from replaylab.grading import ERROR, GradeResult, Grader

    class CrashOnBoom(Grader):
        def grade(self, pairs, truncated=None):
            real = super().grade(pairs, truncated=truncated)
            return [GradeResult(False, ERROR, "grading worker died (exit code -9)") if "boom" in resp else r
                    for (resp, _), r in zip(pairs, real)]

    monkeypatch.setattr(cli_grade, "Grader", CrashOnBoom)
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write_jsonl(src, [
        {"id": "a", "response": "\\boxed{2}", "gold": "2"},
        {"id": "b", "response": "\\boxed{5}", "gold": "5"},
        {"id": "c", "response": "boom \\boxed{7}", "gold": "7"},
        "{not json\n",
        {"id": "g", "response": "\\boxed{3}", "gold": "\\text{}"},
    ])
    assert cli_grade.main([str(src), "--out", str(out), "--workers", "1"]) == 1
    assert [r["status"] for r in _read_jsonl(out)] == ["ok", "ok", "error", "error", "unparseable_gold"]
    assert "accuracy 0.6667 (2/3 scored, 5 rows)" in capsys.readouterr().out


def test_missing_input_file(tmp_path, capsys):
    rc = cli_grade.main([str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "out.jsonl")])
    assert rc == 2
    assert "cannot open" in capsys.readouterr().err


def test_invalid_option_is_a_clear_error(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    _write_jsonl(src, [{"response": "\\boxed{1}", "gold": "1"}])
    rc = cli_grade.main([str(src), "--out", str(tmp_path / "o.jsonl"), "--parsing-timeout", "0"])
    assert rc == 2
    assert "parsing_timeout must be a whole number" in capsys.readouterr().err


def test_add_parser_registers_the_subcommand(tmp_path):
    parser = argparse.ArgumentParser(prog="replaylab")
    sub = parser.add_subparsers(dest="command", required=True)
    cli_grade.add_parser(sub)
    args = parser.parse_args(["grade", "in.jsonl", "--out", "o.jsonl", "--workers", "1", "--boxed-only"])
    assert args.func is cli_grade.run
    assert (args.input, args.out, args.workers, args.boxed_only) == ("in.jsonl", "o.jsonl", 1, True)


def test_a_truncated_flag_that_is_not_a_boolean_is_a_named_malformed_line(tmp_path, capsys):
    """`"truncated": "true"` or 1 was read as not truncated, so an unboxed answer was graded by the fallback
    reserved for complete responses (bad-input audit, F9)."""
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rows = [{"id": str(i), "response": "The final answer is 7", "gold": "7", "truncated": flag}
            for i, flag in enumerate([True, False, "true", 1])]
    _write_jsonl(src, rows)
    rc = cli_grade.main([str(src), "--out", str(out), "--workers", "1"])
    captured = capsys.readouterr()
    graded = _read_jsonl(out)
    assert rc == 1
    assert [r["correct"] for r in graded] == [False, True, False, False]
    assert [r["status"] for r in graded][2:] == ["error", "error"]
    assert f"{src}:3: `truncated` must be true or false, got 'true'" in captured.err
    assert f"{src}:4: `truncated` must be true or false, got 1" in captured.err
