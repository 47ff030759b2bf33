"""Corrupted inputs of the results readers (`replaylab table`, `show`, `figures`, `claims`): each is a clear
error naming the file, line or directories (exit 2), or a note in the table, never a silently different
number, a phantom row or a traceback. The run directories are written by hand in the format of a real
micro-world run (train.py's rows, training/runs.mark_done's done.json, cli/evaluate.py's eval-<hash>/)."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from replaylab.cli.main import main

FINAL_UPDATE = 3
# strategy -> the final (update 3) tiny8 mean avg@k of data orders 0, 1, 2; every run is at 0.05 at update 0
FINAL = {"current": (0.1, 0.2, 0.3), "initial": (0.5, 0.4, 0.6)}
EVAL_SETTING = "tiny8[4 problems] greedy 24tok"
VERSIONS = "python=3.11.7 replaylab_code=000000000000 torch=2.13.0+cpu cpu=AMD_EPYC/AVX512 matmul=onednn"


def run_name(strategy: str, order: int) -> str:
    return f"opd-{strategy}-{hashlib.sha256(f'{strategy}{order}'.encode()).hexdigest()[:16]}"


def run_rows(strategy: str, order: int) -> list[dict]:
    """A finished run's rows as the RowWriter writes them: evals at updates 0 and 3, a train row per update."""
    name = run_name(strategy, order)
    ident = {"run": name, "config_hash": name[-16:], "experiment": "tbl", "strategy": strategy, "trainer": "opd",
             "objective": "opd_full_rkl", "model": "tiny://student", "teacher": "tiny://teacher", "data": "tiny_arith",
             "order": order, "budget": "tiny", "max_response_tokens": 24, "seed": 0, "prompts_per_iteration": 8,
             "samples_per_prompt": 1, "resample_period": 1, "eval_tail": 1, "eval_setting": EVAL_SETTING,
             "versions": VERSIONS}
    rows = []
    for update in range(FINAL_UPDATE + 1):
        ledger = {"ledger_updates": update, "ledger_trajectories": 8 * update, "ledger_teacher_tokens_scored": 150 * update,
                  "ledger_flops_total": 2.8e8 * update, "ledger_wall_time": 0.1 * update}
        if update:
            rows.append({**ident, "split": "train", "update": update, "iteration": update, "benchmark": "",
                         "metric": "reverse_kl", "value": 1.0 / update, "n": None, **ledger})
        if update in (0, FINAL_UPDATE):
            mean = FINAL[strategy][order] if update else 0.05
            for bench, acc in (("tiny8/add2", mean + 0.1), ("tiny8/sub2", mean - 0.1), ("mean", mean)):
                rows.append({**ident, "split": "eval", "update": update, "iteration": update, "benchmark": bench,
                             "metric": "avg@k", "value": acc, "n": 4, **ledger})
    return rows


