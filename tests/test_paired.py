"""Paired differences and the minimum detectable effect (issue 14): a hand computation on synthetic
rows, a Monte Carlo check that the MDE really has 80% power, and the rule finding an effect that
is there and none that is not."""

from __future__ import annotations

import math

import numpy as np
import pytest

from replaylab.results.frame import tidy_frame
from replaylab.results.paired import minimum_detectable_effect, paired_interval, paired_power, paired_table

T_975_2 = 4.302652729911275  # Student t, 0.975 quantile, 2 degrees of freedom (tables)


def rows(values: dict[str, list[float]], budget: str = "tiny", seeds: list[int] | None = None) -> list[dict]:
    out = []
    for strategy, vals in values.items():
        for i, v in enumerate(vals):
            seed = seeds[i] if seeds else 0
            run = f"grpo-{strategy}-{budget}-{i}-{seed}"
            ident = {"run": run, "config_hash": run, "experiment": "x", "strategy": strategy, "trainer": "grpo",
                     "objective": "grpo", "model": "m", "teacher": "", "data": "d", "order": i, "budget": budget,
                     "max_response_tokens": 48, "seed": seed, "prompts_per_iteration": 8, "samples_per_prompt": 4,
                     "resample_period": 1, "versions": "v", "status": "done"}
            for bench, value in (("tiny8/mean", v), ("tiny8/add2", v / 2)):
                out.append({**ident, "split": "eval", "update": 10, "iteration": 10, "benchmark": bench,
                            "metric": "avg@k", "value": value, "n": 100})
    return out


def test_paired_difference_and_interval_match_a_hand_computation():
    df = tidy_frame(rows({"current": [0.30, 0.32, 0.35], "repo": [0.33, 0.33, 0.39]}))
    [row] = paired_table(df, "current").to_dict("records")
    diffs = [3.0, 1.0, 4.0]  # points
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    half = T_975_2 * sd / math.sqrt(3)
    assert row["strategy"] == "repo" and row["n_pairs"] == 3 and row["benchmark"] == "tiny8/mean"
    assert row["diff"] == pytest.approx(mean) and row["sd"] == pytest.approx(sd)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((mean - half, mean + half))
    assert row["verdict"].startswith("no difference detected")
    # the MDE: the noncentral-t power at it is 80%, and power grows with the effect
    assert paired_power(row["mde"], sd, 3) == pytest.approx(0.8, abs=1e-6)
    assert paired_power(row["mde"] * 1.2, sd, 3) > 0.8 > paired_power(row["mde"] * 0.8, sd, 3)


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_mde_has_eighty_percent_power_by_simulation(n):
    from scipy import stats

    sd = 2.0
    mde = minimum_detectable_effect(sd, n)
    rng = np.random.default_rng(n)
    draws = rng.normal(mde, sd, size=(40_000, n))
    p = stats.ttest_1samp(draws, 0.0, axis=1).pvalue
    assert (p < 0.05).mean() == pytest.approx(0.8, abs=0.01)
    assert minimum_detectable_effect(sd, 2 * n) < mde  # more pairs, smaller MDE


def test_pairing_finds_a_real_effect_and_reports_none_where_there_is_none():
    rng = np.random.default_rng(0)
    base = [0.22, 0.26, 0.30, 0.32, 0.35, 0.39]  # data orders differ by ~6 points
    shifted = [b + 0.03 + rng.normal(0, 0.003) for b in base]  # +3 points, tiny within-pair noise
    noise = rng.normal(0, 0.003, 3)
    same = [b + e for b, e in zip(base, [*noise, *-noise])]  # within-pair noise of mean exactly 0
    df = tidy_frame(rows({"current": base, "better": shifted, "same": same}))
    t = paired_table(df, "current").set_index("strategy")
    assert t.loc["better", "verdict"] == "higher" and t.loc["better", "ci_low"] > 0
    assert t.loc["same", "ci_low"] < 0 < t.loc["same", "ci_high"]
    assert t.loc["same", "mde"] < 1.5  # pairing removes the 5-point order spread
    # unpaired, the same 3-point effect is inside the order-to-order noise
    from scipy import stats

    assert stats.ttest_ind(shifted, base).pvalue > 0.05


