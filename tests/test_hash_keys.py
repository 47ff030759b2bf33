"""The keys the config hash leaves out (training/runs.NON_SEMANTIC_KEYS) must not change a run's numbers:
two configs that differ only in them share one run directory, so a sweep that changes one of them skips
the cell as done and reports the other setting's rows. Each key is changed, in a real run, to a value
that exercises it, and the rows must match the baseline's (wall-clock fields aside)."""

from __future__ import annotations

import pytest

from conftest import comparable, load_rows
from replaylab.training.runs import NON_SEMANTIC_KEYS

# GRPO with a stateful replay strategy (rewards graded, prompts re-asked) and OPD with R-OPD's trigger:
# every update evaluates and checkpoints are due, so cadence and grading keys have something to act on
BASES = {
    "grpo": ["trainer=grpo", "teacher=none", "strategy=prompt_replay", "budget.max_updates=4", "trainer.eval_every=2",
             "trainer.checkpoint_every=4", "eval.grader_workers=1"],
    "opd": ["strategy=ropd", "budget.max_updates=4", "trainer.eval_every=2", "trainer.checkpoint_every=4",
            "eval.grader_workers=1"],
}
# a value for each key left out of the hash that makes it act (output_root: see the test)
CHANGED = {
    "progress": ["progress=true"],
    "wandb": ["wandb.enabled=true", "wandb.mode=disabled"],
    "trainer.checkpoint_every": ["trainer.checkpoint_every=1"],
    "trainer.keep_checkpoints": ["trainer.keep_checkpoints=1", "trainer.checkpoint_every=1"],
    "eval.grader_workers": ["eval.grader_workers=2"],
    "run_lock_wait": ["run_lock_wait=5"],
    "resume_rows": ["resume_rows=rebuild"],
    "branch": ["branch=false"],
    "share": ["share=false"],
}


# a distributed run's wait in its collectives: an error in one process (config_checks); its runs are
# tests/test_distributed_train.py::test_the_other_ranks_wait_for_rank_0s_evaluation_as_long_as_dist_timeout_s
DISTRIBUTED_ONLY = {"trainer.dist_timeout_s"}


def test_every_key_left_out_of_the_hash_is_exercised_here():
    assert set(CHANGED) | {"output_root"} | DISTRIBUTED_ONLY == set(NON_SEMANTIC_KEYS)


@pytest.mark.parametrize("base", sorted(BASES))
def test_keys_left_out_of_the_hash_do_not_change_the_rows(run_train, tmp_path, base):
    _, baseline = run_train(BASES[base], tmp_path / "baseline")
    expected = comparable(load_rows(baseline))
    assert any(r["split"] == "eval" and r["update"] == 2 for r in expected)
    for key, overrides in CHANGED.items():
        _, path = run_train([*BASES[base], *overrides], tmp_path / key)  # output_root differs in every one
        assert path.name == baseline.name, key
        assert comparable(load_rows(path)) == expected, f"{key} changed the rows of the {base} run"
