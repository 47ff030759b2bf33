"""Runs that saw other data than their config says (another data root, an edited benchmark or training
file): every row carries fingerprints of the benchmarks' problems and golds (`eval_data`) and of the
run's training prompt stream (`train_data`), and a table says when the runs it sets side by side differ
in them, a paired table refuses to pair them, where before both compared them as one experiment."""

from __future__ import annotations

import re
import shutil

import pytest

from conftest import load_rows, one_gold_changed

OPD = ["eval.probe_size=0", "budget.max_updates=2", "experiment=provenance"]


def fingerprints(path) -> set[tuple]:
    return {(r["eval_data"], r["train_data"]) for r in load_rows(path)}


def one_answer_changed(training_prompt_rows):
    """The training set with its first problem's answer changed: a data file regenerated or edited between runs."""
    def changed(cfg, benchmarks=None):
        rows = training_prompt_rows(cfg, benchmarks)
        return [{**rows[0], "answer": rows[0]["answer"] + "1"}, *rows[1:]]

    return changed


def test_runs_on_other_data_are_named_in_tables_and_refused_by_pairing(run_train, capsys, monkeypatch):
    from replaylab.cli.main import main
    from replaylab.evaluation import benchmarks
    from replaylab.training import build

    _, current = run_train([*OPD, "strategy=current"])
    _, initial = run_train([*OPD, "strategy=initial"])
    (ours,) = fingerprints(current)
    assert fingerprints(initial) == {ours} and all(re.fullmatch("[0-9a-f]{16}", f) for f in ours)
    exp = current.parent
    assert main(["table", str(exp), "--paired", "current"]) == 0
    out = capsys.readouterr().out
    assert "different benchmark problems" not in out and "different prompt streams" not in out

    with monkeypatch.context() as patch:  # one gold of one benchmark edited before this run
        patch.setattr(benchmarks, "get_benchmark", one_gold_changed(benchmarks.get_benchmark))
        _, edited = run_train([*OPD, "strategy=fifo"])
    ((eval_data, train_data),) = fingerprints(edited)
    assert eval_data != ours[0] and train_data == ours[1]
    with monkeypatch.context() as patch:  # one training problem's answer changed before this run
        patch.setattr(build, "training_prompt_rows", one_answer_changed(build.training_prompt_rows))
        _, retrained = run_train([*OPD, "strategy=ropd"])
    ((eval_data, train_data),) = fingerprints(retrained)
    assert eval_data == ours[0] and train_data != ours[1]

    assert main(["table", str(exp)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"scored on different benchmark problems or golds \(rows' `eval_data`\).*1 run on "
                     f"`{fingerprints(edited).pop()[0]}`", out.replace("\n", " "))
    assert re.search(r"trained on different prompt streams.*'order': 0.*1 on `" + train_data, out.replace("\n", " "))
    assert main(["table", str(exp), "--paired", "current"]) == 2
    err = capsys.readouterr().err
    assert "scored on benchmark data" in err and "rows' eval_data" in err and "do not pair" in err


def test_pairing_refuses_runs_of_one_order_on_other_prompt_streams(run_train, monkeypatch):
    from replaylab.results.frame import load_experiment
    from replaylab.results.paired import paired_table
    from replaylab.training import build

    _, current = run_train([*OPD, "strategy=current"])
    with monkeypatch.context() as patch:
        patch.setattr(build, "training_prompt_rows", one_answer_changed(build.training_prompt_rows))
        _, retrained = run_train([*OPD, "strategy=initial"])
    with pytest.raises(ValueError, match=f"{retrained.name} \\(initial\\) and {current.name} \\(current\\) pair on "
                                         "order 0 but trained on different prompt streams"):
        paired_table(load_experiment(current.parent), "current")
    # runs of another order trained on another stream by design: not a mismatch
    _, other_order = run_train([*OPD, "strategy=initial", "order=1"])
    assert fingerprints(other_order) != fingerprints(current)
    shutil.rmtree(retrained)
    table = paired_table(load_experiment(current.parent), "current")
    assert "initial" in set(table["strategy"])


def test_a_finished_run_is_not_skipped_over_other_data(run_train, monkeypatch):
    """The config hash names no data file: after a benchmark gold or a training answer changed, the same config
    found its finished run and skipped it, reporting the old data's rows as this config's results."""
    from replaylab.evaluation import benchmarks
    from replaylab.tasks.stream import StreamChanged
    from replaylab.training import build

    args = [*OPD, "strategy=current"]
    summary, path = run_train(args)
    rows = (path / "rows.jsonl").read_bytes()
    assert run_train(args)[1] == path and (path / "rows.jsonl").read_bytes() == rows  # same data: skipped as done
    with monkeypatch.context() as patch:
        patch.setattr(benchmarks, "get_benchmark", one_gold_changed(benchmarks.get_benchmark))
        with pytest.raises(StreamChanged, match=f"{path.name} finished on other data.*rows' eval_data"):
            run_train(args)
    with monkeypatch.context() as patch:
        patch.setattr(build, "training_prompt_rows", one_answer_changed(build.training_prompt_rows))
        with pytest.raises(StreamChanged, match=r"rows' train_data [0-9a-f]{16} \(now [0-9a-f]{16}\).*move the run"):
            run_train(args)
    assert run_train(args)[0]["update"] == summary["update"] and (path / "rows.jsonl").read_bytes() == rows