def test_pairs_by_order_and_seed_and_names_what_is_unpaired():
    df = tidy_frame(rows({"current": [0.3, 0.4], "repo": [0.35, 0.5, 0.6]}, seeds=[0, 0, 0])
                    + rows({"current": [0.31]}, seeds=[1]))
    [row] = paired_table(df, "current").to_dict("records")
    assert row["n_pairs"] == 2 and row["diff"] == pytest.approx(7.5)
    assert "(2, 0)" in row["notes"] and "(0, 1)" in row["notes"]
    with pytest.raises(ValueError, match="no such strategy"):
        paired_table(df, "nope")
    assert math.isnan(paired_interval([1.0])[2]) and math.isnan(minimum_detectable_effect(1.0, 1))


def write_experiment(exp, records: list[dict]):
    """The records as finished run directories (rows.jsonl and done.json each) under `exp`."""
    import json

    for r in records:
        d = exp / r["run"]
        d.mkdir(parents=True, exist_ok=True)
        (d / "done.json").write_text("{}")
        with open(d / "rows.jsonl", "a") as f:
            f.write(json.dumps({k: v for k, v in r.items() if k != "status"}) + "\n")
    return exp


def test_cli_table_paired(tmp_path, capsys):
    from replaylab.cli.main import main

    exp = write_experiment(tmp_path / "exp", rows({"current": [0.30, 0.32, 0.35], "repo": [0.33, 0.33, 0.39]}))
    assert main(["table", str(exp), "--paired", "current"]) == 0
    out = capsys.readouterr().out
    assert "paired differences to current" in out and "+2.7 [-1.1, +6.5]" in out
    assert (exp / "tables" / "paired_current_table_avg_at_k.csv").exists()


def test_a_paired_row_whose_pairs_are_mostly_equal_takes_the_covering_interval_and_is_marked(tmp_path, capsys):
    """ropd equals current in 4 of 6 orders (its trigger never switched there): the row's interval is
    zero_inflated_interval's, not the t-interval's [-0.4, +1.4], and the table marks it and says why."""
    from replaylab.cli.main import main
    from replaylab.results.paired import zero_inflated_interval

    current = [0.30, 0.31, 0.32, 0.33, 0.34, 0.35]
    records = rows({"current": current, "ropd": current[:4] + [0.36, 0.36]})
    [row] = paired_table(tidy_frame(records), "current").query("strategy == 'ropd'").to_dict("records")
    assert row["zero_inflated"] and row["diff"] == pytest.approx(0.5)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(zero_inflated_interval([0, 0, 0, 0, 2.0, 1.0]))
    t_high = paired_interval([0, 0, 0, 0, 2.0, 1.0])[3]
    assert t_high == pytest.approx(1.378, abs=1e-3) and t_high < row["ci_high"]
    exp = write_experiment(tmp_path / "exp", records)
    assert main(["table", str(exp), "--paired", "current"]) == 0
    out = capsys.readouterr().out
    assert f"+0.5 [{row['ci_low']:+.1f}, {row['ci_high']:+.1f}] *" in out and "At most half of the pairs differ" in out


def test_the_known_effect_control_is_detected_when_the_reference_learns_and_flagged_when_not():
    def with_midpoint(gain_per_order: list[float]) -> list[dict]:
        final = rows({"current": [0.30, 0.35, 0.40, 0.33], "repo": [0.31, 0.36, 0.40, 0.35]})
        mid = [dict(r, update=5, iteration=5, value=r["value"] - g)
               for r in final for g in [gain_per_order[r["order"]]] if r["strategy"] == "current"]
        return final + mid

    learned = paired_table(tidy_frame(with_midpoint([0.05, 0.06, 0.04, 0.05])), "current").set_index("strategy")
    control = learned.loc["control: current final - update 5"]
    assert control["verdict"] == "control detected" and control["diff"] == pytest.approx(5.0)
    flat = paired_table(tidy_frame(with_midpoint([0.02, -0.03, 0.01, -0.01])), "current").set_index("strategy")
    assert flat.loc["control: current final - update 5", "verdict"].startswith("CONTROL NOT DETECTED")
    # a reference that got significantly worse shows no learning: the known effect is a gain, not any change
    worse = paired_table(tidy_frame(with_midpoint([-0.05, -0.06, -0.04, -0.05])), "current").set_index("strategy")
    control = worse.loc["control: current final - update 5"]
    assert control["diff"] == pytest.approx(-5.0) and control["ci_high"] < 0
    assert control["verdict"] == "CONTROL NOT DETECTED: the testbed failed its own check (the reference got worse)"
    # the share of responses cut at the budget has no known direction (learning to stop lowers it): a
    # significant fall is a detected change, as for response length
    cut = [dict(r, metric="truncation_rate") for r in with_midpoint([-0.05, -0.06, -0.04, -0.05])]
    control = paired_table(tidy_frame(cut), "current", metrics=("truncation_rate",)).set_index("strategy")
    assert control.loc["control: current final - update 5", "verdict"] == "control detected"
    from replaylab.results.paired import paired_markdown

    md = paired_markdown(paired_table(tidy_frame(with_midpoint([0.02, -0.03, 0.01, -0.01])), "current"), "x")
    assert "The known-effect control was not detected in 1 block(s)" in md
    assert "The known-effect control" not in paired_markdown(
        paired_table(tidy_frame(with_midpoint([0.05, 0.06, 0.04, 0.05])), "current"), "x")


