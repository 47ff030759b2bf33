"""Starting a run from the `current` run of its config instead of repeating that run's first updates.

A strategy whose first K updates are exactly `current`'s (`ReplayStrategy.current_prefix`: the fixed
schedule's K current-policy updates before replay) reaches update K in the very state that the
`current` run of the same config (every key equal but `strategy`) has there: the same weights,
optimizer moments, data-order position, RNG streams, ledger and rows. So it may start from that run's
checkpoint at the last checkpointed update <= K, the way a schedule like "40 current-policy updates,
then 20 of replay" is run at scale: continue the 40-update checkpoint.

It does so when `branch` is on (the default; it is not part of the config hash: the numbers are the
same), the run has no checkpoint of its own, the donor's checkpoint is on disk (its sweep keeps it:
`trainer.checkpoint_every`, `trainer.keep_checkpoints`) and its rows were written by the same code and
libraries (the rows' `versions`; like a resume, it trusts the donor to have run on a machine that
computes as this one does: thread count and device are in the hash, the CPU model is not). Otherwise the
run trains from the start. The branched run's rows up
to the branch point are the donor's with this run's identity, plus the strategy's own constant rows of
those iterations; its ledger carries the donor's counts and seconds for them (the compute the result
embodies). tests/test_branch.py checks, through real runs, that a branched run writes the rows of one
trained from the start (up to wall-clock fields).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from replaylab.replay.base import STRATEGIES
from replaylab.storage import CorruptCheckpoint, UnsafeCheckpoint
from replaylab.training.runs import CHECKPOINT_NAME, load_checkpoint, run_dir

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Branch:
    donor: Path  # the `current` run's directory
    checkpoint: Path  # its checkpoint at `update`
    update: int
    metrics: dict[str, float]  # the strategy rows each prefix iteration writes


def donor_dir(cfg: DictConfig) -> Path:
    """The run directory of this config with `strategy=current` (its config dataclass's defaults)."""
    d = OmegaConf.to_container(cfg, resolve=True)
    d["strategy"] = asdict(STRATEGIES["current"].Config())
    return run_dir(OmegaConf.create(d))


def donor_checkpoints(donor: Path, prefix: int) -> list[tuple[int, Path]]:
    """(update, file) of the donor's single-file checkpoints at updates <= prefix, in update order."""
    found = [(int(p.stem.split("_")[1]), p) for p in (donor / "checkpoints").glob("update_*.pt")
             if CHECKPOINT_NAME.fullmatch(p.name) and p.is_file()]
    return sorted((u, p) for u, p in found if u <= prefix)


def find_branch(cfg: DictConfig, strategy) -> Branch | None:
    """The donor checkpoint this run may start from, or None (train from the start)."""
    from replaylab import parallel as D

    prefix, metrics = strategy.current_prefix()
    if not cfg.get("branch", True) or prefix <= 0 or cfg.trainer.distributed != "none" or D.world_size() != 1:
        return None
    donor = donor_dir(cfg)
    found = donor_checkpoints(donor, prefix)
    if not found:
        log.info("replaylab: no checkpoint of %s at or before update %d to branch from; training from the start", donor, prefix)
        return None
    update, path = found[-1]
    return Branch(donor, path, update, dict(metrics))


def branch_state(branch: Branch, identity: dict, strategy_state: dict) -> tuple[dict, list[dict]] | None:
    """The donor's checkpoint as this run's state at the branch point (its rows rewritten to this run's
    identity, the strategy's own fresh state), and those rows; None, saying why, if it cannot serve."""
    try:
        state = load_checkpoint(branch.checkpoint)
    except (CorruptCheckpoint, UnsafeCheckpoint, OSError) as e:  # OSError: pruned by a donor still running
        log.warning("replaylab: cannot branch from %s (%s); training from the start", branch.checkpoint, e)
        return None
    if state.get("update") != branch.update or state.get("rows_text") is None:
        log.warning("replaylab: %s is not a whole checkpoint at update %d; training from the start", branch.checkpoint, branch.update)
        return None
    donor_rows = [json.loads(line) for line in state["rows_text"].splitlines()]
    versions = {r.get("versions") for r in donor_rows}
    if versions != {identity["versions"]}:
        log.info("replaylab: %s was written by other code or libraries (%s, here %s); training from the start",
                 branch.donor, sorted(map(str, versions)), identity["versions"])
        return None
    if any(r["split"] == "strategy" for r in donor_rows):  # not a `current` run's rows
        log.warning("replaylab: %s has strategy rows; not a current run: training from the start", branch.donor)
        return None
    rows = with_prefix_rows([{**r, **identity} for r in donor_rows], branch.metrics)
    state["rows_text"] = "".join(json.dumps(r) + "\n" for r in rows)
    state["rows"] = len(rows)
    state["strategy"] = strategy_state
    return state, rows


def with_prefix_rows(rows: list[dict], metrics: dict[str, float]) -> list[dict]:
    """`rows` with the strategy rows `metrics` after each iteration's training rows, as the trainer
    writes them (the same ledger columns as the iteration's last training row)."""
    out: list[dict] = []
    for i, row in enumerate(rows):
        out.append(row)
        last_train = row["split"] == "train" and (i + 1 == len(rows) or rows[i + 1]["split"] != "train"
                                                  or rows[i + 1]["iteration"] != row["iteration"])
        if last_train:
            out.extend({**row, "split": "strategy", "metric": k, "value": float(v), "n": None} for k, v in metrics.items())
    return out
