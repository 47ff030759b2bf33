"""Shared work (training/shared.py): a run that reads the initial policy's evaluation and rollouts that a
sibling run of the sweep wrote writes the rows of a run that computed them itself."""

from __future__ import annotations

import json

import pytest

from conftest import comparable, load_rows, one_gold_changed
from replaylab.training import shared as shared_module

# 2 current-policy updates, then 2 of initial-policy replay: iterations 2 and 3 sample the initial policy
# on the same prompts as an `initial` run does there.
SCHEDULE = ["strategy.current_updates=2", "strategy.replay_updates=2", "budget.max_updates=4", "eval.at_start=true"]


@pytest.fixture
def stores(monkeypatch):
    """Every SharedWork built in this test, in order (their `hits` say what each run read)."""
    made = []
    original = shared_module.SharedWork.__init__

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(shared_module.SharedWork, "__init__", recording)
    return made


def test_a_run_that_reads_shared_work_writes_the_rows_of_one_that_computed_it(run_train, tmp_path, stores):
    alone, alone_dir = run_train(["strategy=fixed_schedule", "share=false", *SCHEDULE], tmp_path / "alone")
    assert stores == []  # share=false builds no store
    run_train(["strategy=initial", *SCHEDULE[2:]], tmp_path / "sweep")
    shared, shared_dir = run_train(["strategy=fixed_schedule", *SCHEDULE], tmp_path / "sweep")
    assert shared_dir.name == alone_dir.name  # `share` is not part of the config hash
    assert stores[0].hits == {"evaluation": 0, "rollouts": 0}
    assert stores[1].hits == {"evaluation": 1, "rollouts": 2}  # update 0's evaluation, iterations 2 and 3
    assert comparable(load_rows(shared_dir)) == comparable(load_rows(alone_dir))
    counts = {k: v for k, v in alone.items() if k != "wall_time" and not k.startswith("seconds_")}
    assert {k: shared[k] for k in counts} == counts  # the ledger counts the rollouts it read as sampled and scored


def test_the_evaluation_is_shared_across_data_orders_and_nothing_across_budgets(run_train, tmp_path, stores):
    run_train(["strategy=current", "order=0", "eval.at_start=true", "budget.max_updates=1"])
    _, other_order = run_train(["strategy=initial", "order=1", "eval.at_start=true", "budget.max_updates=1"])
    _, other_budget = run_train(["strategy=initial", "order=1", "eval.at_start=true", "budget.max_updates=1",
                                 "budget.max_response_tokens=20", "eval.max_new_tokens=20"])
    assert [s.hits["evaluation"] for s in stores] == [0, 1, 0]
    assert stores[2].hits["rollouts"] == 0  # the initial run of another budget samples its own rollouts
    _, alone = run_train(["strategy=initial", "order=1", "eval.at_start=true", "budget.max_updates=1", "share=false"],
                         tmp_path / "alone")
    update0 = [r for r in comparable(load_rows(other_order)) if r["split"] == "eval" and r["update"] == 0]
    assert update0 and update0 == [r for r in comparable(load_rows(alone)) if r["split"] == "eval" and r["update"] == 0]


def test_an_evaluation_of_other_benchmark_golds_is_not_read(run_train, stores, monkeypatch):
    """The evaluation's key holds the benchmarks' problems and golds: a benchmark file changed between two runs
    of a sweep handed the later one the update-0 evaluation graded on the old golds."""
    from replaylab.evaluation import benchmarks

    common = ["eval.at_start=true", "budget.max_updates=1"]
    run_train(["strategy=current", "order=0", *common])
    with monkeypatch.context() as patch:
        patch.setattr(benchmarks, "get_benchmark", one_gold_changed(benchmarks.get_benchmark))
        run_train(["strategy=current", "order=1", *common])
    run_train(["strategy=current", "order=2", *common])
    assert [s.hits["evaluation"] for s in stores] == [0, 0, 1]


def test_entries_of_other_code_or_damaged_ones_are_not_read(run_train, tmp_path, stores, caplog):
    args = ["strategy=initial", "eval.at_start=true", "budget.max_updates=2"]
    _, first = run_train(args)
    root = first.parent / shared_module.SHARED_DIR
    evaluation = next(root.glob("eval-*.json"))
    entry = json.loads(evaluation.read_text())
    entry["results"][0][1] = {k: 1.0 for k in entry["results"][0][1]}  # numbers another code version wrote
    entry["versions"] = "replaylab_code=000000000000"
    evaluation.write_text(json.dumps(entry))
    rollouts = sorted(root.glob("rollouts-*/*.pt"))
    assert len(rollouts) == 2
    rollouts[0].write_bytes(rollouts[0].read_bytes()[:100])  # torn
    import shutil

    shutil.rmtree(first)
    _, again = run_train(args)
    assert stores[1].hits == {"evaluation": 0, "rollouts": 1}
    assert "ignoring the shared entry" in caplog.text
    assert comparable(load_rows(again)) == comparable(load_rows(run_train([*args, "share=false"], tmp_path / "alone")[1]))


def test_an_entry_for_other_prompts_is_not_read(tmp_path, run_train):
    """The prompts stored in an entry are checked, not only its name: a file under the name of the prompts
    asked for that holds other prompts' rollouts (another rendering of the same ids) is sampled again."""
    import torch

    from replaylab.types import Group, Prompt

    store = shared_module.SharedWork(tmp_path / "store", run_train.config(["strategy=initial"]), "v")
    asked = [Prompt("a", "a?", (1, 2), "1"), Prompt("b", "b?", (3,), "2")]
    other = [asked[0], Prompt("b", "b?", (4,), "2")]
    calls = []

    def sampled(prompts):
        calls.append(prompts)
        return [Group(p, []) for p in prompts]

    store.initial_rollouts(("s", 1), asked, "params", lambda: sampled(asked))
    read = store.initial_rollouts(("s", 1), asked, "params", lambda: sampled(asked))
    assert len(calls) == 1 and store.hits["rollouts"] == 1 and [g.prompt for g in read] == asked
    entry = next((tmp_path / "store").glob("rollouts-*/*.pt"))
    torch.save({"versions": "v", "groups": [Group(p, []) for p in other]}, entry)
    read = store.initial_rollouts(("s", 1), asked, "params", lambda: sampled(asked))
    assert len(calls) == 2 and store.hits["rollouts"] == 1 and [g.prompt for g in read] == asked
