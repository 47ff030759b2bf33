"""Build, cache and locate the tiny world: tokenizer, SFT teacher and weaker student.

The teacher is a small Qwen3-architecture model trained by SFT on the arithmetic task; the student
is an early checkpoint of the same run (measured: an early checkpoint has room to learn yet
earns rewards). The build is deterministic and cached under a directory keyed by the hash of its
build config, so `make tiny` twice is a cache hit and every run of a sweep shares one build.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import logging
import os
import random
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import Qwen3Config, Qwen3ForCausalLM

from replaylab.models.sft import SFTSchedule, train_sft
from replaylab.models.tiny_spec import TinyModelSize, TinyWorldConfig
from replaylab.models.tiny_tokenizer import VOCAB_SIZE, build_tiny_tokenizer
from replaylab.storage import atomic_write
from replaylab.tasks.arithmetic import make_problem
from replaylab.tasks.tiny8 import held_out_questions

log = logging.getLogger(__name__)

def cache_root() -> Path:
    """`$REPLAYLAB_CACHE`, else `$XDG_CACHE_HOME/replaylab`, else `~/.cache/replaylab`."""
    if os.environ.get("REPLAYLAB_CACHE"):
        return Path(os.environ["REPLAYLAB_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "replaylab"


def tiny_world_dir(cfg: TinyWorldConfig) -> Path:
    return cache_root() / "tiny" / cfg.digest()


def _qwen3(size: TinyModelSize, tokenizer) -> Qwen3ForCausalLM:
    config = Qwen3Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=size.hidden_size,
        intermediate_size=size.intermediate_size,
        num_hidden_layers=size.num_layers,
        num_attention_heads=size.num_heads,
        num_key_value_heads=size.num_kv_heads,
        head_dim=size.hidden_size // size.num_heads,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return Qwen3ForCausalLM(config)


def _save(model, tokenizer, path: Path) -> None:
    model.generation_config.top_k = None  # no hidden sampling defaults: callers say what they want
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def build_tiny_world(cfg: TinyWorldConfig, out: Path, progress: bool = True) -> dict:
    """Train the teacher, snapshot the student, save both (with the tokenizer) under `out`."""
    tokenizer = build_tiny_tokenizer()
    torch.manual_seed(cfg.seed)
    model = _qwen3(cfg.teacher, tokenizer)
    held_out = held_out_questions(tuple(cfg.kinds))

    def sample_batch(rng: random.Random, n: int):
        batch = []
        while len(batch) < n:
            p = make_problem(rng.choice(cfg.kinds), rng, "sft")
            if p.question not in held_out:
                batch.append(p)
        return batch

    bar = tqdm(total=cfg.teacher_steps, desc="tiny world: SFT", disable=not progress, unit="step")
    t0 = time.time()

    if not progress:
        log.info("replaylab: building the tiny world in %s (%d SFT steps; a few minutes on a CPU)", out, cfg.teacher_steps)

    def on_step(step: int, loss: float) -> None:
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}")
        if not progress and step % max(1, cfg.teacher_steps // 4) == 0:
            log.info("replaylab: tiny world SFT step %d/%d, loss %.3f", step, cfg.teacher_steps, loss)
        if step == cfg.student_step:
            _save(copy.deepcopy(model).eval(), tokenizer, out / "student")

    train_sft(model, tokenizer, sample_batch, SFTSchedule(cfg.teacher_steps, cfg.batch_size, cfg.lr, warmup=cfg.warmup), cfg.seed, on_step)
    bar.close()
    _save(model, tokenizer, out / "teacher")
    n_params = sum(p.numel() for p in model.parameters())
    return {"config": asdict(cfg), "digest": cfg.digest(), "parameters": n_params, "sft_seconds": time.time() - t0}


def file_checksums(root: Path) -> dict[str, str]:
    """sha256 of every file under `root` but build.json, by relative path."""
    return {str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(root.rglob("*")) if f.is_file() and f.name != "build.json"}


_verified: set[tuple[str, float]] = set()  # entries checked in this process (path, build.json mtime)


# What every model directory of an entry holds; transformers' save_pretrained writes them on rank 0 only
MODEL_FILES = ("config.json", "model.safetensors")


def missing_model_files(path: Path) -> list[str]:
    return [f"{role}/{name}" for role in ("teacher", "student") for name in MODEL_FILES if not (path / role / name).exists()]


def verify_tiny_world(path: Path) -> str | None:
    """None if the entry's files match the checksums its build recorded, else what differs.
    An entry built before checksums existed gets them recorded now (trusted on first use)."""
    report_path = path / "build.json"
    key = (str(path), report_path.stat().st_mtime)
    if key in _verified:
        return None
    missing = missing_model_files(path)
    if missing:  # checksums of an entry built on another rank cover its tokenizers alone
        return f"{path} lacks {', '.join(missing)} (an entry built by a rank other than 0)"
    report = json.loads(report_path.read_text())
    actual = file_checksums(path)
    expected = report.get("files")
    if expected is None:
        report["files"] = actual
        atomic_write(report_path, json.dumps(report, indent=2))
        log.warning("replaylab: tiny world %s predates checksums; recorded them now", path)
    else:
        for name in sorted(set(expected) | set(actual)):
            if name not in actual:
                return f"{path / name} is missing"
            if expected.get(name) != actual[name]:
                return f"{path / name} does not match the checksum recorded when it was built (modified or corrupt)"
    _verified.add((str(path), report_path.stat().st_mtime))
    return None


def builds_here() -> bool:
    """Whether this process may build: not a rank other than 0 of a torch.distributed job, where transformers'
    save_pretrained writes no model (its build was an entry of tokenizers alone, and every later load failed)."""
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def ensure_tiny_world(cfg: TinyWorldConfig | None = None, progress: bool = True, poll_s: float = 2.0) -> Path:
    """The cache directory of `cfg`'s tiny world, building it first if needed.

    Concurrent callers (a parallel sweep) serialise on a file lock; the build goes to a temporary
    directory renamed into place, so a killed build never leaves a half-written cache entry. An
    entry whose files no longer match their build-time checksums is set aside and rebuilt, saying
    which file; an entry without build.json (left by an older, interrupted build) is removed first.
    Under torchrun only rank 0 builds; the other ranks wait for its entry (every `poll_s` seconds).
    """
    cfg = cfg or TinyWorldConfig()
    final = tiny_world_dir(cfg)
    if (final / "build.json").exists() and verify_tiny_world(final) is None:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    if not builds_here():
        log.info("replaylab: waiting for rank 0 to build or check the tiny world in %s", final)
    while not builds_here():
        with open(final.parent / f".{final.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (final / "build.json").exists() and verify_tiny_world(final) is None:
                return final
        time.sleep(poll_s)
    with open(final.parent / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "build.json").exists():
            problem = verify_tiny_world(final)
            if problem is None:
                return final
            aside = final.parent / f".{final.name}.corrupt-{int(time.time())}"
            log.warning("replaylab: tiny world cache entry %s: %s; moved to %s and rebuilding", final, problem, aside)
            os.replace(final, aside)
        elif final.exists():
            log.warning("replaylab: tiny world cache entry %s is incomplete (no build.json); rebuilding", final)
            shutil.rmtree(final)
        tmp = final.parent / f".{final.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        report = build_tiny_world(cfg, tmp, progress=progress)
        missing = missing_model_files(tmp)
        if missing:  # never an entry without its models
            raise RuntimeError(f"the tiny world build in {tmp} wrote no {', '.join(missing)}")
        report["files"] = file_checksums(tmp)
        atomic_write(tmp / "build.json", json.dumps(report, indent=2))
        os.replace(tmp, final)
    return final


TINY_MODELS = ("tiny://student", "tiny://teacher")  # the models a tiny world builds


def resolve_tiny(name_or_path: str, cfg: TinyWorldConfig | None = None, progress: bool = True) -> str:
    """`tiny://teacher` or `tiny://student` -> the local directory of that model."""
    role = name_or_path.removeprefix("tiny://")
    if name_or_path not in TINY_MODELS:
        raise ValueError(f"unknown tiny model {name_or_path!r}; allowed: tiny://teacher, tiny://student")
    return str(ensure_tiny_world(cfg, progress=progress) / role)
