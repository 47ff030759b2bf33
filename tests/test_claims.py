"""The claims report (issue 14): each check's paired interval against a hand computation, verdicts
that follow the stated rule and have power (a real effect is reproduced, a reversed one and a
well-measured null are contradicted, a noisy one is inconclusive), every measure, and the
`replaylab claims` command over run directories on disk, figures included."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import numpy as np
import pytest

from replaylab.cli.main import main
from replaylab.results.claims import Check, Claim, check_verdict, claim_verdict, run_check
from replaylab.results.frame import tidy_frame

T_975_3 = 3.182446305284263  # Student t, 0.975 quantile, 3 degrees of freedom (tables)


def runs(curves: dict[str, list[list[float]]], budget: str = "tiny", train: dict[str, list[float]] | None = None,
         rollouts: dict[str, list[float]] | None = None) -> list[dict]:
    """Rows of strategy x order runs: tiny8-mean evaluations at updates 0, 30, 60 (curves[strategy][order]),
    a train metric per update, and the ledger's fresh rollouts."""
    out = []
    for strategy, per_order in curves.items():
        for order, curve in enumerate(per_order):
            run = f"grpo-{strategy}-{budget}-{order}"
            ident = {"run": run, "config_hash": run, "experiment": "x", "strategy": strategy, "trainer": "grpo",
                     "objective": "grpo", "model": "m", "teacher": "", "data": "d", "order": order, "budget": budget,
                     "max_response_tokens": 48, "seed": 0, "prompts_per_iteration": 8, "samples_per_prompt": 4,
                     "resample_period": 1, "versions": "v", "status": "done"}
            fresh = (rollouts or {}).get(strategy, [0.0] * 9)[order]
            for update, value in zip((0, 30, 60), curve):
                out.append({**ident, "split": "eval", "update": update, "iteration": update, "benchmark": "mean",
                            "metric": "avg@k", "value": value, "n": 100, "ledger_fresh_trajectories": fresh * update / 60})
            for update, value in enumerate((train or {}).get(strategy, [[]] * 9)[order], start=1):
                out.append({**ident, "split": "train", "update": update, "iteration": update, "benchmark": "",
                            "metric": "zero_variance_groups", "value": value, "n": None})
    return out


def higher(label="x", **kw) -> Check:
    return Check(label, {"strategy": "new"}, {"strategy": "current"}, kw.pop("expect", "higher"), kw.pop("effect", 3.0), **kw)


def test_an_eval_check_matches_a_hand_paired_t_interval_and_is_reproduced():
    base = [[0.30, 0.33, 0.35], [0.31, 0.34, 0.36], [0.29, 0.30, 0.31], [0.30, 0.36, 0.40]]
    new = [[0.30, 0.40, 0.41], [0.31, 0.38, 0.40], [0.29, 0.35, 0.37], [0.30, 0.41, 0.45]]
    df = tidy_frame(runs({"current": base, "new": new}))
    r = run_check(df, higher())
    diffs = [100 * (n[-1] - b[-1]) for n, b in zip(new, base)]  # 5, 4, 6, 5 points
    mean = sum(diffs) / 4
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 3)
    half = T_975_3 * sd / 2
    assert r["diffs"] == pytest.approx(diffs) and r["n_pairs"] == 4
    assert (r["diff"], r["ci_low"], r["ci_high"]) == pytest.approx((mean, mean - half, mean + half))
    assert r["verdict"] == "reproduced"
    # the first evaluation after update 0 is update 30: 7, 4, 5, 5 points
    first = run_check(df, higher(update="first"))
    assert first["diffs"] == pytest.approx([7.0, 4.0, 5.0, 5.0])
    # power: the same data read the other way round is contradicted
    assert run_check(df, higher(expect="lower"))["verdict"] == "contradicted"


def test_verdict_rules_on_intervals():
    # higher: excludes 0 upwards / downwards; covers 0 with a small MDE (a 3-point effect would have been seen)
    assert check_verdict("higher", 0.5, 2.0, 1.0, 3.0) == "reproduced"
    assert check_verdict("higher", -2.0, -0.5, 1.0, 3.0) == "contradicted"
    assert check_verdict("higher", -1.0, 1.0, 2.0, 3.0) == "contradicted"
    assert check_verdict("higher", -4.0, 4.0, 9.0, 3.0) == "inconclusive"
    # covers 0 with a small MDE, but a 3-point gain lies inside the interval: nothing is ruled out
    assert check_verdict("higher", -0.1, 3.9, 2.8, 3.0) == "inconclusive"
    assert check_verdict("lower", -3.9, 0.1, 2.8, 3.0) == "inconclusive"
    assert check_verdict("lower", -2.0, -0.5, 1.0, 3.0) == "reproduced"
    # same: inside the band / clearly outside / straddling its edge
    assert check_verdict("same", -1.0, 2.0, 2.0, 3.0) == "reproduced"
    assert check_verdict("same", 3.5, 6.0, 2.0, 3.0) == "contradicted"
    assert check_verdict("same", 1.0, 4.0, 2.0, 3.0) == "inconclusive"
    assert check_verdict("not_higher", -1.0, 2.0, 5.0, 3.0) == "reproduced"
    assert check_verdict("not_higher", 0.5, 5.0, 5.0, 3.0) == "contradicted"
    # a significant gain below the effect: "helps" under `higher`, so not "does not help" under `not_higher`
    assert check_verdict("higher", 0.3, 2.8, 1.7, 3.0) == "reproduced"
    assert check_verdict("not_higher", 0.3, 2.8, 1.7, 3.0) == "contradicted"
    assert check_verdict("higher", math.nan, math.nan, math.nan, 3.0) == "too few pairs"
    claim = Claim("p", "s", "x", (higher(), higher()))
    assert claim_verdict(claim, ["reproduced", "reproduced"]) == "reproduced"
    assert claim_verdict(claim, ["reproduced", "inconclusive"]) == "inconclusive"
    assert claim_verdict(claim, ["reproduced", "contradicted"]) == "contradicted"
    uniform = Claim("p", "s", "x", (higher(), higher()), combine="not_uniform")
    assert claim_verdict(uniform, ["reproduced", "contradicted"]) == "reproduced"
    assert claim_verdict(uniform, ["reproduced", "reproduced"]) == "contradicted"
    # a check without pairs (its arm not run yet) decides nothing and hides no decisive check
    assert claim_verdict(claim, ["contradicted", "too few pairs"]) == "contradicted"
    assert claim_verdict(claim, ["reproduced", "too few pairs"]) == "inconclusive"
    assert claim_verdict(uniform, ["contradicted", "too few pairs"]) == "reproduced"
    assert claim_verdict(uniform, ["reproduced", "too few pairs"]) == "inconclusive"
    assert claim_verdict(claim, ["too few pairs", "too few pairs"]) == "too few pairs"
    assert claim_verdict(claim, []) == "not run"


