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
    problem, budget, problems): their accuracies measure different things and a paired difference of them
    would read the evaluation change as an effect of the strategy. Runs from before the column are not checked."""
    if "eval_setting" not in arm.columns or "eval_setting" not in reference.columns:
        return
    mine, theirs = (set(frame["eval_setting"].dropna().astype(str)) for frame in (arm, reference))
    if mine and theirs and mine != theirs:
        raise ValueError(f"{arm_name} was evaluated as {' | '.join(sorted(mine))!r} and {reference_name} as "
                         f"{' | '.join(sorted(theirs))!r} (rows' eval_setting): accuracies measured differently do not "
                         "pair; rerun one arm's evaluation with the other's eval settings")


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
