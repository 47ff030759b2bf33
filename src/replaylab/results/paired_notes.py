"""What a paired row says beside its numbers: the budget each arm spent, and the runs it could not use.

A paired table compares arms at the evaluation it reads (each run's final one, or one update), which
matches them on whatever ended the runs (usually updates). The other budgets can still differ, by
design (dynamic sampling draws about twice the rollouts; RePO and RLEP train on more samples per update,
so spend more FLOPs) or by accident (a run capped at fewer updates): a difference in accuracy bought
with more compute must be read as such, so the row says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

# ledger columns compared, with the name a note gives them
SPEND = {"ledger_updates": "updates", "ledger_trajectories": "trajectories", "ledger_flops_total": "FLOPs"}
TOLERANCE = 0.02  # a relative difference below this is noise in the ledger's estimates (FLOPs), not a budget


def spend_note(arm: pd.DataFrame, reference: pd.DataFrame, name: str) -> str:
    """"spent X.XXx current's trajectories, ..." for every ledger axis on which the arm's mean at the
    evaluation read differs from the reference's by more than TOLERANCE; "" when they all match."""
    import pandas as pd

    parts = []
    for column, label in SPEND.items():
        if column not in arm.columns or column not in reference.columns:
            continue
        mine = pd.to_numeric(arm.drop_duplicates("run")[column], errors="coerce").mean()
        theirs = pd.to_numeric(reference.drop_duplicates("run")[column], errors="coerce").mean()
        if theirs > 0 and abs(mine / theirs - 1) > TOLERANCE:
            parts.append(f"{mine / theirs:.2f}x {label}")
        elif theirs == 0 and mine > 0:
            parts.append(f"{mine:.3g} {label} (the reference none)")
    return f"spent {', '.join(parts)} of {name}'s" if parts else ""


def eval_size_note(arm: pd.DataFrame, reference: pd.DataFrame, name: str) -> str:
    """Says when the arm's evaluation scored other numbers of samples (rows' `n`: problems x samples per
    problem, less the problems whose gold did not parse) than the reference's, under one eval setting: a
    benchmark file changed between the runs, or gold parsing did. Accuracies on different problem sets do
    not pair."""
    if "n" not in arm.columns or "n" not in reference.columns:
        return ""
    mine, theirs = (sorted(set(frame["n"].dropna().astype(int))) for frame in (arm, reference))
    if not mine or not theirs or mine == theirs:
        return ""
    return f"scored {'/'.join(map(str, mine))} samples against {name}'s {'/'.join(map(str, theirs))}"


def check_same_evaluation(arm: pd.DataFrame, reference: pd.DataFrame, arm_name: str, reference_name: str) -> None:
    """Raises when the two arms' runs were evaluated differently (rows' `eval_setting`: decoding, samples per
    problem, budget, problems; `eval_data`: the benchmarks' problems and golds themselves), or when runs
    paired on one data order trained on different prompt streams (`train_data`: another data root or file):
    a paired difference of them would read the data change as an effect of the strategy. Runs from before
    a column are not checked."""
    for column, what in (("eval_setting", "evaluated as"), ("eval_data", "scored on benchmark data")):
        if column not in arm.columns or column not in reference.columns:
            continue
        mine, theirs = (set(frame[column].dropna().astype(str)) for frame in (arm, reference))
        if mine and theirs and mine != theirs:
            raise ValueError(f"{arm_name} was {what} {' | '.join(sorted(mine))!r} and {reference_name} {what} "
                             f"{' | '.join(sorted(theirs))!r} (rows' {column}): accuracies measured differently do not "
                             "pair; rerun one arm's evaluation with the other's eval settings and data")
    if "train_data" not in arm.columns or "train_data" not in reference.columns:
        return
    streams = [frame.dropna(subset=["train_data"]).drop_duplicates("run").set_index("run") for frame in (arm, reference)]
    for run, row in streams[0].iterrows():
        for other, ref in streams[1].iterrows():
            if (ref["order"], ref["seed"]) == (row["order"], row["seed"]) and ref["train_data"] != row["train_data"]:
                raise ValueError(f"{run} ({arm_name}) and {other} ({reference_name}) pair on order {row['order']} but "
                                 f"trained on different prompt streams (rows' train_data {row['train_data']} and "
                                 f"{ref['train_data']}): another data root or data file; rerun one of them on the other's data")


def left_out_note(remarks: dict[str, str], runs: pd.DataFrame, strategies: tuple[str, ...], block: str | None,
                  value) -> str:
    """The remarks the evaluation's selection made (a run unfinished, without an evaluation at the update, or
    unfinished but included at a fixed update) for the runs of these strategies in this block."""
    picked = []
    for run, why in sorted(remarks.items()):
        if run not in runs.index or runs.at[run, "strategy"] not in strategies:
            continue
        if block and runs.at[run, block] != value:
            continue
        picked.append(f"{runs.at[run, 'strategy']} order {runs.at[run, 'order']}: {why}")
    return "; ".join(picked)