def test_a_noisy_null_is_inconclusive_and_a_precise_null_contradicts_a_claimed_gain():
    base = [[0.3, 0.3, 0.30], [0.3, 0.3, 0.40], [0.3, 0.3, 0.35]]
    noisy = [[0.3, 0.3, 0.38], [0.3, 0.3, 0.33], [0.3, 0.3, 0.35]]  # +8, -7, 0: covers 0, MDE far above 3
    precise = [[0.3, 0.3, 0.302], [0.3, 0.3, 0.399], [0.3, 0.3, 0.351]]  # +0.2, -0.1, +0.1
    r = run_check(tidy_frame(runs({"current": base, "new": noisy})), higher())
    assert r["ci_low"] < 0 < r["ci_high"] and r["mde"] > 3 and r["verdict"] == "inconclusive"
    r = run_check(tidy_frame(runs({"current": base, "new": precise})), higher())
    assert r["ci_low"] < 0 < r["ci_high"] and r["mde"] < 3 and r["verdict"] == "contradicted"
    assert run_check(tidy_frame(runs({"current": base, "new": precise})), higher(expect="same"))["verdict"] == "reproduced"
    # a small spread (MDE under 3) around a promising mean (+1.0, +2.0, +0.5): the interval covers 0 and 3
    promising = [[0.3, 0.3, 0.310], [0.3, 0.3, 0.420], [0.3, 0.3, 0.355]]
    r = run_check(tidy_frame(runs({"current": base, "new": promising})), higher())
    assert r["ci_low"] < 0 and r["ci_high"] > 3 and r["mde"] < 3 and r["verdict"] == "inconclusive"


def not_uniform_reproduced(gains: list[float], sd: float, pairs: int, trials: int, seed: int = 0) -> float:
    """How often "X is not uniformly better" reads reproduced when X's true gain in each check is
    `gains[i]` points, paired differences normal with spread `sd` over `pairs` data orders."""
    import numpy as np

    from replaylab.results.paired import minimum_detectable_effect, paired_interval

    rng = np.random.default_rng(seed)
    mde_per_sd = minimum_detectable_effect(1.0, pairs)  # the MDE is proportional to the spread
    claim = Claim("p", "s", "x", tuple(higher(str(i)) for i in range(len(gains))), combine="not_uniform")
    hits = 0
    for _ in range(trials):
        verdicts = []
        for gain in gains:
            _, s, lo, hi, n = paired_interval(list(rng.normal(gain, sd, pairs)))
            verdicts.append(check_verdict("higher", lo, hi, mde_per_sd * s, 3.0))
        hits += claim_verdict(claim, verdicts) == "reproduced"
    return hits / trials


def test_a_not_uniform_claim_is_not_reproduced_by_gains_the_size_that_matters():
    """Eight checks (as the budget-axes claims have), each a true 3-point gain, five orders, spread 1.6
    points: "not uniformly better" must rarely read reproduced. The earlier rule (a small MDE alone
    contradicted a check) did so in 19% of 400 trials, as any of eight checks could fall in the band where
    the interval covers 0 and 3; this one in 4%. And it has power: with one check's gain 0 (the others 5),
    the claim is reproduced in most trials."""
    from replaylab.results.paired import minimum_detectable_effect

    assert minimum_detectable_effect(1.6, 5) == pytest.approx(1.6 * minimum_detectable_effect(1.0, 5), rel=1e-6)
    assert not_uniform_reproduced([3.0] * 8, 1.6, 5, 400) <= 0.08
    assert not_uniform_reproduced([5.0] * 7 + [0.0], 1.6, 5, 400) >= 0.5


def test_train_mean_ledger_and_updates_to_level_measures():
    base = [[0.30, 0.33, 0.40], [0.30, 0.35, 0.38], [0.30, 0.36, 0.37]]
    fast = [[0.30, 0.41, 0.42], [0.30, 0.39, 0.40], [0.30, 0.36, 0.36]]  # reaches the peak at 30, 30, never
    train = {"current": [[0.6, 0.5, 0.4]] * 3, "new": [[0.3, 0.2, 0.1], [0.4, 0.3, 0.2], [0.2, 0.2, 0.2]]}
    df = tidy_frame(runs({"current": base, "new": fast}, train=train,
                         rollouts={"current": [800.0] * 3, "new": [500.0, 520.0, 610.0]}))
    zv = run_check(df, higher(expect="lower", effect=0.05, measure="train_mean", metric="zero_variance_groups"))
    assert zv["diffs"] == pytest.approx([0.2 - 0.5, 0.3 - 0.5, 0.2 - 0.5]) and zv["verdict"] == "reproduced"
    roll = run_check(df, higher(expect="lower", effect=0.0, measure="ledger", metric="fresh_trajectories"))
    assert roll["diffs"] == pytest.approx([-300.0, -280.0, -190.0]) and roll["verdict"] == "reproduced"
    # exact counts with no spread (an arm that spends exactly the reference's rollouts): the point is the
    # answer, so "fewer rollouts" is contradicted, not left inconclusive for want of an MDE
    same = tidy_frame(runs({"current": base, "new": fast}, rollouts={"current": [800.0] * 3, "new": [800.0] * 3}))
    even = run_check(same, higher(expect="lower", effect=0.0, measure="ledger", metric="fresh_trajectories"))
    assert even["diffs"] == [0.0, 0.0, 0.0] and even["verdict"] == "contradicted"
    fewer = tidy_frame(runs({"current": base, "new": fast}, rollouts={"current": [800.0] * 3, "new": [700.0] * 3}))
    assert run_check(fewer, higher(expect="lower", effect=0.0, measure="ledger",
                                   metric="fresh_trajectories"))["verdict"] == "reproduced"
    peak = run_check(df, higher(expect="lower", effect=30.0, measure="updates_to_level"))
    # targets: the baseline's final accuracy over the other orders, 0.375, 0.385, 0.39. The baseline
    # reaches them at 60, never, never (censored: 60 + 30); the new arm at 30, 30, never
    assert peak["diffs"] == pytest.approx([-30.0, -60.0, 0.0])
    assert peak["verdict"] == "inconclusive"  # one order level: not enough for three pairs, nor a contradiction
    # a stale run of an older commit beside one of the baseline's: its curve must not merge into the pair's
    stale = [{**r, "run": r["run"] + "-old", "config_hash": "old", "versions": "older"}
             for r in runs({"current": base}) if r["order"] == 0]
    with pytest.raises(ValueError, match="several runs per.*same cell under two config hashes"):
        run_check(tidy_frame(runs({"current": base, "new": fast}) + stale),
                  higher(expect="lower", effect=30.0, measure="updates_to_level"))