@pytest.mark.parametrize(("sd", "target"), [(2.0, 3.0), (2.0, 1.5), (4.0, 3.0)])
def test_pairs_for_mde_is_the_fewest_pairs_with_eighty_percent_power(sd, target):
    """The projected number of data orders: at it the paired t-test finds a true effect of `target`
    80% of the time (simulated), one pair fewer it does not (so an off-by-one projection fails)."""
    from scipy import stats

    from replaylab.results.paired import pairs_for_mde

    n = int(pairs_for_mde(sd, target))
    assert minimum_detectable_effect(sd, n) <= target < minimum_detectable_effect(sd, n - 1)
    rng = np.random.default_rng(n)

    def power(pairs: int) -> float:
        draws = rng.normal(target, sd, size=(40_000, pairs))
        return float((stats.ttest_1samp(draws, 0.0, axis=1).pvalue < 0.05).mean())

    assert power(n) >= 0.8 - 0.01 and power(n - 1) < 0.8
    assert pairs_for_mde(sd, target / 2) > n  # half the effect needs more orders
    assert math.isnan(pairs_for_mde(0.0, target)) and math.isnan(pairs_for_mde(math.nan, target))
    assert pairs_for_mde(sd, target, most=n) == n and pairs_for_mde(sd, target, most=n - 1) == math.inf
    assert pairs_for_mde(sd, target, most=1) == math.inf  # one pair has no MDE at all


def test_cli_table_paired_plan(tmp_path, capsys):
    from replaylab.cli.main import main
    from replaylab.results.paired import pairs_for_mde

    exp = write_experiment(tmp_path / "exp", rows({"current": [0.30, 0.32, 0.35], "repo": [0.33, 0.33, 0.39]}))
    assert main(["table", str(exp), "--paired", "current", "--plan", "2"]) == 0
    out = capsys.readouterr().out
    sd = math.sqrt(((3 - 8 / 3) ** 2 + (1 - 8 / 3) ** 2 + (4 - 8 / 3) ** 2) / 2)  # the diffs 3, 1, 4 points
    needed = int(pairs_for_mde(sd, 2.0))
    assert "pairs for MDE <= 2" in out and f"| {needed} " in out and needed > 3
    assert main(["table", str(exp), "--plan", "2"]) == 2  # without --paired the flag would do nothing
    assert "needs --paired" in capsys.readouterr().err
    for bad in ("0", "-1", "inf", "nan"):
        assert main(["table", str(exp), "--paired", "current", "--plan", bad]) == 2
        assert "must be a positive number" in capsys.readouterr().err


def test_a_stale_run_beside_its_cell_is_named_not_paired_twice():
    """A sweep re-run after a code change leaves the old run of an (order, seed) beside the new one: the
    paired table must name both runs, not fail on a pair with two values or average them."""
    records = rows({"current": [0.30, 0.32, 0.35, 0.31], "new": [0.33, 0.33, 0.39, 0.36]})
    stale = [{**r, "run": r["run"] + "-old", "config_hash": "old", "versions": "replaylab_code=older"}
             for r in records if r["strategy"] == "current" and r["order"] == 0]
    with pytest.raises(ValueError, match=r"grpo-current-tiny-0-0 .*grpo-current-tiny-0-0-old|grpo-current-tiny-0-0-old .*grpo-current-tiny-0-0 "):
        paired_table(tidy_frame(records + stale), "current")
    stale_new = [{**r, "strategy": "new", "run": r["run"].replace("current", "new") + "-old"} for r in stale]
    with pytest.raises(ValueError, match="same cell under two config hashes"):
        paired_table(tidy_frame(records + stale_new), "current")