def write_rows(path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_experiment(root):
    """Six finished runs (two strategies x three data orders) under root/tbl."""
    exp = root / "tbl"
    for strategy, finals in FINAL.items():
        for order in range(len(finals)):
            d = exp / run_name(strategy, order)
            d.mkdir(parents=True)
            write_rows(d / "rows.jsonl", run_rows(strategy, order))
            (d / "done.json").write_text(json.dumps({"update": FINAL_UPDATE, "iteration": FINAL_UPDATE,
                                                     "ended_by": "max_updates", "updates": FINAL_UPDATE,
                                                     "host": "vm", "pid": 1}, indent=2))
    return exp


def table_line(out: str, strategy: str) -> str:
    [line] = [line for line in out.splitlines() if line.startswith(f"| {strategy} ")]
    return line


def test_the_untouched_experiment_tables_its_hand_computed_means(tmp_path, capsys):
    exp = write_experiment(tmp_path)
    assert main(["table", str(exp), "--benchmark", "mean", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| 20.0 ± 24.8 |" in table_line(out, "current") and "| 50.0 ± 24.8 |" in table_line(out, "initial")


@pytest.mark.parametrize("copy", ["{name}.bak", "old/{name}"])
def test_a_copied_run_directory_is_refused_naming_both(tmp_path, capsys, copy):
    """F2: a backup copy (RUN.bak beside it, or old/RUN below the experiment) with an edited final value and no
    done.json replaced the run's numbers (current's mean 20.0 -> 40.0, exit 0): rows are merged by their `run`."""
    exp = write_experiment(tmp_path)
    original = exp / run_name("current", 0)
    backup = exp / copy.format(name=original.name)
    shutil.copytree(original, backup)
    write_rows(backup / "rows.jsonl", [{**r, "value": 0.7} if r["split"] == "eval" and r["update"] == FINAL_UPDATE
                                      else r for r in run_rows("current", 0)])
    (backup / "done.json").unlink()
    assert main(["table", str(exp), "--benchmark", "mean", "--format", "markdown"]) == 2
    err = capsys.readouterr().err
    assert str(original) in err and str(backup) in err and original.name in err, err


def test_a_row_of_another_run_is_named_by_file_and_line(tmp_path, capsys):
    """F2: rows of another run appended to a run's rows.jsonl were tabled as that other run's (last wins)."""
    exp = write_experiment(tmp_path)
    target = exp / run_name("current", 0) / "rows.jsonl"
    own = target.read_text()
    foreign = run_rows("current", 1)
    target.write_text(own + "".join(json.dumps({**r, "value": 0.9}) + "\n" for r in foreign))
    assert main(["table", str(exp), "--benchmark", "mean", "--format", "markdown"]) == 2
    err = capsys.readouterr().err
    assert f"{target}:{len(own.splitlines()) + 1}:" in err and run_name("current", 1) in err, err


def test_rows_in_a_directory_of_another_run_name_are_refused(tmp_path, capsys):
    """F2: a run directory holding another run's rows (a rows.jsonl copied over) is named with its first row."""
    exp = write_experiment(tmp_path)
    target = exp / run_name("current", 0) / "rows.jsonl"
    write_rows(target, run_rows("initial", 2))
    shutil.rmtree(exp / run_name("initial", 2))
    assert main(["table", str(exp), "--format", "markdown"]) == 2
    err = capsys.readouterr().err
    assert f"{target}:1:" in err and run_name("initial", 2) in err, err


def test_a_done_marker_past_the_last_evaluation_is_no_finished_run(tmp_path, capsys):
    """F3: rows.jsonl cut before the final evaluation (done.json still says update 3): the run's update-0
    evaluation was tabled as its final value, with no note. Now it is left out with a note naming its rows.jsonl,
    as an unfinished run is, and `replaylab show` says the same."""
    exp = write_experiment(tmp_path)
    run = exp / run_name("current", 0)
    write_rows(run / "rows.jsonl", [r for r in run_rows("current", 0) if r["update"] < FINAL_UPDATE])
    assert main(["table", str(exp), "--benchmark", "mean", "--format", "markdown"]) == 0
    line = table_line(capsys.readouterr().out, "current")
    assert "| 25.0 ± 63.5 |" in line and "| 2/3 " in line, line  # orders 1 and 2 only
    assert f"order 0: done.json says update {FINAL_UPDATE}" in line and str(run / "rows.jsonl") in line, line
    assert main(["show", str(run), "--figure", str(tmp_path / "fig.png")]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert f"done.json says update {FINAL_UPDATE}" in head and "last evaluation is at update 0" in head, head


def test_an_evaluation_past_the_done_marker_is_no_finished_run(tmp_path, capsys):
    """The audit's B4: the update-0 evaluation relabelled update 99 was tabled as the final value of a run that
    done.json says ended at update 3."""
    exp = write_experiment(tmp_path)
    run = exp / run_name("current", 0)
    write_rows(run / "rows.jsonl", [{**r, "update": 99} if r["split"] == "eval" and r["update"] == 0 else r
                                    for r in run_rows("current", 0)])
    assert main(["table", str(exp), "--benchmark", "mean", "--format", "markdown"]) == 0
    line = table_line(capsys.readouterr().out, "current")
    assert "| 25.0 ± 63.5 |" in line and "last evaluation is at update 99" in line, line


def test_a_done_marker_without_an_update_still_marks_a_finished_run(tmp_path, capsys):
    """Markers written by hand or before the field existed (`{}`) are taken at their word, as before."""
    exp = write_experiment(tmp_path)
    for marker in exp.glob("*/done.json"):
        marker.write_text("{}")
    assert main(["table", str(exp), "--benchmark", "mean", "--format", "markdown"]) == 0
    assert "| 20.0 ± 24.8 |" in table_line(capsys.readouterr().out, "current")


def test_a_byte_that_is_not_utf8_is_named_by_file_and_line(tmp_path, capsys):
    """F17: the table printed just `replaylab table: utf-8`."""
    exp = write_experiment(tmp_path)
    target = exp / run_name("initial", 1) / "rows.jsonl"
    lines = target.read_bytes().splitlines(keepends=True)
    lines[4] = lines[4].replace(b'"tiny8', b'"\xfftiny8', 1)
    target.write_bytes(b"".join(lines))
    assert main(["table", str(exp)]) == 2
    err = capsys.readouterr().err
    assert f"{target}:5:" in err and "UTF-8" in err, err
    assert main(["show", str(target.parent)]) == 2
    assert f"{target}:5:" in capsys.readouterr().err


def test_a_row_without_the_identity_columns_is_named(tmp_path, capsys):
    """F18: `{"foo": 1}` in rows.jsonl added an "n/a" strategy row and a "budget = n/a" block."""
    exp = write_experiment(tmp_path)
    target = exp / run_name("current", 2) / "rows.jsonl"
    n = len(target.read_text().splitlines())
    with open(target, "a") as f:
        f.write('{"foo": 1}\n')
    assert main(["table", str(exp), "--format", "markdown"]) == 2
    err = capsys.readouterr().err
    assert f"{target}:{n + 1}:" in err and "run" in err, err


def test_a_row_missing_an_identity_column_its_run_carries_is_named(tmp_path, capsys):
    exp = write_experiment(tmp_path)
    target = exp / run_name("current", 2) / "rows.jsonl"
    rows = run_rows("current", 2)
    del rows[-1]["strategy"]
    write_rows(target, rows)
    assert main(["table", str(exp), "--format", "markdown"]) == 2
    err = capsys.readouterr().err
    assert f"{target}:{len(rows)}:" in err and "strategy" in err, err


def test_an_evaluate_directory_is_no_strategy_of_the_sweep(tmp_path, capsys):
    """F18: `replaylab evaluate`'s eval-<hash>/ inside an experiment was tabled as an "n/a ... no run" row;
    now it is left out with a note naming it. On its own it is still a table of evaluations."""
    exp = write_experiment(tmp_path)
    evaluation = exp / "eval-44c8b78daada5e98"
    evaluation.mkdir()
    ident = {"run": evaluation.name, "config_hash": evaluation.name[5:], "experiment": "tbl", "model": "tiny://teacher",
             "checkpoint": "", "budget": "tiny", "max_response_tokens": 24, "seed": 0, "eval_setting": EVAL_SETTING,
             "versions": VERSIONS}
    write_rows(evaluation / "rows.jsonl", [{**ident, "split": "eval", "update": 0, "iteration": 0, "benchmark": b,
                                            "metric": "avg@k", "value": 0.9, "n": 4, "ledger_wall_time": 3.4}
                                           for b in ("tiny8/add2", "tiny8/sub2", "mean")])
    (evaluation / "summary.json").write_text(json.dumps({"mean": {"avg@k": 0.9}}))
    assert main(["table", str(exp), "--benchmark", "mean", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| n/a" not in out and "budget = n/a" not in out, out
    assert "| 20.0 ± 24.8 |" in table_line(out, "current")
    assert str(evaluation) in out and "replaylab evaluate" in out, out
    assert main(["table", str(evaluation), "--benchmark", "mean", "--format", "markdown"]) == 0
    assert "90.0 (n=1)" in capsys.readouterr().out


@pytest.mark.parametrize("text", ['Name,strategy\n"x,1\n', ""])
def test_a_malformed_csv_source_is_named(tmp_path, capsys, text):
    """F19: pandas' 'Error tokenizing data' / 'No columns to parse from file' without the file's name."""
    source = tmp_path / "export.csv"
    source.write_text(text)
    assert main(["table", str(source)]) == 2
    err = capsys.readouterr().err
    assert str(source) in err, err


@pytest.mark.parametrize("command", ["table", "figures"])
def test_an_unparseable_config_of_a_run_without_rows_is_named(tmp_path, capsys, command):
    """F15: a run directory with only a config.yaml that is not YAML: a yaml traceback."""
    exp = write_experiment(tmp_path)
    broken = exp / "opd-recent-0123456789abcdef"
    broken.mkdir()
    (broken / "config.yaml").write_text("experiment: tbl\nstrategy: {name: recent: x}\n")
    assert main([command, str(exp), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{broken / 'config.yaml'}:2:" in err and "Traceback" not in err, err


def test_the_claims_command_names_a_corrupted_run_directory(tmp_path, capsys):
    """The claims report reads sweeps through load_experiment: a corrupted run directory is a clear error too."""
    from replaylab.results.tiny_claims import CLAIMS

    sweep = CLAIMS[0].sweep
    exp = write_experiment(tmp_path / "runs")
    exp.rename(tmp_path / "runs" / sweep)
    target = tmp_path / "runs" / sweep / run_name("current", 0) / "rows.jsonl"
    target.write_bytes(target.read_bytes() + b'{"foo": 1}\n')
    assert main(["claims", str(tmp_path / "runs"), "--sweeps", sweep, "--out", str(tmp_path / "report.md")]) == 2
    err = capsys.readouterr().err
    assert f"{target}:" in err, err
