"""Claims: a seed paper's qualitative claim tested as paired differences, with a verdict.

A `Claim` is one or more `Check`s. A check compares two arms of one sweep (each arm a filter on the
runs' identity columns, usually just a strategy name), paired by data order and seed, on one
measure of each run:

- `eval`: an evaluation metric at the final evaluation (the mean over the run's last eval.tail ones), the
  first one after update 0, or an update;
- `train_mean`: a training-row metric averaged over the run (or over its first `window` updates);
- `ledger`: a budget-ledger field at the run's last row (rollouts, FLOPs, tokens);
- `updates_to_level`: updates until each arm first reaches the comparison arm's final accuracy,
  averaged over the other pairs (an arm that never reaches it counts its last evaluation plus its widest gap
  between evaluations: a censored, kind value).

Each check states the expected direction and `effect`, the smallest difference that would matter
(in the measure's units; points for accuracy). Its verdict (issue 14's rule):

- `higher` / `lower`: reproduced when the 95% interval excludes 0 on the expected side; contradicted
  when it excludes 0 on the other side, or covers 0 while the MDE is at most `effect` (an effect
  that large would have been seen) and the interval excludes `effect` itself (the data rule it out);
  otherwise inconclusive (covers 0, and the MDE exceeds `effect` or the interval reaches it);
- `same` (equal within `effect`): reproduced when the interval lies inside (-effect, effect);
  contradicted when it excludes 0 and lies outside that band; otherwise inconclusive;
- `not_higher`: contradicted when the interval excludes 0 upwards (a gain, as `higher` reads one);
  reproduced when it does not and its upper end is below `effect`; otherwise inconclusive. So one
  interval never reproduces both "X helps" and "Y does not" the same way: +1.5 [+0.3, +2.8] is a
  gain under either reading (before 2026-12-07, `not_higher` tested the upper end first).

A claim is reproduced when every check is, contradicted when any check is, inconclusive otherwise;
a claim with `combine="not_uniform"` ("X is not uniformly better") is reproduced when some check
is contradicted, contradicted when every check is reproduced. A check without pairs (its arm not run
yet) decides nothing but hides no decisive check; a claim none of whose checks has pairs says "too few
pairs", and one whose sweep has no runs "not run".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from replaylab.results.aggregation import final_eval, is_accuracy
from replaylab.results.frame import DONE
from replaylab.results.paired import by_order, describe_diffs
from replaylab.results.paired_notes import check_same_evaluation

if TYPE_CHECKING:
    import pandas as pd

Expect = Literal["higher", "lower", "same", "not_higher"]
Measure = Literal["eval", "train_mean", "ledger", "updates_to_level"]
PAIR = ["order", "seed"]


@dataclass(frozen=True)
class Check:
    """One paired comparison: `arm` minus `against` on `measure`, expected to be `expect`."""

    label: str  # what the report calls it
    arm: Mapping[str, Any]  # identity filter of the arm tested, e.g. {"strategy": "ropd_tiny"}
    against: Mapping[str, Any]  # identity filter of the arm it is compared with
    expect: Expect
    effect: float  # the smallest difference that matters, in the measure's units (points for accuracy)
    measure: Measure = "eval"
    metric: str = "avg@k"
    benchmark: str = "mean"  # eval rows' benchmark (the suite mean by default)
    update: str | int = "final"  # eval: "final", "first" (first evaluation after update 0) or an update
    where: Mapping[str, Any] = field(default_factory=dict)  # filter both arms share, e.g. {"budget": "tiny_long"}
    window: int | None = None  # train_mean: only updates <= window


@dataclass(frozen=True)
class Claim:
    paper: str  # which seed paper makes the claim
    statement: str  # the claim, in the paper's words as far as a tiny world can test it
    sweep: str  # the experiment (runs/<sweep>) whose runs test it
    checks: tuple[Check, ...]
    combine: Literal["all", "not_uniform"] = "all"
    note: str = ""  # what the tiny test cannot say


def _filter(df: pd.DataFrame, spec: Mapping[str, Any]) -> pd.DataFrame:
    for key, value in spec.items():
        if key not in df.columns:
            raise KeyError(f"claim filter {key!r}: no such identity column; columns: {sorted(df.columns)}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            import pandas as pd  # a column with a missing value is float: 64 must match 64.0

            df = df[pd.to_numeric(df[key], errors="coerce") == value]
        else:
            df = df[df[key].astype(str) == str(value)]
    return df


def _finished(df: pd.DataFrame, check: Check, spec: Mapping[str, Any]) -> pd.DataFrame:
    """Rows of the arm's finished runs (the check's shared filter and the arm's own)."""
    runs = _filter(df, {**check.where, **spec})
    return runs[runs["run"].isin(set(runs.loc[runs["status"] == DONE, "run"]))]


