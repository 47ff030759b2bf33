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
    """Says when the arm's evaluation read other numbers of problems (rows' `n`) than the reference's: an
    `eval.max_problems` override on one arm, say. Accuracies on different problem sets do not pair."""
    if "n" not in arm.columns or "n" not in reference.columns:
        return ""
    mine, theirs = (sorted(set(frame["n"].dropna().astype(int))) for frame in (arm, reference))
    if not mine or not theirs or mine == theirs:
        return ""
    return f"evaluated on {'/'.join(map(str, mine))} problems against {name}'s {'/'.join(map(str, theirs))}"


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
