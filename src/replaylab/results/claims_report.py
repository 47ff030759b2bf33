"""`replaylab claims RUNS_ROOT`: the claims report (`make tiny-claims` runs the sweeps, then this).

For every claim of `results/tiny_claims.py` whose sweep has runs under RUNS_ROOT/<sweep>: each
check's paired difference with its 95% interval, the number of pairs, the MDE (80% power, alpha
0.05) and the verdict (`results/claims.py` states the rules), the claim's verdict, and one figure
per claim (each check's per-pair differences, their mean and interval, the lines at 0 and at the
effect that matters). Every sweep also gets its known-effect control (the reference at its final
evaluation against itself half-way, `paired.control_rows`): a sweep whose control is not
detected is said to have failed its own check, and its inconclusive verdicts mean little.
"""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
from pathlib import Path
from typing import Any

from replaylab.results.claims import Claim, check_reading, check_verdict, claim_verdict, run_check
from replaylab.results.provenance import run_notes
from replaylab.results.paired import describe_diffs, differ, paired_interval


def _fmt(d: float, lo: float, hi: float) -> str:
    return f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}]" if not math.isnan(lo) else (f"{d:+.2f}" if math.isfinite(d) else "-")


FAMILY_ALPHA = 0.05  # the report's family-wise error rate: the chance that any verdict it prints is wrong


def evaluate_claims(frames: dict[str, Any], claims: tuple[Claim, ...], family_alpha: float = FAMILY_ALPHA
                    ) -> list[dict[str, Any]]:
    """One record per claim: its checks' results and its verdict (claims whose sweep has no frame: not run).

    Each check is also read family-wise: again at level 1 - family_alpha / m, with the MDE at that alpha, where
    m counts the report's checks with an interval (two pairs or more). By Bonferroni all m intervals then cover
    together with probability at least 1 - family_alpha, so the chance that any family-wise verdict is wrong
    (a null read as reproduced, a real effect as contradicted) is at most family_alpha, whatever the checks'
    correlation. A report of ~25 checks at 95% each makes about one wrong call by chance; the family-wise
    column says which verdicts survive that. Its price is power (at three orders the t quantile grows from
    4.3 to over 20), so it is a second reading beside the per-check one, not a replacement."""
    out = []
    for claim in claims:
        df = frames.get(claim.sweep)
        results = [run_check(df, c) for c in claim.checks] if df is not None else []
        out.append({"claim": claim, "checks": results,
                    "verdict": claim_verdict(claim, [r["verdict"] for r in results])})
    family = sum(r["n_pairs"] >= 2 for rec in out for r in rec["checks"])
    each = family_alpha / max(family, 1)
    for rec in out:
        claim = rec["claim"]
        for check, r in zip(claim.checks, rec["checks"]):
            r["familywise"] = r["verdict"]
            if r["n_pairs"] >= 2:  # the same pairs, read at the family's level
                wide = describe_diffs(r["diffs"], 1 - each, 0.8, each)
                r["familywise"] = check_verdict(check.expect, wide["ci_low"], wide["ci_high"], wide["mde"], check.effect)
        rec["familywise"] = claim_verdict(claim, [r["familywise"] for r in rec["checks"]])
        rec["family"] = family
    return out


def control_table(frames: dict[str, Any], references: dict[str, str]) -> list[dict[str, Any]]:
    from replaylab.results.aggregation import run_index
    from replaylab.results.paired import control_rows

    rows = []
    for sweep, df in frames.items():
        ref = references.get(sweep, "current")
        runs = run_index(df)
        block = "budget" if df["budget"].nunique() > 1 else None
        for r in control_rows(df, runs, ref, ["avg@k"], ["mean"], block, 0.95, 0.8, 0.05):
            rows.append({"sweep": sweep, **r})
    return rows


