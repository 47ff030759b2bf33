"""trainer.micro_batch: a gradient group cut into length-sorted chunks gives the update one pass gives."""

from __future__ import annotations

import pytest

from conftest import load_rows

# The micro world's student answers nothing right, so DAPO's overlong term (responses past 4 of 24
# tokens lose reward by length) is what gives its groups reward variance and the update a gradient.
GRPO = ["trainer=grpo", "teacher=none", "trainer.prompts_per_iteration=4", "trainer.samples_per_prompt=4",
        "trainer.overlong_cache=20"]


def train_metrics(run_dir) -> dict[tuple[int, str], float]:
    return {(r["update"], r["metric"]): r["value"] for r in load_rows(run_dir) if r["split"] == "train"}


def loss_batch_sizes(monkeypatch, module: str) -> list[int]:
    """Record the rows of every loss forward (the objective's collate call)."""
    import importlib

    mod = importlib.import_module(module)
    sizes: list[int] = []
    real = mod.collate

    def counting(samples, pad_id):
        sizes.append(len(samples))
        return real(samples, pad_id)

    monkeypatch.setattr(mod, "collate", counting)
    return sizes


@pytest.mark.parametrize("case", [
    # GRPO, one gradient group of 16 rows, chunks of at most 5 (4 chunks).
    (GRPO, "5", "replaylab.objectives.grpo", 16),
    # R-OPD reads per-group gradient norms (4 groups of 2 rows): each group in 2 chunks of 1.
    (["strategy=ropd", "trainer.stat_groups=4"], "1", "replaylab.objectives.opd", 2),
])
def test_chunked_update_equals_one_pass(run_train, tmp_path, monkeypatch, case):
    overrides, micro, module, group_rows = case
    sizes = loss_batch_sizes(monkeypatch, module)
    _, whole_dir = run_train(overrides, output_root=tmp_path / "whole")
    assert max(sizes) == group_rows
    sizes.clear()
    _, chunked_dir = run_train(overrides + [f"trainer.micro_batch={micro}"], output_root=tmp_path / "chunked")
    assert max(sizes) <= int(micro)  # the flag acts: no loss forward saw more rows than micro_batch
    whole, chunked = train_metrics(whole_dir), train_metrics(chunked_dir)
    assert all(whole[(u, "grad_norm")] > 0 for u in (1, 2, 3))
    assert whole.keys() == chunked.keys()
    for key in ("grad_norm", "loss") + (("abs_advantage",) if module.endswith("grpo") else ("reverse_kl",)):
        matched = [(u, m) for (u, m) in whole if m == key]
        assert matched, key
        for update, metric in matched:
            value = whole[(update, metric)]
            assert chunked[(update, metric)] == pytest.approx(value, rel=1e-4, abs=1e-6), (update, metric)


def test_micro_batch_must_not_be_negative(run_train):
    from replaylab.config import ConfigError

    with pytest.raises(ConfigError, match="trainer.micro_batch"):
        run_train(GRPO + ["trainer.micro_batch=-1"])
