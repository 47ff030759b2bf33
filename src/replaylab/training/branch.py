"""Starting a run from another run's checkpoint instead of repeating the updates they share.

A strategy's `current_prefix()` says for how many updates at the start it trains exactly as `current`
does: the fixed schedule and `recent` for their K current-policy updates, `current` for its whole run.
Two runs of one config that differ only in such strategies are the same run up to the shorter prefix:
the same weights, optimizer moments, data-order position, RNG streams, ledger, evaluations and training
rows. So a run may start from the checkpoint of such a sibling (a *donor*) at the last checkpointed
update within both prefixes, the way a schedule like "40 current-policy updates, then 20 of replay" is
run at scale: continue the 40-update checkpoint. A strategy that builds state of its own during its
prefix (`prefix_state`: `recent` stores the rollouts it will replay) can lend its checkpoint but not
start from another's. A strategy whose prefix ends where a measurement of training says (`ropd`: its
trigger on the gradient norms) starts from a donor's checkpoint when, fed the donor's gradient readings
(every iteration's per-group norms, which a run with gradient groups checkpoints), it would still have
trained as `current` up to there (`ReplayStrategy.follow_readings`); its state and strategy rows are
the ones that reading gives. It lends its own checkpoints to no one.

A run branches when `branch` is on (the default; it is not part of the config hash: the numbers are the
same), it has no checkpoint of its own, a donor's checkpoint is on disk in the same experiment directory
(the sweep keeps it: `trainer.checkpoint_every`, `trainer.keep_checkpoints`) and the donor's rows were
written by the same code and libraries (the rows' `versions`; like a resume, it trusts the donor to
have run on a machine that computes as this one does: thread count and device are in the hash, the CPU
model is not). Donors are tried latest checkpoint first (a `current` run first on ties); if none
serves, the run trains from the start. Its rows up to the branch point are the donor's
training, evaluation and probe rows with this run's identity, plus its strategy's own constant rows of
those iterations (the donor's strategy rows are left out); its ledger carries the donor's counts and
seconds for them (the compute the result embodies). tests/test_branch.py checks, through real runs,
that a branched run writes the rows of one trained from the start (up to wall-clock fields).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from replaylab.replay.base import STRATEGIES, WHOLE_RUN, GradientReading
from replaylab.storage import CorruptCheckpoint, UnsafeCheckpoint
from replaylab.training.runs import CHECKPOINT_NAME, load_checkpoint, run_dir, semantic_config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Branch:
    donor: Path  # the run directory whose checkpoint the run starts from
    checkpoint: Path  # its checkpoint at `update`
    update: int
    metrics: dict[str, float]  # the strategy rows each prefix iteration writes


def sibling_key(cfg: DictConfig) -> str:
    """The config without its strategy (and without what the hash leaves out): runs with the same key
    differ only in strategy."""
    d = semantic_config(cfg)
    d.pop("strategy", None)
    return json.dumps(d, sort_keys=True, default=str)


def strategy_prefix(node: dict) -> tuple[int, bool]:
    """(updates trained exactly as `current`, whether state of its own builds up meanwhile) of a resolved
    strategy node; (0, True) for one that is not a registered strategy."""
    cls = STRATEGIES.get(node.get("name")) if isinstance(node, dict) else None
    if cls is None:
        return 0, True
    strategy = cls(cls.Config(**node))
    return strategy.current_prefix()[0], cls.prefix_state


@dataclass(frozen=True)
class Sibling:
    run: Path  # a run directory beside this run's, of the same config but the strategy
    prefix: int  # its strategy's current prefix
    strategy: str  # its strategy's registry name


def prefix_runs(root: Path) -> list[tuple[str, Sibling]]:
    """(sibling key, run) of every run under `root` (an experiment directory) that has checkpoints and
    whose strategy has a current prefix; a config.yaml that does not load lends nothing."""
    out = []
    for path in sorted(root.glob("*/config.yaml")):
        if not (path.parent / "checkpoints").is_dir():
            continue
        try:
            other = OmegaConf.load(path)
            node = OmegaConf.to_container(other.strategy, resolve=True)
            prefix, _ = strategy_prefix(node)
            key = sibling_key(other) if prefix > 0 else ""
        except Exception as e:  # noqa: BLE001  (a foreign or broken config: not a donor)
            log.debug("replaylab: %s is no donor: %r", path, e)
            continue
        if prefix > 0:
            out.append((key, Sibling(path.parent, prefix, node["name"])))
    return out


def siblings(root: Path, key: str, exclude: Path | None = None) -> list[Sibling]:
    """The runs under `root` that may lend a run of sibling key `key` a checkpoint."""
    return [sib for k, sib in prefix_runs(root) if k == key and sib.run != exclude]


def ranked(options: list[tuple]) -> list[tuple]:
    """Donor checkpoints (update, sibling, ...) best first: the latest update; on ties a `current` run,
    then by run name. (Any of them gives the same state; the rule only fixes which one `branched_from`
    names.)"""
    return sorted(options, key=lambda o: (-o[0], o[1].strategy != "current", o[1].run.name))


def donor_checkpoints(donor: Path, prefix: int) -> list[tuple[int, Path]]:
    """(update, file) of the donor's single-file checkpoints at updates <= prefix, in update order."""
    found = [(int(p.stem.split("_")[1]), p) for p in (donor / "checkpoints").glob("update_*.pt")
             if CHECKPOINT_NAME.fullmatch(p.name) and p.is_file()]
    return sorted((u, p) for u, p in found if u <= prefix)