def arm_values(df: pd.DataFrame, check: Check, spec: Mapping[str, Any]) -> pd.Series:
    """One value per finished run of the arm, indexed by (order, seed)."""
    runs = _finished(df, check, spec)
    if check.measure == "eval":
        ev = runs[(runs["split"] == "eval") & (runs["metric"] == check.metric) & (runs["benchmark"] == check.benchmark)]
        if check.update == "final":  # the last evaluation, or the mean over a run's tail (eval.tail)
            picked, short = final_eval(ev)
            if short:
                raise ValueError(f"claim check {check.label!r}: " + "; ".join(f"run {r}: {why}" for r, why in short.items()))
        else:
            at = (ev[ev["update"] > 0].groupby("run")["update"].transform("min").reindex(ev.index)
                  if check.update == "first" else int(check.update))
            picked = ev[ev["update"] == at]
    elif check.measure == "train_mean":
        tr = runs[(runs["split"] == "train") & (runs["metric"] == check.metric)]
        if check.window is not None:
            tr = tr[tr["update"] <= check.window]
        picked = tr.groupby("run", as_index=False).agg(value=("value", "mean"), order=("order", "first"),
                                                        seed=("seed", "first"))
    elif check.measure == "ledger":
        column = f"ledger_{check.metric}"
        if column not in runs.columns:
            raise KeyError(f"claim check {check.label!r}: no ledger column {column!r}")
        last = runs.sort_values("update").groupby("run").tail(1)
        picked = last.assign(value=last[column])
    else:
        raise ValueError(f"arm_values does not compute {check.measure!r}")
    picked = picked.drop_duplicates("run", keep="last")
    values = picked.set_index(PAIR)["value"].astype(float)
    if values.index.has_duplicates:
        raise ValueError(f"claim check {check.label!r}: arm {dict(spec)} matches several runs per (order, seed): "
                         f"{_twins(runs, picked)}")
    return values


def _twins(rows: pd.DataFrame, picked: pd.DataFrame) -> str:
    """Name two runs that share an (order, seed) and say how they differ: in an identity column (the
    claim needs a filter), or only in code and config hash (one is a stale run of an older commit)."""
    from replaylab.results.aggregation import identity_difference, run_index, stale_twin

    twins = picked[picked.duplicated(PAIR, keep=False)].sort_values(PAIR)  # runs of one (order, seed) next to each other
    a, b = twins["run"].iloc[:2]
    first = run_index(rows)
    columns = identity_difference(first.loc[a], first.loc[b], first.columns)
    if columns:
        return f"runs {a} and {b} differ in {columns}; add identity filters to the claim to tell them apart"
    return stale_twin(first.loc[a], first.loc[b])


def _eval_curves(df: pd.DataFrame, check: Check, spec: Mapping[str, Any]) -> dict[tuple, pd.Series]:
    runs = _finished(df, check, spec)
    ev = runs[(runs["split"] == "eval") & (runs["metric"] == check.metric) & (runs["benchmark"] == check.benchmark)]
    twins = ev.drop_duplicates("run")
    if twins.duplicated(PAIR).any():  # two runs' curves would merge into one
        raise ValueError(f"claim check {check.label!r}: arm {dict(spec)} matches several runs per (order, seed): "
                         f"{_twins(runs, twins)}")
    return {key: part.drop_duplicates("update", keep="last").set_index("update")["value"].sort_index()
            for key, part in ev.groupby(PAIR)}


