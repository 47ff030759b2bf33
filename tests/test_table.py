"""The table builder: numbers equal a hand computation; missing and failed runs are marked; the
renderings and the `replaylab table` command carry the same values."""

from __future__ import annotations

import hashlib
import json
import math

import pandas as pd
import pytest

from replaylab.results.frame import DONE, UNFINISHED, NoRowsError, identity_from_config, tidy_frame
from replaylab.results.table import build_table, t_interval, t_quantile, to_latex, to_markdown

T2 = 4.302652729749464  # t_{0.975, 2}
T1 = 12.706204736174707  # t_{0.975, 1}

# (strategy, budget) -> {order: (add2, mul2)} at the final update 10; the suite mean is their mean.
FINAL = {
    ("current", "short"): {0: (0.50, 0.30), 1: (0.90, 0.90), 2: (0.70, 0.20)},
    ("current", "long"): {0: (0.60, 0.40), 1: (0.65, 0.45), 2: (0.70, 0.50)},
    ("ropd", "short"): {0: (0.55, 0.35), 1: (0.60, 0.30), 2: (0.80, 0.40)},
    ("ropd", "long"): {0: (0.80, 0.60), 1: (0.90, 0.70)},  # order 2 missing: no run at all
}
FAILED = ("current", "short", 1)  # has rows up to update 10 but no done.json
TOKENS = {"short": 24, "long": 48}


def run_rows(strategy: str, budget: str, order: int, model: str = "tiny://student") -> list[dict]:
    """Rows of one run: evals at updates 5 and 10 (the final), a train row, ledger on each."""
    name = f"opd-{strategy}-{hashlib.sha256(f'{strategy}{budget}{order}{model}'.encode()).hexdigest()[:16]}"
    ident = {"run": name, "config_hash": name[-16:], "experiment": "exp", "strategy": strategy, "trainer": "opd",
             "objective": "opd_full_rkl", "model": model, "teacher": "tiny://teacher", "data": "tiny_arith",
             "order": order, "budget": budget, "max_response_tokens": TOKENS[budget], "seed": 0,
             "prompts_per_iteration": 8, "samples_per_prompt": 1, "resample_period": 1, "versions": "test"}
    add, mul = FINAL[(strategy, budget)][order]
    out = []
    for update, shift in ((5, -0.2), (10, 0.0)):
        ledger = {"ledger_updates": update, "ledger_trajectories": 8 * update, "ledger_teacher_tokens_scored": 100 * update}
        for bench, acc in (("tiny8/add2", add + shift), ("tiny8/mul2", mul + shift), ("tiny8/mean", (add + mul) / 2 + shift)):
            for metric, value in (("avg@k", acc), ("mean_response_tokens", 10.0 * (order + 1))):
                out.append({**ident, "split": "eval", "update": update, "iteration": update, "benchmark": bench,
                            "metric": metric, "value": value, "n": 8, **ledger})
        out.append({**ident, "split": "train", "update": update, "iteration": update, "benchmark": "",
                    "metric": "reverse_kl", "value": 1.0 / update, "n": None, **ledger})
    return out


def all_runs() -> dict[tuple[str, str, int], list[dict]]:
    return {(s, b, o): run_rows(s, b, o) for (s, b), orders in FINAL.items() for o in orders}


def frame() -> pd.DataFrame:
    records = [{**r, "status": UNFINISHED if key == FAILED else DONE} for key, rows in all_runs().items() for r in rows]
    return tidy_frame(records)


def cell(table: pd.DataFrame, **where) -> pd.Series:
    mask = pd.Series(True, index=table.index)
    for k, v in where.items():
        mask &= table[k] == v
    assert mask.sum() == 1, (where, mask.sum())
    return table[mask].iloc[0]


def hand(values: list[float]) -> tuple[float, float, float]:
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = {3: T2, 2: T1}[n] * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def test_t_quantile_matches_tables():
    assert t_quantile(0.975, 2) == pytest.approx(T2, abs=1e-9)
    assert t_quantile(0.975, 1) == pytest.approx(T1, abs=1e-9)
    assert t_quantile(0.975, 4) == pytest.approx(2.7764451051977987, abs=1e-9)
    assert t_quantile(0.025, 10) == pytest.approx(-2.2281388519649385, abs=1e-9)
    mean, sd, lo, hi, n = t_interval([3.0])
    assert (mean, n) == (3.0, 1) and math.isnan(sd) and math.isnan(lo) and math.isnan(hi)


