"""A run that ends with several evaluations (eval.tail, eval.tail_every), and tables that read each
run's mean over them (issue 14: one late checkpoint's greedy accuracy scatters by several points
between neighbouring updates, which the final point alone hands to every paired difference)."""

from __future__ import annotations

import math

import pytest

from conftest import load_rows
from replaylab.results.aggregation import build_table, final_eval
from replaylab.results.claims import Check, arm_values, run_check
from replaylab.results.frame import load_experiment, tidy_frame
from replaylab.results.paired import paired_table
from test_paired import T_975_2


def test_a_run_ends_with_its_tail_evaluations_and_rows_say_how_many(run_train):
    # trainer.eval_every=8 evaluates only at the end: updates 4 and 6 can come from the tail alone
    _, run_dir = run_train(["budget.max_updates=8", "trainer.eval_every=8", "eval.tail=3", "eval.tail_every=2"])
    rows = load_rows(run_dir)
    assert sorted({r["update"] for r in rows if r["split"] == "eval"}) == [0, 4, 6, 8]
    assert {r["eval_tail"] for r in rows} == {3}
    # the table reads the mean over updates 4, 6 and 8, not the final evaluation alone
    df = load_experiment(run_dir)
    chosen, short = final_eval(df[(df["split"] == "eval") & (df["metric"] == "avg@k")])
    assert not short
    ev = df[(df["split"] == "eval") & (df["metric"] == "avg@k")]
    for bench, value in zip(chosen["benchmark"], chosen["value"]):
        tail = ev[(ev["benchmark"] == bench) & ev["update"].isin([4, 6, 8])]["value"]
        assert len(tail) == 3 and value == pytest.approx(tail.mean())


def rows(curves: dict[str, list[list[float]]], tail: int, updates: list[int]) -> list[dict]:
    """Eval rows: curves[strategy][order] = the suite mean at `updates`."""
    out = []
    for strategy, per_order in curves.items():
        for order, values in enumerate(per_order):
            run = f"opd-{strategy}-{order}"
            ident = {"run": run, "config_hash": run, "experiment": "x", "strategy": strategy, "trainer": "opd",
                     "objective": "opd_full_rkl", "model": "m", "teacher": "t", "data": "d", "order": order,
                     "budget": "b", "max_response_tokens": 48, "seed": 0, "prompts_per_iteration": 64,
                     "samples_per_prompt": 1, "resample_period": 1, "eval_tail": tail, "versions": "v", "status": "done"}
            out += [{**ident, "split": "eval", "update": u, "iteration": u, "benchmark": "mean", "metric": "avg@k",
                     "value": v, "n": 100} for u, v in zip(updates, values)]
    return out


UPDATES = [0, 40, 80, 100, 110, 120]
CURVES = {  # a noisy final point: 0.60 vs 0.50 at update 120, the same level over the tail
    "current": [[0.3, 0.4, 0.50, 0.54, 0.56, 0.60], [0.3, 0.4, 0.52, 0.50, 0.58, 0.53], [0.3, 0.4, 0.5, 0.55, 0.52, 0.57]],
    "ropd": [[0.3, 0.4, 0.51, 0.58, 0.55, 0.50], [0.3, 0.4, 0.50, 0.57, 0.53, 0.58], [0.3, 0.4, 0.5, 0.56, 0.58, 0.52]],
}


def test_paired_table_and_claims_read_the_tail_mean_by_hand():
    df = tidy_frame(rows(CURVES, tail=3, updates=UPDATES))
    table = paired_table(df, "current")
    [row] = table[table["strategy"] == "ropd"].to_dict("records")
    diffs = [100 * (sum(r[-3:]) - sum(c[-3:])) / 3 for r, c in zip(CURVES["ropd"], CURVES["current"])]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    assert row["diff"] == pytest.approx(mean) and row["sd"] == pytest.approx(sd)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((mean - T_975_2 * sd / math.sqrt(3), mean + T_975_2 * sd / math.sqrt(3)))
    # the control: current's tail mean minus its evaluation at update 40 (nearest below half of 120)
    [control] = table[table["strategy"].str.startswith("control")].to_dict("records")
    assert control["diff"] == pytest.approx(100 * sum(sum(c[-3:]) / 3 - c[1] for c in CURVES["current"]) / 3)
    check = Check("ropd - current", {"strategy": "ropd"}, {"strategy": "current"}, "higher", 3.0)
    assert list(arm_values(df, check, {"strategy": "ropd"})) == pytest.approx([sum(r[-3:]) / 3 for r in CURVES["ropd"]])
    # the final point alone (eval_tail 1) gives a different difference: the tail is what was read
    alone = paired_table(tidy_frame(rows(CURVES, tail=1, updates=UPDATES)), "current")
    assert alone[alone["strategy"] == "ropd"]["diff"].item() != pytest.approx(mean)