def race(lead: int, trials: int, seed: int = 0) -> list[float]:
    """Per-pair differences of updates_to_level (rlep - current) through run_check, over `trials` sweeps of
    five orders evaluated at updates 0-200 (a GRPO-like curve, order spread 2 points, evaluation noise
    1.5): rlep's curve is current's moved `lead` evaluations earlier."""
    import numpy as np

    rng = np.random.default_rng(seed)
    curve = np.array([29.8, 34.5, 36.3, 37.5, 38.2, 38.7, 39.0])
    check = Check("race", {"strategy": "rlep"}, {"strategy": "current"}, "lower", 50.0, measure="updates_to_level")
    diffs: list[float] = []
    for _ in range(trials):
        rows = []
        for order in range(5):
            shift, noise = rng.normal(0, 2.0), rng.normal(0, 1.5, (2, 5))
            base = curve[:5] + shift + noise[0]
            arm = curve[lead:lead + 5] + shift + noise[1]
            arm[0] = base[0]  # update 0: the same initial model, the same evaluation
            for strategy, values in (("current", base), ("rlep", arm)):
                ident = {"run": f"{strategy}-{order}", "config_hash": f"{strategy}-{order}", "experiment": "x",
                         "strategy": strategy, "order": order, "budget": "b", "seed": 0, "versions": "v", "status": "done"}
                rows += [{**ident, "split": "eval", "update": 50 * i, "iteration": 50 * i, "benchmark": "mean",
                          "metric": "avg@k", "value": float(v) / 100, "n": 2400} for i, v in enumerate(values)]
        diffs += run_check(tidy_frame(rows), check)["diffs"]
    return diffs


def test_updates_to_level_is_unbiased_without_a_lead_and_sees_one():
    """Timing both arms to a level read from the pair's own baseline (its peak, the earlier rule) gave
    +33 updates with no real difference (the baseline reaches its own noisy peak by construction) and
    cancelled a true one-evaluation lead to 0. The leave-one-out level must be unbiased and see the lead."""
    same = race(lead=0, trials=60)
    ahead = race(lead=1, trials=60)
    spread = float(np.std(same)) / math.sqrt(len(same))
    assert abs(float(np.mean(same))) < 3 * spread + 2.0
    assert float(np.mean(ahead)) < -20.0


def write_sweep(sweep_dir, records) -> None:
    """The records as finished run directories of one sweep (rows.jsonl and done.json each)."""
    for row in records:
        run_dir = sweep_dir / f"{row['run']}-{'0' * 16}"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "done.json").write_text("{}")
        with open(run_dir / "rows.jsonl", "a") as f:
            f.write(json.dumps({k: v for k, v in row.items() if k != "status"}) + "\n")


def test_claims_command_writes_a_report_and_one_figure_per_claim(tmp_path, monkeypatch):
    from PIL import Image

    from replaylab.results import tiny_claims

    base = [[0.30, 0.33, 0.35], [0.31, 0.34, 0.36], [0.29, 0.30, 0.31], [0.30, 0.36, 0.40]]
    new = [[0.30, 0.40, 0.41], [0.31, 0.38, 0.40], [0.29, 0.35, 0.37], [0.30, 0.41, 0.45]]
    write_sweep(tmp_path / "runs" / "demo", runs({"current": base, "new": new}))
    claims = (Claim("Demo", "new beats current", "demo", (higher("final"), higher("first", update="first"))),
              Claim("Demo", "a sweep nobody ran", "absent", (higher(),)),
              Claim("Demo", "an arm nobody ran", "demo",
                    (Check("ghost", {"strategy": "ghost"}, {"strategy": "current"}, "higher", 3.0),)),
              # one check contradicted, the other without pairs: the claim is contradicted, not left open
              Claim("Demo", "current beats new, and the ghost too", "demo",
                    (Check("current", {"strategy": "current"}, {"strategy": "new"}, "higher", 3.0),
                     Check("ghost", {"strategy": "ghost"}, {"strategy": "current"}, "higher", 3.0))))
    monkeypatch.setattr(tiny_claims, "CLAIMS", claims)
    monkeypatch.setattr(tiny_claims, "CONTROLS", {"demo": "current"})
    out = tmp_path / "reports" / "claims.md"
    assert main(["claims", str(tmp_path / "runs"), "--out", str(out)]) == 0
    text = out.read_text()
    summary = text.split("## Known-effect controls")[0]
    assert any("new beats current" in line and "reproduced" in line for line in summary.splitlines())
    assert any("a sweep nobody ran" in line and "not run" in line for line in summary.splitlines())
    assert any("an arm nobody ran" in line and "too few pairs" in line for line in summary.splitlines())
    assert any("the ghost too" in line and "contradicted" in line for line in summary.splitlines())
    assert "control detected" in text  # current learns from update 30 to 60 in every order
    assert any("new beats current" in line and "| detected" in line for line in summary.splitlines())
    figure = out.parent / "claims_01.png"
    assert figure.exists() and not (out.parent / "claims_02.png").exists()
    assert not (out.parent / "claims_03.png").exists()  # no empty figure for an arm without runs
    assert (out.parent / "claims_04.png").exists()  # the check with pairs is drawn
    assert Image.open(figure).size[0] > 500
    assert text.startswith("# Tiny-world claims report") and "minimum detectable effect (MDE)" in text


