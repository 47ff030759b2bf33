"""Run directories, named by the hash of the resolved config; checkpoints; the done marker.

Everything that changes the numbers is in the hash; knobs that only change bookkeeping (progress
bars, checkpoint cadence, wandb, the output root, grading parallelism, how long ranks wait) are not, so a run resumed
with a different cadence, or mirrored to wandb, lands in the same directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from replaylab.storage import atomic_torch_save, atomic_write, safe_torch_load

NON_SEMANTIC_KEYS = (
    "progress", "output_root", "wandb", "trainer.checkpoint_every", "trainer.keep_checkpoints",
    "eval.grader_workers", "run_lock_wait", "resume_rows", "branch", "share", "trainer.dist_timeout_s",
)


def semantic_config(cfg: DictConfig) -> dict:
    d = OmegaConf.to_container(cfg, resolve=True)
    for key in NON_SEMANTIC_KEYS:
        node, *rest = key.split(".")
        if rest:
            d.get(node, {}).pop(rest[0], None)
        else:
            d.pop(node, None)
    # Where a server teacher runs is not what it computes (teacher.kind and name_or_path are, and the server must
    # serve that name): a requeued job whose `vllm serve` came back on another node resumes its run instead of
    # starting a new one. Set to None rather than dropped, so every other run's hash stays what it was.
    if isinstance(d.get("teacher"), dict) and "server_url" in d["teacher"]:
        d["teacher"]["server_url"] = None
    return d


def config_hash(cfg: DictConfig) -> str:
    payload = json.dumps(semantic_config(cfg), sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def run_dir(cfg: DictConfig) -> Path:
    """`<output_root>/<experiment>/<trainer kind>-<strategy label or name>-<config hash>`."""
    label = f"{cfg.trainer.kind}-{cfg.strategy.get('label') or cfg.strategy.name}"
    return Path(cfg.output_root) / cfg.experiment / f"{label}-{config_hash(cfg)}"


def done_marker(path: Path) -> Path:
    return path / "done.json"


def is_done(path: Path) -> bool:
    return done_marker(path).exists()


def mark_done(path: Path, summary: dict) -> None:
    """The done marker: the run's final ledger, and which process on which host finished it."""
    record = {**summary, "host": socket.gethostname(), "pid": os.getpid()}
    atomic_write(done_marker(path), json.dumps(record, indent=2, default=str))


class UnsafePointer(ValueError):
    pass


CHECKPOINT_NAME = re.compile(r"update_\d{7}(\.pt)?")  # a file (one process) or a directory (sharded)


def checkpoint_due(every: int, before: int, after: int) -> bool:
    """Whether an iteration that took the run from update `before` to `after` ends with a checkpoint
    (`trainer.checkpoint_every`; the trainer also checkpoints at the end of the run)."""
    return bool(every) and after // every > before // every


def checkpoint_updates(every: int, per_iteration: int, end: int) -> list[int]:
    """The updates a run of `end` updates, `per_iteration` per iteration, leaves checkpoints at."""
    due = [u for u in range(per_iteration, end + 1, per_iteration) if checkpoint_due(every, u - per_iteration, u)]
    return due if due and due[-1] == end else due + [end]


def rows_without_checkpoint(path: Path, first_checkpoint: int) -> str | None:
    """Why a run directory with no checkpoint to resume from must not start over, or None.

    Starting over truncates rows.jsonl. That is right for a run killed before its first checkpoint (its
    rows are written again, identically), but rows at or past the update where the run writes its first
    checkpoint mean checkpoints were written and are gone (deleted to save disk, or with the done marker
    by hand): starting over would throw away rows no checkpoint can restore. A line that is not JSON (a
    torn last write) is passed over here; the rows check on resume names it."""
    rows = path / "rows.jsonl"
    if not rows.is_file():
        return None
    with open(rows, encoding="utf-8", errors="replace") as f:
        for line_no, line in enumerate(f, start=1):
            try:
                update = json.loads(line).get("update")
            except (json.JSONDecodeError, AttributeError):
                continue
            if isinstance(update, int) and update >= first_checkpoint:
                return (f"{rows}:{line_no}: a row at update {update}, at or past update {first_checkpoint} where this "
                        f"run writes its first checkpoint, yet {path / 'checkpoints'} holds none to resume from: "
                        "starting over would truncate rows no checkpoint can restore. Move rows.jsonl aside (or "
                        "remove the run directory) to train it again from update 0")
    return None