def test_at_a_fixed_update_the_strategies_and_the_control_read_that_single_evaluation():
    """`replaylab table --paired REF --update N` reads one checkpoint per run; its control must too (the
    reference at N minus itself at the evaluation nearest to N / 2), not the tail mean of the final table."""
    table = paired_table(tidy_frame(rows(CURVES, tail=3, updates=UPDATES)), "current", update=120)
    [row] = table[table["strategy"] == "ropd"].to_dict("records")
    assert row["diff"] == pytest.approx(100 * sum(r[-1] - c[-1] for r, c in zip(CURVES["ropd"], CURVES["current"])) / 3)
    [control] = table[table["strategy"].str.startswith("control")].to_dict("records")
    assert control["strategy"] == "control: current at update 120 - update 40"
    assert control["diff"] == pytest.approx(100 * sum(c[-1] - c[1] for c in CURVES["current"]) / 3)
    # a reference run that stopped after update 100 (unfinished) still counts at update 100, as in the table
    stopped = [{**r, "status": "failed/running"} for r in rows(CURVES, 3, UPDATES)
               if not (r["run"] == "opd-current-2" and r["update"] > 100)]
    others = [r for r in rows(CURVES, 3, UPDATES) if r["run"] != "opd-current-2"]
    [control] = [r for r in paired_table(tidy_frame(others + [r for r in stopped if r["run"] == "opd-current-2"]),
                                         "current", update=100).to_dict("records") if r["strategy"].startswith("control")]
    assert control["n_pairs"] == 3
    assert control["diff"] == pytest.approx(100 * sum(c[3] - c[1] for c in CURVES["current"]) / 3)
    # at update 100 (inside the tail) the control's earlier point is the evaluation nearest below 50
    [control] = [r for r in paired_table(tidy_frame(rows(CURVES, tail=3, updates=UPDATES)), "current", update=100)
                 .to_dict("records") if r["strategy"].startswith("control")]
    assert control["strategy"] == "control: current at update 100 - update 40"
    assert control["diff"] == pytest.approx(100 * sum(c[3] - c[1] for c in CURVES["current"]) / 3)


def test_runs_short_of_their_tail_are_left_out_and_a_mixed_sweep_is_refused():
    short = rows({"current": [[0.3, 0.5]]}, tail=3, updates=[0, 120])
    chosen, left_out = final_eval(tidy_frame(short))
    assert chosen.empty and "2 evaluation(s) in its last 3" in left_out["opd-current-0"]
    table = build_table(tidy_frame(rows(CURVES, 3, UPDATES) + [{**r, "run": "late", "order": 9} for r in short]),
                        metrics=["avg@k"], benchmarks=["mean"])
    current = table[table["strategy"] == "current"].iloc[0]
    assert current["n"] == 3 and "order 9: mean avg@k: 2 evaluation(s) in its last 3" in current["notes"]
    mixed = rows({"current": CURVES["current"]}, 3, UPDATES) + rows({"ropd": CURVES["ropd"]}, 1, UPDATES)
    with pytest.raises(ValueError, match="eval_tail"):
        paired_table(tidy_frame(mixed), "current")
    check = Check("x", {"strategy": "current"}, {"strategy": "current"}, "higher", 3.0)
    with pytest.raises(ValueError, match="2 evaluation.s. in its last 3"):
        arm_values(tidy_frame(short), check, {"strategy": "current"})
    # a claim whose arms average different numbers of evaluations is refused too
    with pytest.raises(ValueError, match="eval_tail"):
        run_check(tidy_frame(mixed), Check("x", {"strategy": "ropd"}, {"strategy": "current"}, "higher", 3.0))
    # a value missing at one tail update: the run is left out, not averaged over the other two
    gap = [{**r, "value": math.nan} if (r["run"], r["update"]) == ("opd-ropd-1", 110) else r for r in rows(CURVES, 3, UPDATES)]
    chosen, left_out = final_eval(tidy_frame(gap))
    assert set(left_out) == {"opd-ropd-1"} and "opd-ropd-1" not in set(chosen["run"])
    # an evaluation missing from a run's rows altogether: update 80 would slip into its last three
    gone = [r for r in rows(CURVES, 3, UPDATES) if (r["run"], r["update"]) != ("opd-ropd-1", 110)]
    chosen, left_out = final_eval(tidy_frame(gone))
    assert set(left_out) == {"opd-ropd-1"} and "updates [80, 100, 120], most runs' at [100, 110, 120]" in left_out["opd-ropd-1"]
    assert len(chosen) == 5


