"""Runs evaluated differently (issue 14's tables): every row carries its run's `eval_setting`, and a
table, a paired table and a claim check never compare accuracies measured on other problems or with
other decoding as if they were one measurement."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from conftest import load_rows
from replaylab.config import to_object
from replaylab.results.frame import eval_setting

OPD = ["eval.probe_size=0", "budget.max_updates=2", "experiment=evals"]


def test_runs_evaluated_on_other_problems_are_named_in_tables_and_refused_by_pairing(run_train, capsys):
    from replaylab.cli.main import main
    from replaylab.results.claims import Check, run_check
    from replaylab.results.frame import load_experiment

    _, current = run_train([*OPD, "strategy=current"])
    # a run of another budget, evaluated at that budget's response length as tiny_ropd's are: not remarked
    run_train([*OPD, "strategy=current", "eval.max_problems=3", "budget.name=tiny_long",
               "budget.max_response_tokens=32", "eval.max_new_tokens=32", "order=1"])
    exp = current.parent
    assert main(["table", str(exp)]) == 0
    assert "evaluated in different ways" not in capsys.readouterr().out

    # another strategy at the first budget, scored on 3 problems per benchmark instead of 4
    _, initial = run_train([*OPD, "strategy=initial", "eval.max_problems=3"])
    settings = {path.name: {r["eval_setting"] for r in load_rows(path)} for path in (current, initial)}
    assert settings[current.name] == {eval_setting(asdict(to_object(run_train.config([*OPD, "strategy=current"])).eval))}
    assert settings[current.name] == {"tiny8[4 problems] greedy 24tok"}
    assert settings[initial.name] == {"tiny8[3 problems] greedy 24tok"}
    assert main(["table", str(exp)]) == 0
    assert "Runs of one budget evaluated in different ways" in capsys.readouterr().out
    assert main(["table", str(exp), "--paired", "current"]) == 2
    err = capsys.readouterr().err
    assert "'tiny8[3 problems] greedy 24tok'" in err and "do not pair" in err
    check = Check("initial - current", {"strategy": "initial"}, {"strategy": "current"}, "higher", 3.0,
                  where={"budget": "tiny"})
    with pytest.raises(ValueError, match="claim check 'initial - current'.*do not pair"):
        run_check(load_experiment(exp), check)


def test_the_eval_setting_names_what_changes_a_measurement():
    """Each eval key that changes what is scored changes the string; the grading workers and the tail do not (the
    tail is its own identity column)."""
    from replaylab.config import EvalConfig

    base = eval_setting(asdict(EvalConfig()))
    assert base == "tiny8 greedy 64tok"
    changed = {"suite": "math8", "benchmarks": ["tiny8/add2"], "max_new_tokens": 32, "temperature": 0.6,
               "sampled_k": 4, "max_problems": 100, "instruction": "box it", "enable_thinking": True}
    for key, value in changed.items():
        assert eval_setting(asdict(EvalConfig(**{key: value}))) != base, key
    sampled = asdict(EvalConfig(temperature=0.6, samples=4))
    for key, value in {"top_p": 0.95, "top_k": 20, "samples": 8}.items():  # greedy forces one sample (a config error)
        assert eval_setting({**sampled, key: value}) != eval_setting(sampled), key
    assert eval_setting(asdict(EvalConfig(sampled_k=4, sampled_temperature=0.7))) != eval_setting(asdict(EvalConfig(sampled_k=4)))
    assert eval_setting(asdict(EvalConfig(grader_workers=4, grader_timeout=5, tail=2, tail_every=5))) == base