def find_branches(cfg: DictConfig, strategy) -> list[Branch]:
    """The donor checkpoints this run may start from, best first (`Trainer.run` takes the first that
    serves); [] to train from the start."""
    from replaylab import parallel as D

    prefix, metrics = strategy.current_prefix()
    measured = type(strategy).measured_prefix()
    if measured:  # the prefix ends where the strategy's own reading of the donor's gradients says
        prefix = WHOLE_RUN
    own = run_dir(cfg) / "checkpoints"
    if (cfg.get("branch") is False or prefix <= 0 or (type(strategy).prefix_state and not measured)
            or cfg.trainer.distributed != "none" or D.world_size() != 1 or any(own.glob("update_*"))):
        return []  # (a run with checkpoints of its own resumes from them: no search, and no "from the start" line)
    options = []
    for sib in siblings(Path(cfg.output_root) / cfg.experiment, sibling_key(cfg), run_dir(cfg)):
        found = donor_checkpoints(sib.run, min(prefix, sib.prefix))
        # a measured prefix may end before the latest checkpoint: every one is a candidate, latest first
        options += [(u, sib, file) for u, file in (found if measured else found[-1:])]
    if not options:
        log.info("replaylab: no run of this config under another strategy has a checkpoint within its current-policy "
                 "prefix; training from the start")
    return [Branch(sib.run, file, u, dict(metrics)) for u, sib, file in ranked(options)]


def branch_state(branch: Branch, identity: dict, strategy) -> tuple[dict, list[dict]] | None:
    """The donor's checkpoint as this run's state at the branch point (its rows rewritten to this run's
    identity, the strategy's state there: its fresh state, or for a measured prefix the state it
    reaches following the donor's gradient readings), and those rows; None, saying why, if it cannot
    serve."""
    try:
        state = load_checkpoint(branch.checkpoint)
    except (CorruptCheckpoint, UnsafeCheckpoint, OSError) as e:  # OSError: pruned by a donor still running
        log.warning("replaylab: cannot branch from %s (%s); not starting from it", branch.checkpoint, e)
        return None
    if state.get("update") != branch.update or state.get("rows_text") is None:
        log.warning("replaylab: %s is not a whole checkpoint at update %d; not starting from it", branch.checkpoint, branch.update)
        return None
    donor_rows = [json.loads(line) for line in state["rows_text"].splitlines()]
    versions = {r.get("versions") for r in donor_rows}
    if versions != {identity["versions"]}:
        log.info("replaylab: %s was written by other code or libraries (%s, here %s); not starting from it",
                 branch.donor, sorted(map(str, versions)), identity["versions"])
        return None
    if type(strategy).measured_prefix():
        followed = follow_donor(branch, state, strategy)
        if followed is None:
            return None
        strategy_state, per_iteration = followed
    else:
        strategy_state, per_iteration = strategy.state_dict(), None
    # the donor's own strategy rows go; its training, evaluation and probe rows are the current policy's
    rows = with_prefix_rows([{**r, **identity} for r in donor_rows if r["split"] != "strategy"],
                            lambda iteration: per_iteration[iteration - 1] if per_iteration else branch.metrics)
    state["rows_text"] = "".join(json.dumps(r) + "\n" for r in rows)
    state["rows"] = len(rows)
    state["strategy"] = strategy_state
    return state, rows


def follow_donor(branch: Branch, state: dict, strategy) -> tuple[dict, list[dict[str, float]]] | None:
    """(state, strategy rows per iteration) of a fresh instance of `strategy` that followed the donor's
    gradient readings up to the branch point; None, saying why, if the donor did not record every
    iteration's or the strategy would have left its current-policy prefix before the branch point."""
    recorded = state.get("gradient_readings") or []
    if [r[0] for r in recorded] != list(range(state["iteration"])):
        log.info("replaylab: %s did not record the gradient readings of its %d iterations (gradient groups, "
                 "trainer.stat_groups_for_all); not starting from it", branch.checkpoint, state["iteration"])
        return None
    fresh = type(strategy)(strategy.cfg)
    rows = fresh.follow_readings([GradientReading(i, start, end, norms) for i, start, end, norms in recorded])
    if rows is None:
        log.info("replaylab: following %s's gradient readings, %s leaves the current-policy prefix before update %d; "
                 "not starting from it", branch.donor.name, type(strategy).name, branch.update)
        return None
    return fresh.state_dict(), rows


def with_prefix_rows(rows: list[dict], metrics_of: Callable[[int], dict[str, float]]) -> list[dict]:
    """`rows` with the strategy rows `metrics_of(iteration)` after each iteration's training rows, as the
    trainer writes them (the same ledger columns as the iteration's last training row)."""
    out: list[dict] = []
    for i, row in enumerate(rows):
        out.append(row)
        last_train = row["split"] == "train" and (i + 1 == len(rows) or rows[i + 1]["split"] != "train"
                                                  or rows[i + 1]["iteration"] != row["iteration"])
        if last_train:
            out.extend({**row, "split": "strategy", "metric": k, "value": float(v), "n": None}
                       for k, v in metrics_of(row["iteration"]).items())
    return out
