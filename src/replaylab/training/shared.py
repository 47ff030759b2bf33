"""Work a sweep's runs would repeat, done once: the initial policy's evaluation and its rollouts.

Every run of a sweep starts from the same initial policy, so two kinds of work are the same numbers in
many of its runs:

* the update-0 evaluation: it depends on the initial weights, the evaluation settings and the seed,
  not on the strategy or the data order. One evaluation serves every run whose config differs from
  the writer's only in `strategy` and `order` (a GRPO sweep of 6 strategies x 5 orders evaluates the
  initial policy once, not 30 times).
* initial-policy rollouts: a run samples the initial policy at iteration i on the prompts its data
  order gives it there, with seed (trainer.seed, "initial", i). Runs that differ only in strategy
  sample the same groups when they ask for the same prompts at the same iteration: `initial` at every
  iteration, the fixed schedule and R-OPD after their switch to initial-policy replay.

The first run to do the work writes it under `<output_root>/<experiment>/.shared/` (atomic writes, so
runs of a parallel sweep may race: both compute, either file serves); a later run with the same key reads
it instead of computing it. Rollouts are stored as sampled, before teacher scoring or grading, which
the reading run does itself in the same batches, so its ledger counts what a run that sampled them would
count and its rows are that run's rows, wall-clock fields aside (tests/test_shared.py checks it through
real runs). A key is the hash of the config that determines the work (the run's config without the
fields above) plus the code and library versions of the rows (`versions`), and for the evaluation the
fingerprint of the benchmarks' problems and golds; an entry is also checked
against the prompts asked for. Like a resume or a branch, reading trusts the writer to have computed as
this machine does (threads and device are in the config, the CPU model is not). `share=false` turns it
off; runs under torchrun never share.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from replaylab.storage import CorruptCheckpoint, UnsafeCheckpoint, atomic_torch_save, atomic_write, safe_torch_load
from replaylab.training.runs import semantic_config
from replaylab.types import Group, Prompt

log = logging.getLogger(__name__)

SHARED_DIR = ".shared"


def _digest(payload) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def work_key(cfg: DictConfig, leave_out: tuple[str, ...]) -> dict:
    """The run's semantic config without the top-level keys `leave_out`: what the shared work depends on."""
    d = semantic_config(cfg)
    for key in leave_out:
        d.pop(key, None)
    return d


class SharedWork:
    """The shared store of one run (`for_run`); None there when the run does not share."""

    def __init__(self, root: Path, cfg: DictConfig, versions: str, eval_fingerprint: str = ""):
        self.root = root
        self.versions = versions
        # the benchmarks' problems and golds too (evaluation.benchmarks_fingerprint): a benchmark file changed
        # between two runs of a sweep would otherwise hand the later one an evaluation graded on the old golds
        self.eval_key = _digest([work_key(cfg, ("strategy", "order")), versions, eval_fingerprint])
        self.rollout_key = _digest([work_key(cfg, ("strategy",)), versions])
        self.hits = {"evaluation": 0, "rollouts": 0}  # what this run read instead of computing (logged at the end)

    @classmethod
    def for_run(cls, cfg: DictConfig, versions: str, eval_fingerprint: str = "") -> "SharedWork | None":
        from replaylab import parallel as D

        # ranks would each read and write: like branching, a distributed run does it all itself (an explicit
        # share=true there is a config error, config_checks.check_sibling_work)
        if cfg.get("share") is False or cfg.trainer.distributed != "none" or D.world_size() != 1:
            return None
        return cls(Path(cfg.output_root) / cfg.experiment / SHARED_DIR, cfg, versions, eval_fingerprint)

    # ------------------------------------------------------------- the update-0 evaluation
    def initial_evaluation(self, compute: Callable[[], list]) -> list:
        """[(benchmark, metrics, n)] of the initial policy: read, or computed and written."""
        path = self.root / f"eval-{self.eval_key}.json"
        found = self._read_json(path)
        if found is not None and found.get("versions") == self.versions:
            self.hits["evaluation"] += 1
            log.info("replaylab: the initial policy's evaluation read from %s (a sibling run computed it)", path)
            return [(b, m, n) for b, m, n in found["results"]]
        results = compute()
        self._write(path, lambda p: atomic_write(p, json.dumps({"versions": self.versions, "results": results})))
        return results

    # ------------------------------------------------------------- initial-policy rollouts
    def initial_rollouts(self, seed_parts: tuple, prompts: list[Prompt], params, sample: Callable[[], list[Group]]) -> list[Group]:
        """The groups `sample()` returns for `prompts` at `seed_parts` (initial policy, before scoring):
        read, or sampled and written. A read entry gets this run's own prompt objects."""
        name = _digest([list(map(str, seed_parts)), repr(params), [p.uid for p in prompts]])
        path = self.root / f"rollouts-{self.rollout_key}" / f"{name}.pt"
        found = self._read_torch(path)
        if (found is not None and found.get("versions") == self.versions
                and [g.prompt for g in found["groups"]] == list(prompts)):
            self.hits["rollouts"] += 1
            groups = found["groups"]
            for group, prompt in zip(groups, prompts):
                group.prompt = prompt
                for s in group.samples:
                    s.prompt = prompt
            return groups
        groups = sample()
        self._write(path, lambda p: atomic_torch_save({"versions": self.versions, "groups": groups}, p))
        return groups

    # ------------------------------------------------------------- files
    @staticmethod
    def _read_json(path: Path) -> dict | None:
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:  # torn or foreign: compute instead, and say so
            log.warning("replaylab: ignoring the shared entry %s (%s)", path, e)
            return None

    @staticmethod
    def _read_torch(path: Path) -> dict | None:
        if not path.exists():
            return None
        try:
            found = safe_torch_load(path)
        except (CorruptCheckpoint, UnsafeCheckpoint, OSError) as e:
            log.warning("replaylab: ignoring the shared entry %s (%s)", path, e)
            return None
        return found if isinstance(found, dict) and "groups" in found else None

    @staticmethod
    def _write(path: Path, write: Callable[[Path], None]) -> None:
        """Write an entry; a failed write (disk full) costs sharing, not the run."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write(path)
        except (OSError, TypeError, ValueError) as e:  # TypeError: a metric JSON cannot hold
            log.warning("replaylab: could not write the shared entry %s (%s); the run goes on without it", path, e)
