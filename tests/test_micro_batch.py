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


OPD_SPLIT = ["trainer=opd_sampled", "trainer.minibatches=2", "budget.max_updates=4"]


@pytest.mark.parametrize("case", [
    (OPD_SPLIT, ["trainer.micro_batch=2"]),
    (OPD_SPLIT, ["trainer.stat_groups_for_all=true", "trainer.stat_groups=4"]),  # R-OPD's four gradient groups
    (OPD_SPLIT + ["trainer.aggregation=grpo"], ["trainer.micro_batch=3"]),  # token means under sequence shares
    (GRPO + ["trainer.aggregation=grpo"], ["trainer.micro_batch=5"]),
], ids=["opd-micro", "opd-groups", "opd-seq-share", "grpo-micro"])
def test_every_logged_metric_of_an_update_is_the_same_whatever_the_split(run_train, tmp_path, case):
    """Counts are summed, extremes taken over the slices, token means weighted by tokens (training.update_metrics):
    each train metric of a split update equals the unsplit one's. Before, num_tokens read an average slice's
    (81.5 against 42.1 at micro_batch=2), ratio_max an average of the slices' maxima, and reverse_kl under
    sequence-share aggregation was off by the slices' lengths."""
    overrides, split = case
    _, whole_dir = run_train(overrides, output_root=tmp_path / "whole")
    _, split_dir = run_train(overrides + split, output_root=tmp_path / "split")
    whole, cut = train_metrics(whole_dir), train_metrics(split_dir)
    differing = sorted({m for (u, m), v in whole.items() if (u, m) in cut and m != "tokens_per_s"
                        and cut[(u, m)] != pytest.approx(v, rel=1e-4, abs=1e-6)})
    assert not differing, [(m, whole[(u, m)], cut[(u, m)]) for (u, m) in whole if m in differing][:8]
    assert {m for _, m in whole} >= {"num_tokens", "num_seqs", "ratio_max", "ratio_min", "grad_norm"}