def control_by_sweep(controls: list[dict[str, Any]]) -> dict[str, str]:
    """sweep -> "detected" when every block's control was, else which blocks were not."""
    out: dict[str, list] = {}
    for c in controls:
        out.setdefault(c["sweep"], []).append(c)
    marks = {}
    for sweep, cs in out.items():
        failed = [c for c in cs if c["verdict"] != "control detected"]
        blocks = sorted({str(c["block"]) for c in failed if c["block"]})
        marks[sweep] = ("detected" if not failed else
                        f"NOT detected ({len(failed)} of {len(cs)}{': ' + ', '.join(blocks) if blocks else ''})")
    return marks


def claim_figure(record: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    claim, results = record["claim"], record["checks"]
    # one row per check, each with its own x axis: checks of one claim may measure different units
    fig, axes = plt.subplots(len(results), 1, figsize=(7.5, 0.95 * len(results) + 1.2), squeeze=False)
    for ax, check, r in zip(axes[:, 0], claim.checks, results):
        reading, stance = check_reading(claim, check, r["verdict"])
        ax.scatter(r["diffs"], [0] * len(r["diffs"]), color="0.55", s=14, zorder=2)
        if math.isfinite(r["ci_low"]):
            ax.errorbar([r["diff"]], [0], xerr=[[r["diff"] - r["ci_low"]], [r["ci_high"] - r["diff"]]], fmt="o",
                        color={"against": "C3", "for": "C2"}.get(stance, "C0"), capsize=3, zorder=3)
        for x in ({"higher": [check.effect], "lower": [-check.effect], "not_higher": [check.effect],
                   "same": [-check.effect, check.effect]}[check.expect]):
            ax.axvline(x, color="0.3", ls=":", lw=1)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_yticks([0], [f"{check.label}\n[tests: {check.expect.replace('_', ' ')}; {reading}]"], fontsize=7)
    axes[-1, 0].set_xlabel("paired difference\n(dots: data orders; bar: mean and 95% interval; dotted: effect that "
                           "matters)", fontsize=8)
    family = f" (family-wise: {record['familywise']})" if "familywise" in record else ""
    fig.suptitle("\n".join(textwrap.wrap(f"{claim.paper}: {claim.statement} — {record['verdict']}{family}", 70)),
                 fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")  # long check labels sit left of the axes
    plt.close(fig)
    return path


def md_table(rows: list[dict]) -> str:
    """A Markdown table of `rows`, a `|` inside a cell escaped (a claim about "mean |advantage|" split its row
    into extra columns in every renderer)."""
    import pandas as pd

    return pd.DataFrame([{k: v.replace("|", "\\|") if isinstance(v, str) else v for k, v in r.items()} for r in rows]
                        ).to_markdown(index=False)


def _pairs(diffs: list[float]) -> str:
    """The pair count, with how many differ when some are exactly equal."""
    k = differ(diffs)
    return f"{len(diffs)}" if k == len(diffs) else f"{len(diffs)} ({k} differ)"


def _among(diffs: list[float]) -> str:
    """The mean and 95% t-interval over the pairs that differ: what the arm did where it left the path."""
    mean, _, lo, hi, n = paired_interval([d for d in diffs if d != 0])
    return _fmt(mean, lo, hi) + f" over {n}" if math.isfinite(lo) else f"{mean:+.2f} over {n}"


def report_markdown(records: list[dict[str, Any]], controls: list[dict[str, Any]], figures: dict[int, Path],
                    sizes: dict[str, str]) -> str:
    lines = ["# Tiny-world claims report", "",
             "Each claim is tested by paired differences (arm - comparison, paired by data order and seed) with a 95% "
             "t-interval and the minimum detectable effect (MDE) at 80% power, alpha 0.05. Verdicts: reproduced, "
             "contradicted (the opposite, or an interval that covers 0 and excludes the effect that matters while "
             "the MDE says one that large would have been seen), inconclusive (the interval covers 0, and the MDE "
             "exceeds the effect or the interval reaches it). "
             "Accuracy is the suite mean avg@k in points (tiny8 for the GRPO sweep, tinylong for the R-OPD and "
             "budget-axes sweeps). A claim whose sweep "
             "did not detect its own known-effect control is marked in the summary: that sweep failed its own check, "
             "so read its verdicts with the control's row below.", ""]
    family = max((r.get("family", 0) for r in records), default=0)
    if family:
        lines += [f"At 95% each, the report's {family} checks with an interval make about {0.05 * family:.1f} wrong "
                  "calls by chance. The family-wise columns read every check again at level "
                  f"1 - 0.05/{family} ({100 * (1 - 0.05 / family):.2f}% intervals, the MDE at that alpha; "
                  "Bonferroni): the chance that any family-wise verdict is wrong is at most 5%. They cost power, so "
                  "a verdict that holds only per check is one to confirm with more data orders.", ""]
    control = control_by_sweep(controls)
    summary = [{"paper": r["claim"].paper, "claim": r["claim"].statement, "sweep": r["claim"].sweep,
                "verdict": r["verdict"], "family-wise": r.get("familywise", r["verdict"]),
                "sweep's control": control.get(r["claim"].sweep, "-")} for r in records]
    lines += ["## Summary", "", md_table(summary), ""]
    lines += ["## Known-effect controls", ""]
    if controls:
        shown = [{"sweep": c["sweep"], "block": c["block"] if isinstance(c["block"], str) else "", "control": c["strategy"],
                  "difference": _fmt(c["diff"], c["ci_low"], c["ci_high"]), "pairs": c["n_pairs"],
                  "MDE": f"{c['mde']:.2f}" if math.isfinite(c["mde"]) else "-", "verdict": c["verdict"]} for c in controls]
        lines += [md_table(shown), ""]
    else:
        lines += ["(no sweep had a reference with an evaluation half-way)", ""]
    lines += ["## Runs", ""] + [f"- `{sweep}`: {text}" for sweep, text in sizes.items()] + [""]
    lines += ["## Checks", ""]
    for i, rec in enumerate(records):
        claim = rec["claim"]
        lines += [f"### {claim.paper}: {claim.statement}", "",
                  f"sweep `{claim.sweep}`; verdict **{rec['verdict']}** (family-wise: {rec.get('familywise', '-')})",
                  ""]
        if claim.combine == "not_uniform":
            lines += ["Each check tests its expectation (the first arm better); the claim (not uniformly better) holds "
                      "when some check finds the opposite, is contradicted when every check finds the expectation, and "
                      f"is inconclusive otherwise. Per check, its {len(claim.checks)} checks are read without a multiplicity "
                      "correction: with every check a true gain of exactly the effect, the claim reads reproduced by "
                      "chance in about 4-10% of sweeps, depending on the spread (docs/testbed.md). The family-wise "
                      "column reads them with one.", ""]
        if claim.note:
            lines += [f"Note: {claim.note}", ""]
        if not rec["checks"]:
            lines += ["not run: no runs of this sweep", ""]
            continue
        rows = [{"check": c.label, "expected": c.expect, "effect": c.effect,
                 "difference [95% CI]": _fmt(r["diff"], r["ci_low"], r["ci_high"]), "pairs": _pairs(r["diffs"]),
                 "MDE": f"{r['mde']:.2f}" if math.isfinite(r["mde"]) else "-",
                 "comparison mean": f"{r['against_mean']:.2f}" if math.isfinite(r["against_mean"]) else "-",
                 "verdict": check_reading(claim, c, r["verdict"])[0],
                 "family-wise": check_reading(claim, c, r.get("familywise", r["verdict"]))[0]}
                for c, r in zip(claim.checks, rec["checks"])]
        lines += [md_table(rows), ""]
        lines += [f"Check '{c.label}': {differ(r['diffs'])} of its {len(r['diffs'])} pairs differ, the "
                  "rest are exactly equal (an arm that never left the comparison's path, or both arms censored). A "
                  "t-interval undercovers for such differences (a rare large one reads as a small one), so its interval "
                  "is the conservative one for a mean of mostly zeros: the share of pairs that differ (exact binomial) "
                  "times their mean (t), each at 97.5%, and the verdict reads it (docs/testbed.md). Among the pairs "
                  f"that differ the mean is {_among(r['diffs'])}.\n"
                  for c, r in zip(claim.checks, rec["checks"]) if r.get("zero_inflated")]
        lines += [f"Check '{c.label}' reads {r['verdict']} per check and {r['familywise']} family-wise: both intervals "
                  f"exclude the effect that matters ({c.effect:g}); the narrower one excludes 0 as well (a difference "
                  "in the expected direction, smaller than that effect), the wider one does not (no difference "
                  "established, and one of that size ruled out).\n" for c, r in zip(claim.checks, rec["checks"])
                  if {r["verdict"], r.get("familywise")} == {"reproduced", "contradicted"}]
        lines += [f"Check '{c.label}' leaves out {r['left_out']}.\n" for c, r in zip(claim.checks, rec["checks"])
                  if r.get("left_out")]
        if i in figures:
            lines += [f"![{claim.statement}]({figures[i].name})", ""]
    return "\n".join(lines)


def sweep_sizes(frames: dict[str, Any]) -> dict[str, str]:
    out = {}
    for sweep, df in frames.items():
        runs = df.drop_duplicates("run")
        done = int((runs["status"] == "done").sum())
        ev = df[(df["split"] == "eval") & (df["metric"] == "avg@k") & df["benchmark"].astype(str).str.contains("/")]
        per_set = ev.groupby(["run", "update", "benchmark"])["n"].max().median() if "n" in ev and len(ev) else math.nan
        out[sweep] = (f"{done} of {len(runs)} runs finished, data orders {sorted(set(runs['order']))}, "
                      f"{int(df['update'].max())} updates at most, "
                      + (f"{per_set:.0f} problems per evaluation set" if math.isfinite(per_set) else "eval size unknown")
                      + (f"; final values are each run's mean over its last {tail} evaluations (eval.tail)"
                         if (tail := int(runs["eval_tail"].max())) > 1 else "")
                      + (f". {note}" if (note := run_notes(df)) else ""))
    return out


def cmd_claims(args: argparse.Namespace) -> int:
    from replaylab.results.frame import NoRowsError, load_experiment
    from replaylab.results.tiny_claims import CLAIMS, CONTROLS

    root = Path(args.runs)
    claimed = list(dict.fromkeys(c.sweep for c in CLAIMS))
    chosen = list(dict.fromkeys(v.strip() for v in (args.sweeps or "").split(",") if v.strip())) or claimed
    unread = [s for s in chosen if s not in claimed]
    if unread:
        print(f"replaylab claims: --sweeps {unread}: no claim reads them (the claimed sweeps: {claimed})", file=sys.stderr)
        return 2
    frames = {}
    for sweep in chosen:  # the claims of the others are reported as not run, whatever lies on disk
        try:
            frames[sweep] = load_experiment(root / sweep)
        except NoRowsError:
            print(f"replaylab claims: no runs under {root / sweep}; its claims are reported as not run", file=sys.stderr)
        except ValueError as e:  # a corrupted run directory, rows file or config: the message names it
            print(f"replaylab claims: {e}", file=sys.stderr)
            return 2
    try:
        records = evaluate_claims(frames, CLAIMS)
    except (ValueError, KeyError) as e:  # runs a claim cannot pair (stale twins, a missing column): say which
        print(f"replaylab claims: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    # no figure for a claim none of whose checks has a pair (its arm was not run)
    figures = {i: claim_figure(r, out.parent / f"{out.stem}_{i + 1:02d}.png") for i, r in enumerate(records)
               if any(c["diffs"] for c in r["checks"])}
    text = report_markdown(records, control_table(frames, CONTROLS), figures, sweep_sizes(frames))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(text.split("## Known-effect controls")[0].rstrip())
    print(f"\nreport: {out} ({len(figures)} figures beside it)")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("claims", help="test the seed papers' claims on the tiny sweeps' runs (Markdown report)")
    p.add_argument("runs", nargs="?", default="runs", help="the root holding one directory per sweep (default: runs)")
    p.add_argument("--out", default="reports/tiny_claims.md", help="the report's path; figures are written beside it")
    p.add_argument("--sweeps", help="read only these sweeps' runs (experiment names, comma-separated; default: every "
                                    "claimed sweep); the other sweeps' claims are reported as not run, even with runs on disk")
    p.set_defaults(func=cmd_claims)
    return p