def test_a_check_whose_pairs_are_mostly_equal_says_so_and_a_not_uniform_claim_states_its_error_rate(tmp_path, monkeypatch):
    """An arm that equals the comparison in most orders (an R-OPD run whose trigger never switched): the
    report counts the pairs that differ and warns that the t-interval undercovers; one that differs in
    every order gets neither. A not_uniform claim names its checks and the rate of chance reproduction."""
    from replaylab.results import tiny_claims

    base = [[0.30, 0.33, 0.35], [0.31, 0.34, 0.36], [0.29, 0.30, 0.31], [0.30, 0.36, 0.40]]
    rare = [base[0], base[1], base[2], [0.30, 0.36, 0.49]]  # differs in one order of four
    new = [[0.30, 0.40, 0.41], [0.31, 0.38, 0.40], [0.29, 0.35, 0.37], [0.30, 0.41, 0.45]]
    write_sweep(tmp_path / "runs" / "demo", runs({"current": base, "rare": rare, "new": new}))
    claims = (Claim("Demo", "rare beats current", "demo",
                    (Check("rare", {"strategy": "rare"}, {"strategy": "current"}, "higher", 3.0),
                     higher("every order"))),
              Claim("Demo", "new is not uniformly better", "demo", (higher("a"), higher("b")), combine="not_uniform"))
    monkeypatch.setattr(tiny_claims, "CLAIMS", claims)
    monkeypatch.setattr(tiny_claims, "CONTROLS", {"demo": "current"})
    out = tmp_path / "claims.md"
    assert main(["claims", str(tmp_path / "runs"), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| 4 (1 differ) |" in text
    assert "Check 'rare': 1 of its 4 pairs differ" in text and "undercovers" in text
    assert "Check 'every order'" not in text and "| 4 (" not in text.split("| every order")[1].splitlines()[0]
    assert "Per check, its 2 checks are read without a multiplicity correction" in text


def test_a_check_names_the_runs_it_leaves_out(tmp_path, monkeypatch):
    """An arm whose run on one order did not finish, and a comparison run with no partner: the check is
    computed on the pairs left, and the report names what it left out (nothing when nothing is)."""
    from replaylab.results import tiny_claims
    from replaylab.results.frame import UNFINISHED

    base = [[0.30, 0.33, 0.35], [0.31, 0.34, 0.36], [0.29, 0.30, 0.31], [0.30, 0.36, 0.40]]
    new = [[0.30, 0.40, 0.41], [0.31, 0.38, 0.40], [0.29, 0.35, 0.37]]  # no run on order 3
    records = runs({"current": base, "new": new})
    records = [dict(r, status=UNFINISHED) if r["run"] == "grpo-new-tiny-2" else r for r in records]
    r = run_check(tidy_frame(records), higher())
    assert r["n_pairs"] == 2
    assert r["left_out"] == ("unfinished runs of the arm: grpo-new-tiny-2; (order, seed) only the comparison has: "
                             "(2, 0), (3, 0)")
    assert run_check(tidy_frame(runs({"current": base[:3], "new": new})), higher())["left_out"] == ""
    write_sweep(tmp_path / "runs" / "demo", [x for x in records if x["run"] != "grpo-new-tiny-2"])
    monkeypatch.setattr(tiny_claims, "CLAIMS", (Claim("Demo", "new beats current", "demo", (higher("final"),)),))
    monkeypatch.setattr(tiny_claims, "CONTROLS", {"demo": "current"})
    out = tmp_path / "claims.md"
    assert main(["claims", str(tmp_path / "runs"), "--out", str(out)]) == 0
    assert "Check 'final' leaves out (order, seed) only the comparison has: (2, 0), (3, 0)." in out.read_text()


def test_a_numeric_arm_filter_matches_a_float_column():
    """Identity columns with a missing value are float in the frame: prompts_per_iteration=8 must still match 8.0."""
    base = [[0.30, 0.33, 0.35], [0.31, 0.34, 0.36], [0.29, 0.30, 0.31]]
    records = runs({"current": base, "new": [[0.3, 0.4, 0.45]] * 3})
    records.append({**records[0], "run": "placeholder", "prompts_per_iteration": None, "split": "", "metric": ""})
    df = tidy_frame(records)
    assert df["prompts_per_iteration"].dtype.kind == "f"
    check = Check("q", {"strategy": "new", "prompts_per_iteration": 8}, {"strategy": "current", "prompts_per_iteration": 8},
                  "higher", 3.0)
    assert run_check(df, check)["n_pairs"] == 3


def test_a_sweep_whose_control_fails_is_marked_in_the_summary(tmp_path, monkeypatch):
    """The reference stops learning after half its run: the sweep's control is not detected, and every
    claim on it says so beside its verdict (the test fails if the mark is dropped)."""
    from replaylab.results import tiny_claims

    flat = [[0.30, 0.35, 0.35], [0.31, 0.36, 0.355], [0.29, 0.33, 0.335], [0.30, 0.36, 0.36]]
    new = [[0.30, 0.40, 0.41], [0.31, 0.38, 0.40], [0.29, 0.35, 0.37], [0.30, 0.41, 0.45]]
    write_sweep(tmp_path / "runs" / "plateau", runs({"current": flat, "new": new}))
    monkeypatch.setattr(tiny_claims, "CLAIMS", (Claim("Demo", "new beats current", "plateau", (higher("final"),)),))
    monkeypatch.setattr(tiny_claims, "CONTROLS", {"plateau": "current"})
    out = tmp_path / "claims.md"
    assert main(["claims", str(tmp_path / "runs"), "--out", str(out)]) == 0
    summary = out.read_text().split("## Known-effect controls")[0]
    assert any("new beats current" in line and "NOT detected" in line for line in summary.splitlines())


def test_a_stale_run_of_an_older_commit_beside_its_cell_is_named_and_nothing_is_written(tmp_path, monkeypatch, capsys):
    """A sweep re-run after a config change leaves the old runs beside the new ones (other config hashes,
    other code versions): the report must not average or pick one silently; it names both and says so."""
    from replaylab.results import tiny_claims

    base = [[0.30, 0.33, 0.35], [0.31, 0.34, 0.36], [0.29, 0.30, 0.31]]
    records = runs({"current": base, "new": [[0.3, 0.4, 0.45]] * 3})
    stale = [{**r, "run": r["run"].replace("tiny-", "tiny-old-"), "config_hash": "old", "versions": "replaylab_code=older"}
             for r in records if r["strategy"] == "current" and r["order"] in (0, 1)]
    write_sweep(tmp_path / "runs" / "demo", records + stale)
    monkeypatch.setattr(tiny_claims, "CLAIMS", (Claim("Demo", "new beats current", "demo", (higher("final"),)),))
    monkeypatch.setattr(tiny_claims, "CONTROLS", {"demo": "current"})
    out = tmp_path / "claims.md"
    assert main(["claims", str(tmp_path / "runs"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    # two stale orders: the two runs named are one (order, seed)'s, not any two with a duplicated pair
    named = re.findall(r": runs (\S+) \([^)]*\) and (\S+) \(", err)
    assert named in ([("grpo-current-tiny-0", "grpo-current-tiny-old-0")], [("grpo-current-tiny-1", "grpo-current-tiny-old-1")])
    assert "move the stale one out" in err
    assert not out.exists()
    # the table says the same, and tells a run of another seed (a real difference) apart from a stale twin
    from replaylab.results.aggregation import build_table

    with pytest.raises(ValueError, match="same cell under two config hashes.*replaylab_code=older"):
        build_table(tidy_frame(records + stale))
    other_seed = [{**r, "seed": 1} for r in stale]
    with pytest.raises(ValueError, match=r"they differ in \['seed'\]"):
        build_table(tidy_frame(records + other_seed))


def test_a_reference_in_several_configurations_gets_one_control_each(tmp_path, monkeypatch):
    """The budget axes run the reference in several queries x samples cells per budget: each cell gets
    its own control (pooling them pairs one order with several values), and the summary counts the
    failed ones: the cell that learns is detected, the one that plateaus is not."""
    from replaylab.results import tiny_claims

    learns = [[0.30, 0.33, 0.35], [0.31, 0.34, 0.36], [0.29, 0.30, 0.31], [0.30, 0.36, 0.40]]
    flat = [[0.30, 0.35, 0.35], [0.31, 0.36, 0.355], [0.29, 0.33, 0.335], [0.30, 0.36, 0.36]]
    records = runs({"current": learns}) + [
        {**r, "run": r["run"] + "-q32", "config_hash": r["run"] + "-q32", "prompts_per_iteration": 32}
        for r in runs({"current": flat})]
    write_sweep(tmp_path / "runs" / "axes", records)
    check = Check("q8 - q32", {"strategy": "current", "prompts_per_iteration": 8},
                  {"strategy": "current", "prompts_per_iteration": 32}, "higher", 3.0)
    monkeypatch.setattr(tiny_claims, "CLAIMS", (Claim("Demo", "a claim", "axes", (check,)),))
    monkeypatch.setattr(tiny_claims, "CONTROLS", {"axes": "current"})
    out = tmp_path / "claims.md"
    assert main(["claims", str(tmp_path / "runs"), "--out", str(out)]) == 0
    summary, controls = out.read_text().split("## Known-effect controls")
    rows = [line for line in controls.splitlines() if "control: current" in line]
    assert len(rows) == 2
    assert any("prompts_per_iteration=8" in r and "control detected" in r for r in rows)
    assert any("prompts_per_iteration=32" in r and "NOT DETECTED" in r for r in rows)
    assert any("a claim" in line and "NOT detected (1 of 2)" in line for line in summary.splitlines())


def test_every_claim_reads_a_sweep_that_runs_its_arms_and_make_tiny_claims_runs_it():
    """A claim names its sweep and arms by hand: each sweep must compose, run a strategy whose table name
    (label, else name) is every arm's, and be in the Makefile's CLAIM_SWEEPS (else it is never run)."""
    import re
    from pathlib import Path

    from conftest import compose
    from replaylab.results.tiny_claims import CLAIMS, CONTROLS

    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    claim_sweeps = set(re.search(r"^CLAIM_SWEEPS \?= (.*)$", makefile, re.M).group(1).split())
    sweeps = {c.sweep for c in CLAIMS} | set(CONTROLS)
    assert sweeps <= claim_sweeps
    for extension in claim_sweeps - sweeps:  # more cells of a claims sweep (tiny_ropd_long: more orders)
        assert compose([f"+sweep={extension}"]).experiment in sweeps, extension
        # the Makefile hands `claims --sweeps` the experiments as CLAIM_SWEEPS without a `_long` suffix
        assert extension.removesuffix("_long") == compose([f"+sweep={extension}"]).experiment, extension
    assert "--sweeps $(subst $() ,$(comma),$(sort $(patsubst %_long,%,$(CLAIM_SWEEPS))))" in makefile
    for sweep in sweeps:
        cfg = compose([f"+sweep={sweep}"], return_hydra_config=True)
        assert cfg.experiment == sweep
        names = set()
        for option in str(cfg.hydra.sweeper.params.strategy).split(","):
            s = compose([f"+sweep={sweep}", f"strategy={option}"]).strategy
            names.add(s.get("label") or s.name)
        arms = {arm["strategy"] for c in CLAIMS if c.sweep == sweep for check in c.checks
                for arm in (check.arm, check.against)} | ({CONTROLS[sweep]} if sweep in CONTROLS else set())
        assert arms <= names, (sweep, arms - names)
        # a check filtered on a response budget the sweep never runs would read no rows ("not run")
        params = cfg.hydra.sweeper.params
        options = str(params.budget).split(",") if "budget" in params else [None]
        budgets = {compose([f"+sweep={sweep}"] + ([f"budget={o}"] if o else [])).budget.name for o in options}
        wanted = {check.where["budget"] for c in CLAIMS if c.sweep == sweep for check in c.checks if "budget" in check.where}
        assert wanted <= budgets, (sweep, wanted - budgets)


def test_make_tiny_claims_writes_a_report_of_other_runs_beside_them_not_over_the_checkouts():
    """`make tiny-claims RUNS=DIR` reads DIR's runs, so its report goes to DIR/reports/; the default run's
    report stays reports/tiny_claims.md, and CLAIMS_OUT names another file."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]

    def out(*args: str) -> str:
        text = subprocess.run(["make", "-n", "tiny-claims", "CLAIM_SWEEPS=tiny_grpo_replay", *args], cwd=root,
                              capture_output=True, text=True, check=True).stdout
        return text.split("--out ")[-1].split()[0]

    assert out() == "reports/tiny_claims.md"
    assert out("RUNS=/tmp/trial") == "/tmp/trial/reports/tiny_claims.md"
    assert out("RUNS=/tmp/trial", "CLAIMS_OUT=/tmp/r.md") == "/tmp/r.md"


def test_a_not_uniform_claim_reads_its_checks_as_for_or_against_it(tmp_path, monkeypatch):
    """"X is not uniformly better" with X better in every check: the claim is contradicted, and its checks
    must read "higher (against the claim)", not "reproduced" under a contradicted claim; one check where
    X is not better reproduces the claim and reads "not higher (for the claim)"."""
    from replaylab.results import tiny_claims
    from replaylab.results.claims import check_reading

    base = [[0.30, 0.33, 0.35], [0.31, 0.34, 0.36], [0.29, 0.30, 0.31], [0.30, 0.36, 0.40]]
    new = [[0.30, 0.40, 0.41], [0.31, 0.38, 0.40], [0.29, 0.35, 0.37], [0.30, 0.41, 0.45]]
    write_sweep(tmp_path / "runs" / "demo", runs({"current": base, "new": new}))
    uniform = Claim("Demo", "new is not uniformly better", "demo", (higher("final"), higher("first", update="first")),
                    combine="not_uniform")
    monkeypatch.setattr(tiny_claims, "CLAIMS", (uniform,))
    monkeypatch.setattr(tiny_claims, "CONTROLS", {"demo": "current"})
    out = tmp_path / "claims.md"
    assert main(["claims", str(tmp_path / "runs"), "--out", str(out)]) == 0
    text = out.read_text()
    assert "verdict **contradicted**" in text
    checks = text.split("### Demo: new is not uniformly better")[1]
    # both checks, each in its per-check and its family-wise column (a 5-point gain survives m = 2)
    assert checks.count("higher (against the claim)") == 4 and "| reproduced" not in checks
    assert check_reading(uniform, uniform.checks[0], "contradicted") == ("not higher (for the claim)", "for")
    assert check_reading(uniform, uniform.checks[0], "inconclusive") == ("inconclusive", None)
    plain = Claim("Demo", "new beats current", "demo", (higher(),))
    assert check_reading(plain, plain.checks[0], "reproduced") == ("reproduced", "for")
    for expect, found, opposite in (("lower", "lower", "not lower"), ("not_higher", "not higher", "higher"),
                                    ("same", "same", "different")):
        claim = Claim("Demo", "s", "demo", (higher(expect=expect),), combine="not_uniform")
        assert check_reading(claim, claim.checks[0], "reproduced") == (f"{found} (against the claim)", "against")
        assert check_reading(claim, claim.checks[0], "contradicted") == (f"{opposite} (for the claim)", "for")


def test_claims_sweeps_reads_only_the_sweeps_named(tmp_path, monkeypatch, capsys):
    """`--sweeps` (what `make tiny-claims CLAIM_SWEEPS=...` passes): the claims of a sweep left out read
    "not run" even with its runs on disk, and a name no claim reads is an error naming it."""
    from replaylab.results import tiny_claims

    base = [[0.30, 0.33, 0.35], [0.31, 0.34, 0.36], [0.29, 0.30, 0.31]]
    new = [[0.30, 0.40, 0.41], [0.31, 0.38, 0.40], [0.29, 0.35, 0.37]]
    write_sweep(tmp_path / "runs" / "demo", runs({"current": base, "new": new}))
    write_sweep(tmp_path / "runs" / "other", runs({"current": base, "new": new}))
    monkeypatch.setattr(tiny_claims, "CLAIMS", (Claim("Demo", "new beats current", "demo", (higher(),)),
                                                Claim("Other", "new beats current there", "other", (higher(),))))
    monkeypatch.setattr(tiny_claims, "CONTROLS", {})
    out = tmp_path / "claims.md"
    assert main(["claims", str(tmp_path / "runs"), "--sweeps", "demo", "--out", str(out)]) == 0
    summary = out.read_text().split("## Known-effect controls")[0].splitlines()
    assert any("new beats current " in line and "reproduced" in line for line in summary)
    assert any("there" in line and "not run" in line for line in summary)
    assert main(["claims", str(tmp_path / "runs"), "--sweeps", "demo,tiny_fifo", "--out", str(out)]) == 2
    assert "--sweeps ['tiny_fifo']: no claim reads them" in capsys.readouterr().err


def test_a_pipe_in_a_claim_or_check_keeps_the_report_tables_whole(tmp_path, monkeypatch):
    """"mean |advantage|" is a claim's wording: unescaped, its `|` split the row into extra columns in every
    Markdown renderer. Every table row must have as many cell separators as its header."""
    import re

    from replaylab.results import tiny_claims

    base = [[0.30, 0.33, 0.35], [0.31, 0.34, 0.36], [0.29, 0.30, 0.31]]
    new = [[0.30, 0.40, 0.41], [0.31, 0.38, 0.40], [0.29, 0.35, 0.37]]
    write_sweep(tmp_path / "runs" / "demo", runs({"current": base, "new": new}))
    monkeypatch.setattr(tiny_claims, "CLAIMS", (Claim("Demo", "a larger mean |advantage|", "demo",
                                                      (Check("mean |x|", {"strategy": "new"}, {"strategy": "current"},
                                                             "higher", 3.0),)),))
    monkeypatch.setattr(tiny_claims, "CONTROLS", {"demo": "current"})
    out = tmp_path / "claims.md"
    assert main(["claims", str(tmp_path / "runs"), "--out", str(out)]) == 0
    separators = lambda line: len(re.findall(r"(?<!\\)\|", line))  # noqa: E731
    tables = re.findall(r"(?:^\|.*\n)+", out.read_text(), re.M)
    assert len(tables) >= 3  # summary, controls, the claim's checks
    for table in tables:
        counts = {separators(line) for line in table.splitlines()}
        assert len(counts) == 1, table
    assert "mean \\|advantage\\|" in out.read_text()


def test_mostly_equal_pairs_read_an_interval_that_covers_and_still_has_power():
    """An arm that left the comparison's path in a third of 13 orders, each time by 9 points (a true mean gain of
    exactly 3): the t-interval over all pairs puts its upper end below 3 in about 6% of sweeps (nominal 2.5%)
    and would contradict the gain; paired.zero_inflated_interval does so in under 2.5%. With no gain where it
    departs (4 of 13 differ, by N(0, 1)) it still rules a 3-point gain out in most sweeps."""
    from replaylab.results.paired import paired_interval, zero_inflated_interval

    rng = np.random.default_rng(14)
    t_below = box_below = used = 0
    for _ in range(1500):
        d = np.where(rng.random(13) < 1 / 3, rng.normal(9.0, 2.0, 13), 0.0)
        if not 0 < np.count_nonzero(d) <= 6.5:
            continue
        used += 1
        t_below += paired_interval(list(d))[3] < 3.0
        box_below += zero_inflated_interval(list(d))[1] < 3.0
    assert t_below / used > 0.04 and box_below / used <= 0.025, (t_below / used, box_below / used)
    ruled_out = 0
    for _ in range(400):
        d = [0.0] * 9 + list(rng.normal(0.0, 1.0, 4))
        ruled_out += zero_inflated_interval(d)[1] < 3.0
    assert ruled_out / 400 > 0.6, ruled_out / 400
    assert zero_inflated_interval([0.0, 0.0, 2.0]) == (-math.inf, math.inf)  # one departure: no spread to use


def test_a_check_with_mostly_equal_pairs_reads_the_conservative_interval(tmp_path, monkeypatch):
    """Through run_check and `replaylab claims`: 2 of 6 orders differ (+2 and +1 points). The t-interval
    [-0.38, +1.38] with an MDE of 1.2 would contradict a 3-point gain; the zero-inflated interval cannot rule it
    out, so the check is inconclusive, and the report gives the mean among the pairs that differ."""
    from replaylab.results import tiny_claims
    from replaylab.results.paired import zero_inflated_interval

    base = [[0.30, 0.33, 0.35 + 0.01 * i] for i in range(6)]
    rare = [list(c) for c in base]
    rare[4][-1] += 0.02
    rare[5][-1] += 0.01
    df = tidy_frame(runs({"current": base, "new": rare}))
    r = run_check(df, higher())
    assert r["diffs"] == pytest.approx([0, 0, 0, 0, 2, 1]) and r["zero_inflated"]
    assert (r["ci_low"], r["ci_high"]) == pytest.approx(zero_inflated_interval(r["diffs"]))
    assert r["ci_high"] > 3.0 and r["mde"] < 3.0 and r["verdict"] == "inconclusive"
    assert check_verdict("higher", -0.38, 1.38, r["mde"], 3.0) == "contradicted"  # what the t-interval read
    write_sweep(tmp_path / "runs" / "demo", runs({"current": base, "new": rare}))
    monkeypatch.setattr(tiny_claims, "CLAIMS", (Claim("Demo", "new beats current", "demo", (higher("rare"),)),))
    monkeypatch.setattr(tiny_claims, "CONTROLS", {"demo": "current"})
    assert main(["claims", str(tmp_path / "runs"), "--out", str(tmp_path / "c.md")]) == 0
    text = (tmp_path / "c.md").read_text()
    assert "Check 'rare': 2 of its 6 pairs differ" in text and "Among the pairs that differ the mean is +1.50" in text


def test_a_check_on_a_metric_the_runs_never_logged_says_so():
    """Runs written before a metric existed (inert_groups): the check has no pairs and names the missing metric
    rather than reading as a run that failed."""
    base = [[0.30, 0.33, 0.35]] * 3
    df = tidy_frame(runs({"current": base, "new": base}, train={"current": [[0.5, 0.4]] * 3, "new": [[0.3, 0.2]] * 3}))
    r = run_check(df, higher(expect="lower", effect=0.05, measure="train_mean", metric="inert_groups"))
    assert r["verdict"] == "too few pairs" and "the arm's runs log no `inert_groups`" in r["left_out"]
    logged = run_check(df, higher(expect="lower", effect=0.05, measure="train_mean", metric="zero_variance_groups"))
    assert "log no" not in logged["left_out"]


def wrong_calls(gain: float, checks: int, pairs: int, trials: int, level: float, seed: int = 0) -> float:
    """How often a report of `checks` "higher" checks (effect 3 points, each a true gain of `gain`, paired
    spread 1.6 over `pairs` orders) makes at least one wrong call when each is read at `level`: a gain below 3
    read as reproduced when it is 0, or a true gain of 3 or more read as contradicted."""
    from replaylab.results.paired import minimum_detectable_effect, paired_interval

    rng = np.random.default_rng(seed)
    alpha = 1 - level
    mde_per_sd = minimum_detectable_effect(1.0, pairs, alpha=alpha)
    wrong = 0
    for _ in range(trials):
        verdicts = []
        for _ in range(checks):
            _, s, lo, hi, _ = paired_interval(list(rng.normal(gain, 1.6, pairs)), level)
            verdicts.append(check_verdict("higher", lo, hi, mde_per_sd * s, 3.0))
        bad = "reproduced" if gain == 0 else "contradicted"
        wrong += bad in verdicts
    return wrong / trials


def test_the_family_wise_reading_bounds_a_reports_wrong_calls_and_keeps_power():
    """Twenty checks at 95% each (a claims report's size): with no gain anywhere, some check reads reproduced in
    about 40% of reports (1 - 0.975^20). Read at 1 - 0.05/20 (Bonferroni), at most 5%. And it has power: a true
    6-point gain at 8 orders still reads reproduced family-wise in most checks. (A true gain of the effect read
    as contradicted is the other wrong call; at this spread it is rare in either reading.)"""
    from replaylab.results.paired import minimum_detectable_effect, paired_interval

    per_check, family = 0.95, 1 - 0.05 / 20
    assert wrong_calls(0.0, 20, 8, 400, per_check) > 0.25
    assert wrong_calls(0.0, 20, 8, 400, family) <= 0.05
    assert wrong_calls(3.0, 20, 8, 400, family) <= wrong_calls(3.0, 20, 8, 400, per_check) <= 0.05
    rng = np.random.default_rng(1)
    seen = 0
    for _ in range(400):
        _, s, lo, hi, _ = paired_interval(list(rng.normal(6.0, 1.6, 8)), family)
        seen += check_verdict("higher", lo, hi, minimum_detectable_effect(s, 8, alpha=0.05 / 20), 3.0) == "reproduced"
    assert seen / 400 > 0.8, seen / 400


def test_the_claims_report_reads_each_check_family_wise(tmp_path, monkeypatch):
    """Through `replaylab claims`: five checks with pairs. A modest gain (+2.5 [+0.45, +4.55] over four orders)
    is reproduced per check but not family-wise (its 99% interval covers 0); a large one (about +11 points)
    is reproduced in both readings; a precise small one (+1 point) is a gain per check and, family-wise, no
    established gain with 3 points ruled out (contradicted), which the report explains; an arm without runs
    adds nothing to the family."""
    from replaylab.results import tiny_claims

    base = [[0.30, 0.33, 0.35], [0.31, 0.34, 0.36], [0.29, 0.30, 0.31], [0.30, 0.36, 0.40]]
    modest = [[b[0], b[1], b[2] + d / 100] for b, d in zip(base, (2, 4, 1, 3))]
    large = [[b[0], b[1] + 0.1, b[2] + d / 100] for b, d in zip(base, (10, 11, 10, 12))]
    small = [[b[0], b[1], b[2] + d / 100] for b, d in zip(base, (0.5, 1.5, 1.0, 1.0))]
    write_sweep(tmp_path / "runs" / "demo", runs({"current": base, "modest": modest, "large": large, "small": small}))
    arm = {name: Check(name, {"strategy": name}, {"strategy": "current"}, "higher", 3.0)
           for name in ("modest", "large", "small")}
    claims = (Claim("Demo", "modest beats current", "demo", (arm["modest"],)),
              Claim("Demo", "large beats current", "demo", (arm["large"], replace(arm["large"], label="first",
                                                                                    update="first"))),
              Claim("Demo", "small beats current", "demo", (arm["small"],)),
              Claim("Demo", "modest is not lower", "demo", (replace(arm["modest"], label="not lower", expect="not_higher"),)),
              Claim("Demo", "ghost beats current", "demo",
                    (Check("ghost", {"strategy": "ghost"}, {"strategy": "current"}, "higher", 3.0),)))
    monkeypatch.setattr(tiny_claims, "CLAIMS", claims)
    monkeypatch.setattr(tiny_claims, "CONTROLS", {"demo": "current"})
    out = tmp_path / "claims.md"
    assert main(["claims", str(tmp_path / "runs"), "--out", str(out)]) == 0
    text = out.read_text()
    assert "the report's 5 checks with an interval" in text and "1 - 0.05/5 (99.00% intervals" in text
    summary = {line.split("|")[2].strip(): [c.strip() for c in line.split("|")[4:6]]
               for line in text.split("## Known-effect controls")[0].splitlines() if line.startswith("| Demo")}
    assert summary["modest beats current"] == ["reproduced", "inconclusive"]
    assert summary["large beats current"] == ["reproduced", "reproduced"]
    assert summary["ghost beats current"] == ["too few pairs", "too few pairs"]
    assert summary["small beats current"] == ["reproduced", "contradicted"]
    assert "Check 'small' reads reproduced per check and contradicted family-wise" in text
    assert "verdict **reproduced** (family-wise: inconclusive)" in text


def test_seeds_within_a_data_order_are_averaged_so_the_interval_covers():
    """Four data orders x three seeds, a strategy-by-order interaction (sd 2, shared by an order's seeds) and
    seed noise (sd 0.5), no true difference: the t-interval over the 12 (order, seed) pairs covers 0 in about
    80% of sweeps; compare(), which averages each order's seeds and pairs the orders, in about 95%. And it has
    power: a true 5-point difference is still detected in most sweeps."""
    import pandas as pd

    from replaylab.results.paired import compare, paired_interval

    rng = np.random.default_rng(7)
    index = pd.MultiIndex.from_product([range(4), range(3)], names=["order", "seed"])
    base = pd.Series(0.0, index=index)
    per_pair = per_order = detected = 0
    trials = 600
    for _ in range(trials):
        d = (rng.normal(0.0, 2.0, 4)[:, None] + rng.normal(0.0, 0.5, (4, 3))).ravel()
        _, _, lo, hi, _ = paired_interval(list(d))
        per_pair += lo <= 0 <= hi
        row = compare(pd.Series(d, index=index), base, 1.0, 0.95, 0.8, 0.05)
        per_order += row["ci_low"] <= 0 <= row["ci_high"] and row["n_pairs"] == 4
        detected += compare(pd.Series(d + 5.0, index=index), base, 1.0, 0.95, 0.8, 0.05)["ci_low"] > 0
    assert per_pair / trials < 0.88 and 0.92 <= per_order / trials <= 0.98, (per_pair / trials, per_order / trials)
    assert detected / trials > 0.6, detected / trials


def test_a_check_over_seeds_pairs_the_data_orders():
    """Through run_check: three orders x two seeds; the check has three pairs, each an order's mean over its
    seeds, and the figure's dots are those."""
    base = [[0.30, 0.33, 0.35], [0.31, 0.34, 0.36], [0.29, 0.30, 0.31]] * 2
    new = [[c[0], c[1], c[2] + d / 100] for c, d in zip(base, (1, 3, 2, 3, 5, 4))]
    rows = runs({"current": base, "new": new})
    for row in rows:  # curve i is order i % 3, seed i // 3
        i = int(row["run"].rsplit("-", 1)[1])
        row.update(order=i % 3, seed=i // 3)
    r = run_check(tidy_frame(rows), higher())
    assert r["n_pairs"] == 3 and r["diffs"] == pytest.approx([2.0, 4.0, 3.0])
    assert r["diff"] == pytest.approx(3.0)