def test_build_table_equals_hand_computation():
    table = build_table(frame())
    assert table.attrs["keys"] == ["budget", "strategy"]
    # 2 budgets x 2 strategies x 3 benchmarks, suite mean last
    assert len(table) == 12
    assert list(table["benchmark"][:3]) == ["tiny8/add2", "tiny8/mul2", "tiny8/mean"]
    for (strategy, budget), orders in FINAL.items():
        for i, bench in enumerate(("tiny8/add2", "tiny8/mul2", "tiny8/mean")):
            used = [o for o in orders if (strategy, budget, o) != FAILED]
            values = [100 * (orders[o][i] if i < 2 else sum(orders[o]) / 2) for o in used]
            mean, lo, hi = hand(values)
            c = cell(table, strategy=strategy, budget=budget, benchmark=bench)
            assert c["mean"] == pytest.approx(mean, abs=1e-9)
            assert c["ci_low"] == pytest.approx(lo, abs=1e-9) and c["ci_high"] == pytest.approx(hi, abs=1e-9)
            assert c["n"] == len(used) and c["n_expected"] == 3 and c["unit"] == "%"
            # the matched budget: ledger at the final evaluation (update 10)
            assert (c["updates"], c["trajectories"], c["teacher_tokens"]) == (10, 80, 1000)


def test_missing_order_and_failed_run_are_marked():
    table = build_table(frame())
    failed = cell(table, strategy="current", budget="short", benchmark="tiny8/mean")
    assert (failed["n"], failed["n_expected"], failed["missing_orders"]) == (2, 3, "1")
    assert "order 1: failed/running" in failed["notes"]
    missing = cell(table, strategy="ropd", budget="long", benchmark="tiny8/mean")
    assert (missing["n"], missing["orders"], missing["missing_orders"]) == (2, "0,1", "2")
    assert "order 2: no run" in missing["notes"]
    md = to_markdown(table)
    assert md.count("2/3") == 2 and "order 1: failed/running" in md and "order 2: no run" in md


def test_fixed_update_includes_unfinished_runs_that_reached_it():
    table = build_table(frame(), update=5)
    c = cell(table, strategy="current", budget="short", benchmark="tiny8/add2")
    assert c["n"] == 3 and "included" in c["notes"]
    assert c["mean"] == pytest.approx(100 * (0.3 + 0.7 + 0.5) / 3, abs=1e-9)
    assert c["updates"] == 5


def test_single_order_shows_value_and_n():
    df = frame()
    one = df[(df["order"] == 0)]
    table = build_table(one)
    c = cell(table, strategy="ropd", budget="long", benchmark="tiny8/add2")
    assert c["n"] == 1 and c["mean"] == pytest.approx(80.0) and math.isnan(c["ci_low"])
    assert "80.0 (n=1)" in to_markdown(table)


def test_budget_axes_table_groups_by_any_identity_columns():
    df = frame()
    df = df[df["strategy"] == "current"].copy()
    df.loc[df["order"] == 2, "prompts_per_iteration"] = 16  # a second cell of the grid
    df.loc[df["order"] == 2, "order"] = 0
    table = build_table(df, metrics=["avg@k", "mean_response_tokens"], benchmarks=["mean"],
                        by=["prompts_per_iteration", "resample_period"])
    c = cell(table, budget="long", prompts_per_iteration=8, metric="avg@k")
    assert c["mean"] == pytest.approx(100 * (0.5 + 0.55) / 2) and c["n"] == 2
    c = cell(table, budget="long", prompts_per_iteration=8, metric="mean_response_tokens")
    assert c["mean"] == pytest.approx(15.0) and c["unit"] == ""
    assert list(table.loc[table["budget"] == "long", "prompts_per_iteration"].unique()) == [8, 16]  # numeric order
    assert cell(table, budget="long", prompts_per_iteration=16, metric="avg@k")["n"] == 1
    md = to_markdown(table)
    assert "avg@k (%)" in md and "mean_response_tokens" in md