def updates_to_level(df: pd.DataFrame, check: Check) -> tuple[pd.Series, pd.Series]:
    """(arm, against) per pair: updates until each arm first reaches the `against` arm's final accuracy,
    averaged over the *other* pairs (leave one out). An arm that never reaches it counts its last
    evaluation plus the widest gap between its evaluations (a censored value, the same rule for both).

    The target is fixed before a pair is looked at, so under no real difference the two arms of a pair
    are exchangeable and the mean difference is 0. A target read from the pair's own baseline (its
    peak, as before 2026-12-07) is one the baseline reaches by construction, at the top of its own
    noise, which the other arm must beat: +33 updates of bias with no real difference, and a true
    one-interval lead cancelled (docs/testbed.md)."""
    import pandas as pd

    finals = arm_values(df, replace(check, measure="eval", update="final"), check.against)
    arm, base = _eval_curves(df, check, check.arm), _eval_curves(df, check, check.against)
    a_out, b_out = {}, {}
    for key in sorted(set(arm) & set(base) & set(finals.index)):
        others = finals.drop(key)
        target = float(others.mean()) if len(others) else float(finals[key])
        for curves, out in ((arm[key], a_out), (base[key], b_out)):
            reached = curves[curves >= target]
            gap = int(curves.index.to_series().diff().max()) if len(curves) > 1 else int(curves.index[-1])
            out[key] = float(reached.index[0]) if len(reached) else float(curves.index[-1] + gap)

    def series(values: dict) -> pd.Series:
        return pd.Series(list(values.values()), index=pd.MultiIndex.from_tuples(list(values), names=PAIR), dtype=float)

    return series(a_out), series(b_out)


def check_verdict(expect: Expect, lo: float, hi: float, mde: float, effect: float) -> str:
    if math.isnan(lo):  # an unbounded interval (-inf, inf) reads inconclusive below
        return "too few pairs"
    if lo == hi:  # every pair differs by the same amount (exact counts, e.g. the ledger's rollouts): no
        mde = 0.0  # sampling spread, so a difference of any size would have been seen
    if expect in ("higher", "lower"):
        if expect == "lower":
            lo, hi = -hi, -lo
        if lo > 0:
            return "reproduced"
        # A small MDE alone does not rule the claimed effect out: an interval of [-0.1, +3.9] has an MDE
        # under 3 points when its spread is small, yet a 3-point gain lies inside it. Contradicting needs
        # both: the test had the power, and the interval excludes an effect that large (or the exact
        # difference, with no spread, is not a gain). docs/testbed.md has the error rates this buys.
        if hi < 0 or (math.isfinite(mde) and mde <= effect and (hi < effect or lo == hi)):
            return "contradicted"
        return "inconclusive"
    if expect == "same":
        if -effect < lo and hi < effect:
            return "reproduced"
        if (lo > 0 or hi < 0) and (lo >= effect or hi <= -effect):
            return "contradicted"
        return "inconclusive"
    if expect == "not_higher":  # the mirror of `higher`: a significant gain of any size is one, as there
        if lo > 0:
            return "contradicted"
        if hi < effect:
            return "reproduced"
        return "inconclusive"
    raise ValueError(f"unknown expectation {expect!r}")