def test_the_control_reads_learning_from_below_the_tail():
    """A tail reaching back past half the run must not make the control compare the tail mean with one
    of its own points: the control's earlier evaluation is the last one before the tail."""
    updates = [0, 2, 4, 6, 8]  # tail 3 every 2 of an 8-update run: 4, 6, 8; half the run is 4
    curves = {"current": [[0.3, 0.35, 0.5, 0.52, 0.54], [0.3, 0.36, 0.5, 0.5, 0.56], [0.3, 0.34, 0.52, 0.5, 0.55]]}
    [control] = paired_table(tidy_frame(rows(curves, 3, updates)), "current").to_dict("records")
    assert control["strategy"] == "control: current final - update 2"
    assert control["diff"] == pytest.approx(100 * sum(sum(c[-3:]) / 3 - c[1] for c in curves["current"]) / 3)


def test_the_tail_mean_shrinks_the_mde_when_late_checkpoints_scatter():
    """Curves whose per-checkpoint noise dwarfs their per-order spread (what tinylong's late evaluations
    show): the tail mean's paired spread, and with it the MDE, is about 1/sqrt(5) of the final point's;
    a table that read only the final point (eval_tail ignored) would not shrink it."""
    import numpy as np

    rng = np.random.default_rng(0)
    updates = [0, 40, 80, 100, 105, 110, 115, 120]
    curves = {s: [[0.3, 0.45, 0.5] + list(0.55 + rng.normal(0, 0.03, 5)) for _ in range(10)] for s in ("current", "ropd")}
    tail = paired_table(tidy_frame(rows(curves, 5, updates)), "current")
    final = paired_table(tidy_frame(rows(curves, 1, updates)), "current")
    mde_tail, mde_final = (t[t["strategy"] == "ropd"]["mde"].item() for t in (tail, final))
    assert mde_tail < 0.6 * mde_final


def test_the_accuracy_figure_shades_the_evaluations_the_tables_average(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.figure

    from replaylab.results.figures import accuracy_figure

    spans = []
    original = matplotlib.figure.Figure.savefig

    def keep(fig, *args, **kwargs):  # read the drawn axes before the figure is closed
        spans.append([(p.get_x(), p.get_x() + p.get_width()) for ax in fig.axes for p in ax.patches
                      if p.get_label().startswith("tables: mean")])
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    assert accuracy_figure(tidy_frame(rows(CURVES, tail=3, updates=UPDATES)), tmp_path / "a.png", "x").exists()
    accuracy_figure(tidy_frame(rows(CURVES, tail=1, updates=UPDATES)), tmp_path / "b.png", "x")
    assert spans == [[(100, 120)], []]  # the last three evaluations (100, 110, 120); none without a tail


def test_the_accuracy_figure_draws_compute_matched_finals_as_one_point_with_its_interval(tmp_path, monkeypatch):
    """Runs matched on compute end at different updates (tiny_fifo: 189, 191, 196): the curve's last points each
    held one run, so it had no band at all, or two, with an interval of -13 to 37%. Their final evaluations are
    drawn at the curve's mean final update, as the one value the tables report, with its interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.figure

    from replaylab.results.figures import accuracy_figure

    drawn = []
    original = matplotlib.figure.Figure.savefig

    def keep(fig, *args, **kwargs):
        (ax,) = [a for a in fig.axes if a.get_visible()]
        drawn.append(([list(line.get_xdata()) for line in ax.get_lines()], [list(line.get_ydata()) for line in ax.get_lines()],
                      len(ax.collections)))
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    matched = [r if r["update"] < 120 else {**r, "update": 120 + 3 * r["order"] + (r["strategy"] == "ropd")}
               for r in rows(CURVES, tail=1, updates=UPDATES)]
    accuracy_figure(tidy_frame(matched), tmp_path / "a.png", "x")
    [(xs, ys, bands)] = drawn
    assert xs == [[0, 40, 80, 100, 110, 123], [0, 40, 80, 100, 110, 124]]  # 120, 123, 126 -> 123; 121, 124, 127 -> 124
    assert bands == 2  # both curves keep their interval to the end
    for y, strategy in zip(ys, ("current", "ropd")):  # the final point is the tables' mean of the final values
        assert y[-1] == pytest.approx(100 * sum(c[-1] for c in CURVES[strategy]) / 3)