def test_varying_model_becomes_a_row_key_and_mixed_configs_are_refused():
    records = [{**r, "status": DONE} for o in (0, 1) for m in ("a", "b") for r in run_rows("current", "long", o, model=m)]
    df = tidy_frame(records)
    table = build_table(df)
    assert table.attrs["keys"] == ["budget", "strategy", "model"]
    assert set(table["model"]) == {"a", "b"}
    with pytest.raises(ValueError, match="differ in \\['model'\\]"):
        build_table(df, by=["strategy"])


def test_clear_errors():
    with pytest.raises(ValueError, match="avg@K"):
        build_table(frame(), metrics="avg@K")
    df = frame()
    with pytest.raises(NoRowsError, match="no eval rows"):
        build_table(df[df["split"] == "train"])
    with pytest.raises(KeyError, match="nosuch"):
        build_table(df, by=["nosuch"])


def test_identity_from_config_plain_and_legacy_order():
    cfg = {"strategy": {"name": "ropd"}, "trainer": {"kind": "grpo"}, "teacher": {"name_or_path": "t"}, "order": 2}
    ident = identity_from_config(cfg)
    assert (ident["strategy"], ident["trainer"], ident["order"], ident["teacher"]) == ("ropd", "grpo", 2, "")
    assert identity_from_config({"order": {"index": 1}})["order"] == 1  # configs from before order was a plain key


def test_latex_escapes_and_has_values():
    tex = to_latex(build_table(frame()), "exp")
    assert r"\begin{tabular}" in tex and r"$\pm$" in tex and r"budget = long" in tex
    assert "_" not in tex.replace("\\_", "")


def test_latex_comments_every_line_of_the_run_notes():
    """Runs of two code versions: the description gains a note paragraph, whose lines must stay LaTeX comments
    (a bare `_` in text stops LaTeX with "Missing $ inserted")."""
    records = [{**r, "status": UNFINISHED if key == FAILED else DONE,
                "versions": f"replaylab_code={'abc' if key[2] % 2 else 'def'}"}
               for key, rows in all_runs().items() for r in rows]
    tex = to_latex(build_table(tidy_frame(records)), "exp")
    assert "replaylab_code=def" in tex  # the note is there, as a comment
    body = "\n".join(line for line in tex.splitlines() if not line.startswith("%"))
    assert "_" not in body.replace("\\_", ""), body


# --- the command on run directories ---------------------------------------------------------------