def run_check(df: pd.DataFrame, check: Check, level: float = 0.95, power: float = 0.8, alpha: float = 0.05) -> dict[str, Any]:
    """The check's paired difference, interval, MDE, per-pair differences and verdict."""
    if check.measure in ("eval", "updates_to_level"):
        mine, theirs = _finished(df, check, check.arm), _finished(df, check, check.against)
        # accuracies measured differently do not pair
        check_same_evaluation(mine, theirs, f"claim check {check.label!r}: the arm", "the comparison")
        if check.measure == "eval" and check.update == "final":
            import pandas as pd

            both = pd.concat([mine, theirs])
            final_eval(both[both["split"] == "eval"])  # raises when the arms average different numbers of evaluations
    if check.measure == "updates_to_level":
        arm, against = updates_to_level(df, check)
        scale = 1.0
    else:
        arm, against = arm_values(df, check, check.arm), arm_values(df, check, check.against)
        scale = 100.0 if check.measure == "eval" and is_accuracy(check.metric) else 1.0
    units, base = by_order(arm, against)  # the pairs: orders, when an order ran several seeds
    diffs = [scale * (float(a) - float(b)) for a, b in zip(units, base)]
    row = describe_diffs(diffs, level, power, alpha)
    row["diffs"] = diffs
    row["against_mean"] = scale * float(base.mean()) if len(base) else math.nan
    row["verdict"] = check_verdict(check.expect, row["ci_low"], row["ci_high"], row["mde"], check.effect)
    row["left_out"] = left_out(df, check, arm, against)
    return row


def left_out(df: pd.DataFrame, check: Check, arm: pd.Series, against: pd.Series) -> str:
    """The runs a check could not use, named: unfinished runs of either arm, and (order, seed) keys that
    only one arm has. A strategy that fails on hard data orders must not be compared silently on the
    orders it survived."""
    parts = []
    for name, spec, values in (("arm", check.arm, arm), ("comparison", check.against, against)):
        runs = _filter(df, {**check.where, **spec})
        unfinished = sorted(set(runs["run"]) - set(runs.loc[runs["status"] == DONE, "run"]))
        if unfinished:
            parts.append(f"unfinished runs of the {name}: {', '.join(map(str, unfinished))}")
        if values.empty and check.measure in ("train_mean", "ledger") and len(runs):
            parts.append(f"the {name}'s runs log no `{check.metric}` (runs written before it existed?)")
    for name, mine, other in (("arm", arm, against), ("comparison", against, arm)):
        alone = sorted(mine.index.difference(other.index))
        if alone:
            parts.append(f"(order, seed) only the {name} has: {', '.join(map(str, alone))}")
    return "; ".join(parts)


# What a reproduced / contradicted check found, by expectation (for the not_uniform reading)
OUTCOMES = {"higher": ("higher", "not higher"), "lower": ("lower", "not lower"),
            "not_higher": ("not higher", "higher"), "same": ("same", "different")}


def check_reading(claim: Claim, check: Check, verdict: str) -> tuple[str, str | None]:
    """What one check's verdict says about its claim: (text, "for" / "against" / None). For a plain claim
    the check's verdict is the reading; for a not_uniform claim ("X is not uniformly better") a check
    whose expectation held counts against the claim, so the text names the direction found instead
    of calling it "reproduced" under a contradicted claim."""
    if verdict not in ("reproduced", "contradicted"):
        return verdict, None
    if claim.combine != "not_uniform":
        return verdict, "for" if verdict == "reproduced" else "against"
    found, opposite = OUTCOMES[check.expect]
    if verdict == "reproduced":
        return f"{found} (against the claim)", "against"
    return f"{opposite} (for the claim)", "for"


def claim_verdict(claim: Claim, verdicts: list[str]) -> str:
    """The claim's verdict from its checks'. A check without pairs decides nothing, but neither does it hide
    a decisive one: a contradicted check contradicts a plain claim (and reproduces a not_uniform one)
    whether or not another check has pairs yet."""
    if not verdicts:
        return "not run"
    decided = [v for v in verdicts if v != "too few pairs"]
    if not decided:
        return "too few pairs"
    if claim.combine == "not_uniform":
        if "contradicted" in decided:
            return "reproduced"
        return "contradicted" if decided == verdicts and all(v == "reproduced" for v in verdicts) else "inconclusive"
    if "contradicted" in decided:
        return "contradicted"
    return "reproduced" if decided == verdicts and all(v == "reproduced" for v in verdicts) else "inconclusive"