def test_a_paired_row_says_what_each_arm_spent_beside_the_reference():
    """An arm cut at half the updates, and one that drew twice the trajectories at the same updates: each row
    names the ledger axes on which the arm differs from the reference; a matched arm's says nothing."""
    spend = {"current": (200, 1000, 1e12), "short": (100, 500, 5e11), "greedy": (200, 2000, 1.3e12),
             "same": (200, 1000, 1.01e12)}
    records = rows({s: [0.30, 0.32, 0.35] for s in spend})
    for r in records:
        r["ledger_updates"], r["ledger_trajectories"], r["ledger_flops_total"] = spend[r["strategy"]]
    table = paired_table(tidy_frame(records), "current").set_index("strategy")
    assert table.at["short", "notes"] == "spent 0.50x updates, 0.50x trajectories, 0.50x FLOPs of current's"
    assert table.at["greedy", "notes"] == "spent 2.00x trajectories, 1.30x FLOPs of current's"
    assert "spent" not in table.at["same", "notes"]  # 1% more FLOPs: within the ledger's tolerance
    for r in records:  # one eval setting, other sample counts (a benchmark file changed between the runs)
        r["n"] = 50 if r["strategy"] == "same" else 100
    table = paired_table(tidy_frame(records), "current").set_index("strategy")
    assert table.at["same", "notes"] == "scored 50 samples against current's 100"


def test_rows_without_a_block_column_form_one_block():
    """Rows with no budget (a wandb export without budget.name): one block "n/a", as the plain table has it."""
    records = [{**r, "budget": None} for r in rows({"current": [0.30, 0.32, 0.35], "repo": [0.33, 0.33, 0.39]})]
    table = paired_table(tidy_frame(records), "current")
    assert list(table["block"]) == ["n/a"] and list(table["strategy"]) == ["repo"]
    from replaylab.results.frame import NoRowsError

    with pytest.raises(NoRowsError, match="nothing to pair: no strategy besides current"):
        paired_table(tidy_frame(rows({"current": [0.30, 0.32, 0.35]})), "current")  # one evaluation: no control


def test_a_paired_table_at_an_update_says_so_and_names_the_unfinished_runs_it_includes(tmp_path, capsys):
    from replaylab.cli.main import main

    exp = write_experiment(tmp_path / "exp", rows({"current": [0.30, 0.32, 0.35], "repo": [0.33, 0.33, 0.39]}))
    (exp / "grpo-repo-tiny-2-0" / "done.json").unlink()
    assert main(["table", str(exp), "--paired", "current", "--update", "10"]) == 0
    out = capsys.readouterr().out
    assert "strategy - current at update 10 (runs that reached it, finished or not)" in out
    assert "repo order 2: " in out and "included (it reached update 10)" in out
    assert main(["table", str(exp), "--paired", "current"]) == 0  # final: the unfinished run is left out, named
    out = capsys.readouterr().out
    assert "at each run's final evaluation" in out and "repo order 2: " in out


def test_figures_draw_one_line_per_configuration_not_one_averaged_over_them(tmp_path, monkeypatch):
    """Two models' runs of one strategy (three orders each, 30% and 60%): `replaylab figures` draws two lines
    of n=3, labelled by the model, not one line of n=6 at 45% across both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.figure

    from replaylab.cli.main import main

    small = rows({"current": [0.30, 0.31, 0.29]})
    big = [{**r, "run": r["run"] + "-big", "config_hash": r["run"] + "-big", "model": "big"}
           for r in rows({"current": [0.60, 0.61, 0.59]})]
    exp = write_experiment(tmp_path / "exp", small + big)
    labels = []
    original = matplotlib.figure.Figure.savefig

    def keep(fig, *args, **kwargs):
        labels.extend(line.get_label() for ax in fig.axes for line in ax.get_lines())
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    assert main(["figures", str(exp), "--out", str(tmp_path / "fig")]) == 0
    drawn = sorted(label for label in labels if label.startswith("current"))
    assert drawn[:2] == ["current (model=big) (n=3)", "current (model=m) (n=3)"], labels