def write_runs(root, with_empty_run: bool = True):
    exp = root / "exp"
    for (s, b, o), rows in all_runs().items():
        d = exp / rows[0]["run"]
        d.mkdir(parents=True)
        (d / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if (s, b, o) != FAILED:
            (d / "done.json").write_text("{}")
    if with_empty_run:  # failed before logging anything: only its config
        d = exp / "opd-recent-00000000000000aa"
        d.mkdir()
        (d / "config.yaml").write_text("experiment: exp\nstrategy: {name: recent}\norder: 0\n"
                                       "trainer: {kind: opd, objective: opd_full_rkl, seed: 0, prompts_per_iteration: 8,"
                                       " samples_per_prompt: 1, resample_period: 1}\nmodel: {name_or_path: tiny://student}\n"
                                       "teacher: {name_or_path: tiny://teacher}\ndata: {name: tiny_arith}\n"
                                       "budget: {name: short, max_response_tokens: 24}\n")
    return exp


def test_cli_table_on_run_directories(tmp_path, capsys):
    from replaylab.cli.main import main

    exp = write_runs(tmp_path)
    assert main(["table", str(exp)]) == 0
    out = capsys.readouterr().out
    mean, lo, hi = hand([100 * 0.4, 100 * 0.45])  # current/short suite mean, orders 0 and 2
    assert f"{mean:.1f} ± {(hi - lo) / 2:.1f}" in out
    assert "order 1: failed/running" in out and "order 2: no run" in out
    recent = [line for line in out.splitlines() if line.startswith("| recent")]
    assert len(recent) == 2 and all("—" in line for line in recent)  # marked in both budgets, not dropped
    assert "order 0: failed/running" in recent[0] and "order 0,1,2: no run" in recent[1]  # short (24) first
    tables = exp / "tables"
    md, tex, csv = (tables / f"table_avg_at_k.{ext}" for ext in ("md", "tex", "csv"))
    assert md.exists() and tex.exists() and csv.exists()
    assert f"{mean:.1f} ± {(hi - lo) / 2:.1f}" in md.read_text() and r"$\pm$" in tex.read_text()
    tidy = pd.read_csv(csv)
    row = tidy[(tidy.strategy == "current") & (tidy.budget == "short") & (tidy.benchmark == "tiny8/mean")].iloc[0]
    assert row["mean"] == pytest.approx(mean) and row["ci_low"] == pytest.approx(lo) and row["n"] == 2


def test_cli_budget_axes_and_options(tmp_path, capsys):
    from replaylab.cli.main import main

    exp = write_runs(tmp_path, with_empty_run=False)
    out_dir = tmp_path / "out"
    assert main(["table", str(exp), "--by", "strategy,resample_period", "--columns", "metric", "--format", "csv",
                 "--out", str(out_dir), "--update", "10"]) == 0
    assert "mean_response_tokens" in capsys.readouterr().out
    written = list(out_dir.iterdir())
    assert [p.name for p in written] == ["table_avg_at_k_mean_response_tokens_by_strategy-resample_period_update10.csv"]


def test_cli_names_the_path_when_no_rows(tmp_path, capsys):
    from replaylab.cli.main import main

    assert main(["table", str(tmp_path / "nope")]) == 2
    assert f"{tmp_path / 'nope'}" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["table", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "empty") in err and "no rows found" in err


def test_a_rows_line_that_is_json_but_not_an_object_is_named(tmp_path, capsys):
    """`[1, 2]` in a run's rows.jsonl: the table command names the file and line (exit 2), not a traceback."""
    from replaylab.cli.main import main

    exp = write_runs(tmp_path, with_empty_run=False)
    rows_file = sorted(exp.glob("*/rows.jsonl"))[0]
    lines = len(rows_file.read_text().splitlines())
    with open(rows_file, "a") as f:
        f.write("[1, 2]\n")
    assert main(["table", str(exp)]) == 2
    assert f"{rows_file}:{lines + 1}: not a JSON row (a JSON list" in capsys.readouterr().err


def test_cli_table_says_when_runs_come_from_several_versions(tmp_path, capsys):
    """Runs of two CPUs (or code versions) are averaged as data orders only with a sentence that says so,
    naming the differing part of `versions` and how many runs each; one version: no such sentence."""
    from replaylab.cli.main import main

    exp = write_runs(tmp_path, with_empty_run=False)
    assert main(["table", str(exp)]) == 0
    assert "Runs from" not in capsys.readouterr().out
    moved = 0
    for rows_file in exp.glob("*/rows.jsonl"):
        rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
        if rows[0]["order"] == 2:
            rows_file.write_text("".join(json.dumps({**r, "versions": "test cpu=Other/AVX2"}) + "\n" for r in rows))
            moved += 1
    assert moved == 3
    for args in (["table", str(exp)], ["table", str(exp), "--paired", "current"]):
        assert main(args) == 0
        out = capsys.readouterr().out
        assert "Runs from 2 versions" in out and "3 runs of `cpu=Other/AVX2`" in out and "8 runs of `test`" in out
    assert "Runs from 2 versions" in (exp / "tables" / "table_avg_at_k.md").read_text()


@pytest.mark.parametrize("flags,named", [
    (["--paired", "current", "--by", "seed"], "--by has no effect with --paired"),
    (["--paired", "current", "--format", "latex"], "--format has no effect with --paired"),
    (["--paired", "current", "--columns", "metric"], "--columns has no effect with --paired"),
    (["--columns", "metric", "--metric", "avg@k", "--benchmark", "mean"], "--columns has no effect"),
    (["--paired", "current", "--metric", "avg@k,nosuch"], "metric ['nosuch'] not found"),  # was NaN rows, a false control
    (["--paired", "current", "--benchmark", "nosuch"], "benchmark ['nosuch'] not found"),  # was KeyError: 'diff'
    (["--benchmark", "mean,nosuch"], "benchmark ['nosuch'] not found"),  # was dropped from the list silently
])
def test_cli_table_refuses_flags_without_effect_and_unknown_names(tmp_path, capsys, flags, named):
    """A flag the chosen mode never reads, or a metric/benchmark name that matches nothing, is an error naming
    it (exit 2), with no table written."""
    from replaylab.cli.main import main

    exp = write_runs(tmp_path, with_empty_run=False)
    assert main(["table", str(exp), "--out", str(tmp_path / "out"), *flags]) == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
