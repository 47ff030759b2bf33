"""Paired comparisons: each strategy against a reference, paired by data order and seed, with the
minimum detectable effect (`replaylab table DIR --paired REF`).

Every strategy of a sweep runs on the same data orders (and seeds), so the difference to the
reference within a pair removes the order-to-order spread both share. For each block (response
budget), strategy, benchmark and metric: the differences d_i = strategy - reference at each run's
chosen evaluation, their mean with a 95% t-interval (scipy.stats), and the minimum detectable
effect: the smallest true mean difference a two-sided paired t-test at level alpha detects with
the given power for this many pairs and the observed spread of the differences (exact, from the
noncentral t distribution). A difference whose interval covers 0 is not evidence of no effect
unless the MDE is small against the effect that matters; the verdict column says which.

Known-effect control: every paired table also compares the reference with itself at the evaluation
nearest to half its run (at or before it), paired by order and seed: the reference learning over the
second half of its run is an effect the testbed must see. When that interval does not exclude 0, the
table says the testbed failed its own check: it could not have seen effects of that size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from replaylab.results.aggregation import (_check_replicates, _select_eval, check_requested, default_by, final_eval,
                                          is_accuracy, is_suite_mean, order_benchmarks, rises_with_learning,
                                          run_index)
from replaylab.results.frame import NoRowsError
from replaylab.results.provenance import run_notes

if TYPE_CHECKING:
    import pandas as pd


def paired_interval(diffs: Sequence[float], level: float = 0.95) -> tuple[float, float, float, float, int]:
    """(mean, sd, ci_low, ci_high, n) of paired differences; no interval for n < 2."""
    import numpy as np
    from scipy import stats

    n = len(diffs)
    if n == 0:
        return (math.nan,) * 4 + (0,)
    mean = float(sum(diffs) / n)
    if n < 2:
        return mean, math.nan, math.nan, math.nan, n
    # numpy's two-pass sd: scipy's tstd warns of precision loss whenever all differences are nearly equal (an
    # exact count such as the ledger's rollouts, read through floats), where the sd is correctly about 0
    sd = float(np.std(diffs, ddof=1))
    half = float(stats.t.ppf((1 + level) / 2, n - 1)) * sd / math.sqrt(n)
    return mean, sd, mean - half, mean + half, n


def zero_inflated_interval(diffs: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """An interval for the mean of paired differences most of which are exactly 0 (an arm that left the
    comparison's path in a few pairs only, such as an R-OPD run whose trigger rarely switched).

    The mean is p x m: the share of pairs that differ times their mean. The t-interval over all pairs treats
    the zeros as draws of one normal spread and undercovers (13 pairs, a third of them differing: 94%, and 88%
    in the R-OPD table's shape; docs/testbed.md), so here p gets an exact binomial interval and m a t-interval
    over the differing pairs, each at 1 - (1 - level) / 2, and the interval spans the products of their ends
    (joint coverage at least `level`, by Bonferroni). Conservative by construction. Fewer than two differing
    pairs leave m without a spread: the interval is unbounded."""
    from scipy import stats

    nonzero = [d for d in diffs if d != 0]
    if len(nonzero) < 2:
        return -math.inf, math.inf
    each = 1 - (1 - level) / 2
    share = stats.binomtest(len(nonzero), len(diffs)).proportion_ci(confidence_level=each, method="exact")
    _, _, m_low, m_high, _ = paired_interval(nonzero, each)
    ends = [a * b for a in (share.low, share.high) for b in (m_low, m_high)]
    return min(ends), max(ends)


def paired_power(effect: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test at level alpha against a true mean difference `effect`."""
    from scipy import stats

    df = n - 1
    crit = float(stats.t.ppf(1 - alpha / 2, df))
    nc = abs(effect) * math.sqrt(n) / sd
    far = float(stats.nct.cdf(-crit, df, nc))  # the wrong-sign rejections: negligible, and scipy's nct
    return float(stats.nct.sf(crit, df, nc)) + (0.0 if math.isnan(far) else far)  # gives nan far out there


def minimum_detectable_effect(sd: float, n: int, power: float = 0.8, alpha: float = 0.05) -> float:
    """The smallest |effect| the two-sided paired t-test detects with `power` (nan for n < 2 or sd 0)."""
    from scipy import optimize

    if n < 2 or not sd > 0 or not math.isfinite(sd):
        return math.nan
    upper = sd * 50.0
    while paired_power(upper, sd, n, alpha) < power:  # tiny n: the MDE can be many sds
        upper *= 4.0
    return float(optimize.brentq(lambda e: paired_power(e, sd, n, alpha) - power, 0.0, upper, xtol=1e-10 * sd))


MOST_PAIRS = 100_000  # pairs_for_mde looks no further: beyond it a plan is not a plan


def pairs_for_mde(sd: float, target: float, power: float = 0.8, alpha: float = 0.05, most: int = MOST_PAIRS) -> float:
    """The fewest pairs at which the MDE for this spread is at most `target`: a sweep's planning
    number (how many data orders, times seeds, a table needs), projected from the spread observed so
    far. nan when the spread is unknown (fewer than 2 pairs, sd 0); inf when `most` pairs would not do."""
    if not (sd > 0 and math.isfinite(sd) and target > 0):
        return math.nan
    if most < 2 or not minimum_detectable_effect(sd, most, power, alpha) <= target:
        return math.inf
    lo, hi = 1, 2  # the MDE falls as pairs are added: double, then bisect (lo fails, hi meets)
    while minimum_detectable_effect(sd, hi, power, alpha) > target:
        lo, hi = hi, min(2 * hi, most)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if minimum_detectable_effect(sd, mid, power, alpha) <= target else (mid, hi)
    return float(hi)


def by_order(values, reference):
    """The two Series (indexed by (order, seed)) on their common keys, as the analysis' pairs. When some data
    order ran with several seeds (and there are several orders), each arm's values over an order's seeds are
    averaged and the orders are the pairs: a strategy-by-order interaction is shared by an order's seeds, so
    (order, seed) pairs are not independent and their t-interval undercovers (docs/testbed.md). A sweep of
    one order keeps its seeds as the pairs."""
    pairs = reference.index.intersection(values.index).sort_values()
    values, reference = values[pairs], reference[pairs]
    if "order" in (pairs.names or []) and len(pairs):
        orders = pairs.get_level_values("order")
        if orders.nunique() > 1 and orders.duplicated().any():
            return values.groupby(level="order").mean(), reference.groupby(level="order").mean()
    return values, reference


def compare(values, reference, scale: float, level: float, power: float, alpha: float) -> dict[str, float]:
    """Paired difference of two Series indexed by (order, seed) (`by_order`'s pairs): mean, sd, interval,
    pairs and MDE."""
    values, reference = by_order(values, reference)
    return describe_diffs([scale * (float(v) - float(r)) for v, r in zip(values, reference)], level, power, alpha)


def describe_diffs(diffs: Sequence[float], level: float, power: float, alpha: float) -> dict[str, float]:
    """Mean, sd, interval (the covering one when the pairs are mostly equal), pairs and MDE of paired differences."""
    mean, sd, lo, hi, n = paired_interval(diffs, level)
    zero_inflated = mostly_equal(diffs)
    if zero_inflated:  # the t-interval undercovers there; the MDE stays the t-test's, a statement of power
        lo, hi = zero_inflated_interval(diffs, level)
    return {"diff": mean, "sd": sd, "ci_low": lo, "ci_high": hi, "n_pairs": n,
            "mde": minimum_detectable_effect(sd, n, power, alpha), "zero_inflated": zero_inflated}


def differ(diffs: Sequence[float]) -> int:
    """Pairs whose difference is not exactly 0 (an exact tie: an arm that never left the comparison's
    path, such as an R-OPD run whose trigger never switched, or both arms censored)."""
    return sum(d != 0 for d in diffs)


def mostly_equal(diffs: Sequence[float]) -> bool:
    """Some pairs differ, at most half of them: a zero-inflated sample the t-interval covers poorly (above half,
    13 pairs: 94-95%, near nominal), so its interval is zero_inflated_interval's."""
    return 0 < differ(diffs) <= len(diffs) / 2


def verdict(lo: float, hi: float, mde: float) -> str:
    if math.isnan(lo):
        return "too few pairs"
    if lo > 0:
        return "higher"
    if hi < 0:
        return "lower"
    return f"no difference detected (MDE {mde:.1f})" if math.isfinite(mde) else "no difference detected"


def paired_table(df: pd.DataFrame, reference: str, metrics: Sequence[str] = ("avg@k",),
                 benchmarks: Sequence[str] | None = ("mean",), block: str | None = "budget", update: str | int = "final",
                 level: float = 0.95, power: float = 0.8, alpha: float = 0.05, plan: float | None = None) -> pd.DataFrame:
    """One row per (block, strategy other than `reference`, benchmark, metric): the paired difference
    to the reference (percent points for accuracy metrics), its interval, n pairs, the MDE and a verdict.
    With `plan` (an effect, in the difference's units) each row also gets `pairs_needed`: the fewest
    pairs (data orders) at which its MDE would be at most `plan`, projected from its observed spread."""
    import pandas as pd

    from replaylab.results.paired_notes import check_same_evaluation, eval_size_note, left_out_note, spend_note

    if plan is not None and not (math.isfinite(plan) and plan > 0):
        raise ValueError(f"plan={plan}: the effect to plan for must be a positive number")
    if block:  # rows without the block column (a wandb export without budget.name) form one block, as in tables
        df = df.assign(**{block: df[block].astype(object).fillna("n/a") if block in df.columns else "n/a"})
    evals = df[df["split"] == "eval"]
    if evals.empty:
        raise NoRowsError("no eval rows found: no run has evaluated yet (split=eval rows are what tables show)")
    check_requested(evals, metrics, benchmarks)
    runs = run_index(df)
    if reference not in set(runs["strategy"]):
        raise ValueError(f"--paired {reference}: no such strategy; strategies: {sorted(set(runs['strategy']), key=str)}")
    extra = [c for c in default_by(runs, block) if c != "strategy"]
    if extra:
        raise ValueError(f"runs also differ in {extra}: pair within one configuration (filter the rows first)")
    # two runs of one strategy on one (order, seed), such as a stale run of an older commit beside its cell,
    # would pair one difference with two values: name them instead
    _check_replicates(runs, [c for c in (block, "strategy", "seed") if c and c in runs.columns])
    chosen, remarks = _select_eval(df[(df["split"] == "eval") & df["metric"].isin(list(metrics))], runs, update)
    chosen = chosen.drop_duplicates(["run", "benchmark", "metric"], keep="last")
    if chosen.empty:
        raise NoRowsError("no eval rows to pair")
    # every row carries its run's identity (order, seed, budget, strategy): no join needed
    benches = [b for b in order_benchmarks(chosen["benchmark"])
               if not benchmarks or b in benchmarks or ("mean" in benchmarks and is_suite_mean(b))]
    out: list[dict[str, Any]] = []
    blocks = sorted(chosen[block].unique(), key=str) if block else [None]
    for bval in blocks:
        part = chosen[chosen[block] == bval] if block else chosen
        for strategy in sorted(set(part["strategy"]) - {reference}, key=str):
            check_same_evaluation(part[part["strategy"] == strategy], part[part["strategy"] == reference], strategy, reference)
            for metric in metrics:
                scale = 100.0 if is_accuracy(metric) else 1.0
                for bench in benches:
                    cell = part[(part["metric"] == metric) & (part["benchmark"] == bench)]
                    ref_rows, rows = cell[cell["strategy"] == reference], cell[cell["strategy"] == strategy]
                    ref = ref_rows.set_index(["order", "seed"])["value"]
                    other = rows.set_index(["order", "seed"])["value"]
                    unpaired = sorted(set(ref.index) ^ set(other.index), key=str)
                    row = compare(other, ref, scale, level, power, alpha)
                    notes = [f"unpaired (order, seed): {unpaired}" if unpaired else "",
                             spend_note(rows, ref_rows, reference), eval_size_note(rows, ref_rows, reference),
                             left_out_note(remarks, runs, (strategy, reference), block, bval)]
                    out.append({"block": bval, "strategy": strategy, "reference": reference, "benchmark": bench,
                                "metric": metric, **row, "verdict": verdict(row["ci_low"], row["ci_high"], row["mde"]),
                                "notes": "; ".join(n for n in notes if n)})
    out += control_rows(df, runs, reference, metrics, benches, block, level, power, alpha, update)
    if not out:  # only the reference, and no evaluation half-way for its control
        raise NoRowsError(f"nothing to pair: no strategy besides {reference}, and no control")
    table = pd.DataFrame(out)
    if plan is not None:
        table["pairs_needed"] = [pairs_for_mde(sd, plan, power, alpha) for sd in table["sd"]]
    table.attrs.update(reference=reference, level=level, power=power, alpha=alpha, block=block, plan=plan, update=update,
                       run_notes=run_notes(runs),
                       tail=int(chosen["eval_tail"].max()) if update == "final" and "eval_tail" in chosen.columns else 1)
    return table


def control_rows(df, runs, reference: str, metrics, benches, block, level, power, alpha,
                 update: str | int = "final") -> list[dict[str, Any]]:
    """The reference at its final evaluation minus itself at the evaluation nearest to half its run; one
    control per configuration of the reference (a sweep whose reference runs in several configurations
    inside a block, like the budget axes' queries x resampling cells, gets one per configuration).
    At a fixed `update` the control reads the table's way too: the reference's single evaluation there
    minus its evaluation nearest to half of it."""
    ev = df[(df["split"] == "eval") & (df["strategy"] == reference) & df["metric"].isin(list(metrics))]
    if update == "final":
        finished = set(runs.index[(runs["strategy"] == reference) & (runs["status"] == "done")])
        ev = ev[ev["run"].isin(finished)]
    else:  # as the table: every run that reached the update, finished or not
        reached = set(ev.loc[ev["update"] == int(update), "run"])
        ev = ev[ev["run"].isin(reached) & (ev["update"] <= int(update))].assign(eval_tail=1)
    configs = [c for c in default_by(runs[runs["strategy"] == reference], block) if c != "strategy"]
    out = []
    blocks = sorted(ev[block].unique(), key=str) if block else [None]
    for bval in blocks:
        in_block = ev[ev[block] == bval] if block else ev
        groups = in_block.groupby(configs, dropna=False) if configs else [((), in_block)]
        for config, part in groups:
            config = config if isinstance(config, tuple) else (config,)
            label = f" ({', '.join(f'{c}={v}' for c, v in zip(configs, config))})" if configs else ""
            out += _control(part, reference, label, bval, metrics, benches, level, power, alpha,
                            "final" if update == "final" else f"at update {update}")
    return out


def _control(part, reference: str, label: str, bval, metrics, benches, level, power, alpha,
             end: str = "final") -> list[dict[str, Any]]:
    """control_rows for one configuration's eval rows."""
    import pandas as pd

    out = []
    final = part.groupby("run")["update"].max()
    if final.empty:
        return out
    updates = sorted(set(part["update"]))
    half_target = int(final.min()) // 2
    # below the runs' tail (eval.tail): the control compares learning, not a tail mean with one of its own points
    depth = part.groupby("run")["update"].rank(method="dense", ascending=False)
    tail_start = part.loc[depth <= pd.to_numeric(part["eval_tail"], errors="coerce").fillna(1), "update"].min() \
        if "eval_tail" in part.columns else final.min()
    earlier = [u for u in updates if u <= half_target and u < tail_start]
    if not earlier:
        return out
    half = max(earlier)
    for metric in metrics:
        scale = 100.0 if is_accuracy(metric) else 1.0
        for bench in benches:
            cell = part[(part["metric"] == metric) & (part["benchmark"] == bench)]
            at_half = cell[cell["update"] == half].set_index(["order", "seed"])["value"]
            at_end = final_eval(cell)[0].set_index(["order", "seed"])["value"]
            row = compare(at_end, at_half, scale, level, power, alpha)
            lo, hi = row["ci_low"], row["ci_high"]
            # The known effect of learning is a gain in accuracy: a significant loss is no detection of it (it
            # says training went wrong). Other metrics (response length, truncation rate, ...) may move either
            # way. (A NaN interval, too few pairs, compares False both ways.)
            worse = rises_with_learning(metric) and hi < 0
            detected = lo > 0 or (hi < 0 and not worse)
            failed = "CONTROL NOT DETECTED: the testbed failed its own check" + (" (the reference got worse)" if worse else "")
            out.append({"block": bval, "strategy": f"control: {reference} {end} - update {half}{label}",
                        "reference": reference, "benchmark": bench, "metric": metric, **row,
                        "verdict": "control detected" if detected else failed,
                        "notes": f"known effect: {reference} learning from update {half} to its "
                                 f"{'final value' if end == 'final' else 'value ' + end}"})
    return out


def paired_markdown(table: pd.DataFrame, title: str) -> str:
    a = table.attrs
    at = (f"update {a['update']} (runs that reached it, finished or not)" if a.get("update", "final") != "final"
          else f"each run's mean over its last {a['tail']} evaluations (eval.tail)" if a.get("tail", 1) > 1
          else "each run's final evaluation")
    lines = [f"## {title}: paired differences to {a['reference']}",
             f"strategy - {a['reference']} at {at}, paired by data order and seed (an order's seeds averaged when "
             "there are several orders; points for accuracy); "
             f"mean and {100 * a['level']:.0f}% t-interval; MDE = smallest difference a two-sided paired t-test at "
             f"alpha={a['alpha']} detects with {100 * a['power']:.0f}% power for these pairs and this spread", ""]
    marked = table["zero_inflated"] if "zero_inflated" in table.columns else [False] * len(table)
    shown = table.assign(
        difference=[(f"{d:+.1f} [{lo:+.1f}, {hi:+.1f}]" if not math.isnan(lo) else f"{d:+.1f}") + (" *" if z else "")
                    for d, lo, hi, z in zip(table["diff"], table["ci_low"], table["ci_high"], marked)],
        MDE=[f"{m:.1f}" if math.isfinite(m) else "-" for m in table["mde"]])
    cols = ["block", "strategy", "benchmark", "metric", "difference", "n_pairs", "MDE", "verdict", "notes"]
    if a.get("plan") is not None:
        planned = f"pairs for MDE <= {a['plan']:g}"
        shown[planned] = [f"{n:.0f}" if math.isfinite(n) else f"> {MOST_PAIRS}" if n == math.inf else "-"
                          for n in table["pairs_needed"]]
        cols.insert(cols.index("MDE") + 1, planned)
        lines[1] += (f"; pairs for MDE <= {a['plan']:g} = the fewest pairs (data orders; seeds in a one-order "
                     f"sweep) at which the MDE would be at most {a['plan']:g} in the row's units, projected from the spread observed here "
                     "(a planning number: the spread is itself estimated from these pairs)")
    lines.append(shown[cols].to_markdown(index=False, disable_numparse=True))
    if any(marked):
        lines += ["", "\\* At most half of the pairs differ, the rest are exactly equal (an arm that never left the "
                      "reference's path): the interval is the share of pairs that differ (exact binomial) times their mean "
                      "(t), each at 97.5%, since a t-interval undercovers a mean of mostly zeros; its MDE is the t-test's, which "
                      "overstates the power for such pairs (docs/testbed.md)."]
    if table["notes"].astype(str).str.contains("spent ").any():
        lines += ["", f"'spent Nx ... of {a['reference']}'s': the arm's mean ledger at the evaluation read, as a ratio "
                      "to the reference's, on each axis (updates, trajectories, FLOPs) that differs by more than 2%: a "
                      "difference bought with more compute is one to read as such."]
    if a.get("run_notes"):
        lines += ["", a["run_notes"]]
    failed = table[table["verdict"].astype(str).str.startswith("CONTROL NOT")]
    if len(failed):
        lines += ["", f"The known-effect control was not detected in {len(failed)} block(s): this table could not have "
                      "seen an effect as large as the reference's own late learning; read its null results as uninformative."]
    return "\n".join(lines)