def save_checkpoint(path: Path, update: int, state: dict, keep: int) -> Path:
    """Write `state` as checkpoint `update`, atomically; keep the last `keep` checkpoints."""
    ckpt_root = path / "checkpoints"
    ckpt_root.mkdir(parents=True, exist_ok=True)
    target = ckpt_root / f"update_{update:07d}.pt"
    atomic_torch_save(state, target)
    write_latest(path, target.name)
    prune_checkpoints(path, keep)
    return target


def write_latest(path: Path, name: str) -> None:
    atomic_write(path / "checkpoints" / "latest", name)


def prune_checkpoints(path: Path, keep: int) -> None:
    """Keep the newest `keep` checkpoints (files in a single process, directories when sharded)."""
    for old in sorted(p for p in (path / "checkpoints").glob("update_*") if CHECKPOINT_NAME.fullmatch(p.name))[:-keep]:
        shutil.rmtree(old) if old.is_dir() else old.unlink()


def _inside(root: Path, name: str) -> Path:
    """`root / name` for a checkpoint name, refusing anything that could lead outside `root`."""
    target = root / name
    if not CHECKPOINT_NAME.fullmatch(name) or target.resolve().parent != root.resolve():
        raise UnsafePointer(f"{root / 'latest'} points at {name!r}, not a checkpoint of this run directory; refused")
    return target


def latest_checkpoint(path: Path) -> Path | None:
    """The checkpoint `checkpoints/latest` names (inside the run directory only), or None."""
    pointer = path / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    target = _inside(path / "checkpoints", pointer.read_text().strip())
    return target if target.exists() else None


def checkpoint_candidates(path: Path) -> tuple[list[Path], list[str]]:
    """Checkpoints to resume from, best first: the one `latest` names, then every other, newest first;
    and what was wrong with the pointer (for the log)."""
    root = path / "checkpoints"
    if not root.is_dir():
        return [], []
    found = sorted((p for p in root.iterdir() if CHECKPOINT_NAME.fullmatch(p.name)), reverse=True)
    notes: list[str] = []
    pointer = root / "latest"
    if pointer.exists():
        named = _inside(root, pointer.read_text().strip())
        if named.exists():
            found = [named] + [p for p in found if p != named]
        else:
            notes.append(f"{pointer} names {named.name}, which does not exist")
    elif found:
        notes.append(f"{pointer} is missing")
    return found, notes


# What every trainer state holds (Trainer.state_dict); a single-file checkpoint adds the weights.
STATE_KEYS = frozenset({"scheduler", "strategy", "stream_position", "ledger", "rows", "iteration", "update", "torch_rng"})


def check_own_state(state, run_dir: Path, target: Path, weights: bool) -> None:
    """Refuse, as a CorruptCheckpoint (the resume then tries an older one), a loaded checkpoint that is not a
    trainer state of this run: one copied from another run directory would restore that run's weights and rows
    (and the rows' mismatch then blamed this run's rows), and a file without the state's keys stopped the resume
    with a KeyError."""
    from replaylab.storage import CorruptCheckpoint

    if not isinstance(state, dict):
        raise CorruptCheckpoint(f"{target} is not a trainer checkpoint (a {type(state).__name__}, not a state mapping)")
    missing = sorted((STATE_KEYS | ({"policy", "optimizer"} if weights else set())) - set(state))
    if missing:
        raise CorruptCheckpoint(f"{target} is not a trainer checkpoint (no {', '.join(missing)})")
    if state.get("run", run_dir.name) != run_dir.name:  # checkpoints from before the field have none
        raise CorruptCheckpoint(f"{target} was written by run {state['run']}, not by this run ({run_dir.name}): "
                                "a checkpoint copied from another run directory")


def load_checkpoint(target: Path) -> dict:
    """A single-file checkpoint, loaded with weights_only (storage.safe_torch_load)."""
    return safe_torch_load(target)


def export_checkpoint(target: Path, out_dir: Path, base_model_dir: str) -> Path:
    """A checkpoint (a .pt file, or a sharded torch.distributed.checkpoint directory) as a plain
    transformers directory, with the base model's config and tokenizer."""
    from replaylab.parallel import export_to_hf

    if target.is_dir():
        return export_to_hf(target, out_dir, base_model_dir)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base_model_dir)
    model.load_state_dict(load_checkpoint(target)["policy"])
    model.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(base_model_dir).save_pretrained(out_dir)
    return out_dir
