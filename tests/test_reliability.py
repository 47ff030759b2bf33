"""Nothing lost, nothing run that should not be: each defect a cluster inflicts, through the real path.

Two processes on one run directory (a real second process is refused; a killed holder's lock is
taken over); resume that verifies rows.jsonl against the checkpoint's copy (short file refused with
its line, rebuilt on request; a real SIGKILL right after the rows rewrite loses nothing); a corrupt
or missing latest checkpoint falls back to the newest valid one; a crafted pickle never runs; a
pointer outside the run directory is refused; exact update budgets; divergence caught at the
update that causes it; checked tiny-world cache entries; config errors before any directory exists;
`grade` never overwrites its input; data and disk errors name their file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import MICRO_WORLD, load_rows, one_gold_changed
from test_resume import comparable, only_run, train_cmd

from replaylab.training.trainer import TrainingDiverged


def _wait_for(predicate, seconds: float = 300):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


# ---------------------------------------------------------------- one process per run directory
def test_second_process_on_a_run_directory_is_refused(tmp_path):
    root = tmp_path / "runs"
    cmd = train_cmd(root, ["budget.max_updates=30", "trainer.checkpoint_every=10"])
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: list(root.glob("default/*/lock.holder.json")))
    first.send_signal(signal.SIGSTOP)  # the holder is alive but cannot finish meanwhile (on a loaded machine it did)
    t0 = time.time()
    try:
        second = subprocess.run(cmd, capture_output=True, text=True, check=False)
    finally:
        first.send_signal(signal.SIGCONT)
    refused_in = time.time() - t0
    assert first.wait(timeout=600) == 0, first.stderr.read()[-2000:]
    run = only_run(root)
    assert second.returncode == 3
    assert str(run) in second.stderr and f"pid {first.pid}" in second.stderr
    assert refused_in < 30
    rows = load_rows(run)
    train_updates = [r["update"] for r in rows if r["split"] == "train" and r["metric"] == "grad_norm"]
    assert train_updates == list(range(1, 31))  # exactly one run's rows, in order, none twice
    assert not (run / "lock.holder.json").exists()


def test_a_killed_holders_lock_is_taken_over(tmp_path):
    root = tmp_path / "runs"
    cmd = train_cmd(root, [])
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: list(root.glob("default/*/checkpoints/latest")))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list(root.glob("default/*/lock.holder.json"))  # the dead holder left its note behind
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (only_run(root) / "done.json").exists()


def test_waiting_for_the_holder_then_skipping_the_finished_run(tmp_path):
    root = tmp_path / "runs"
    cmd = train_cmd(root, ["budget.max_updates=12"])
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: list(root.glob("default/*/lock.holder.json")))
    second = subprocess.run(cmd + ["run_lock_wait=600"], capture_output=True, text=True, check=False)
    assert first.wait(timeout=600) == 0
    assert second.returncode == 0 and "already done" in second.stdout


# ---------------------------------------------------------------- resume verifies before it trusts
def _interrupted_run(run_train, extra=()):
    """A finished 6-update run turned back into one interrupted after update 4 (checkpoints at 2 and 4)."""
    overrides = ["budget.max_updates=6", "trainer.checkpoint_every=2", "trainer.keep_checkpoints=3", *extra]
    _, path = run_train(overrides)
    full = load_rows(path)
    (path / "done.json").unlink()
    (path / "checkpoints" / "update_0000006.pt").unlink()
    (path / "checkpoints" / "latest").write_text("update_0000004.pt")
    return overrides, path, full


def test_short_rows_are_refused_with_their_line_then_rebuilt_on_request(run_train):
    from replaylab.results.rows import RowsMismatch

    overrides, path, full = _interrupted_run(run_train)
    lines = (path / "rows.jsonl").read_text().splitlines(keepends=True)
    (path / "rows.jsonl").write_text("".join(lines[:5]) + lines[5][:40])  # far below the checkpoint's count
    with pytest.raises(RowsMismatch, match=r"rows.jsonl:6: the checkpoint wrote \d+ rows"):
        run_train(overrides)
    assert not (path / "done.json").exists()
    run_train(overrides + ["resume_rows=rebuild"])
    assert comparable(load_rows(path)) == comparable(full)


def test_rows_past_checkpoints_that_are_gone_are_refused_not_truncated(run_train):
    """A run whose checkpoints were deleted (the done marker removed too) must not start over: that would
    truncate rows no checkpoint can restore. A pointer to a checkpoint that is gone is refused, naming it; with
    the whole folder gone, rows past the first checkpoint's update are refused, naming rows.jsonl; the file is
    untouched. A run killed before its first checkpoint still starts over and writes the same rows."""
    from replaylab.results.rows import RowsMismatch
    from replaylab.storage import CorruptCheckpoint

    overrides, path, full = _interrupted_run(run_train)
    before = (path / "rows.jsonl").read_text()
    for ckpt in (path / "checkpoints").glob("update_*.pt"):
        ckpt.unlink()
    with pytest.raises(CorruptCheckpoint, match="names update_0000004.pt, which does not exist, and no other"):
        run_train(overrides)
    shutil.rmtree(path / "checkpoints")
    with pytest.raises(RowsMismatch, match=r"rows.jsonl:\d+: a row at update 2, at or past update 2 where this run "
                                           "writes its first checkpoint"):
        run_train(overrides)
    assert (path / "rows.jsonl").read_text() == before and not (path / "done.json").exists()
    # killed before its first checkpoint (rows of update 1 at most): starting over is right, and exact
    early = [line for line in before.splitlines(keepends=True) if json.loads(line)["update"] < 2]
    (path / "rows.jsonl").write_text("".join(early))
    run_train(overrides)
    assert comparable(load_rows(path)) == comparable(full)


def _refused_then_resumed(run_train, monkeypatch, patch, match: str) -> None:
    """An interrupted run resumed with `patch(monkeypatch)` applied (other data than its checkpoint's) stops with
    StreamChanged matching `match`, naming the checkpoint, its rows untouched; without it, it resumes exactly."""
    from replaylab.tasks.stream import StreamChanged

    overrides, path, full = _interrupted_run(run_train)
    before = (path / "rows.jsonl").read_text()
    with monkeypatch.context() as changed:
        patch(changed)
        with pytest.raises(StreamChanged, match=match):
            run_train(overrides)
    assert (path / "rows.jsonl").read_text() == before and not (path / "done.json").exists()
    run_train(overrides)  # the same data: the resume goes on, exact
    assert comparable(load_rows(path)) == comparable(full)


def test_a_resume_over_other_training_prompts_is_refused_naming_the_checkpoint(run_train, monkeypatch):
    """The stream position a checkpoint holds indexes one list of prompts in one order: a resume that builds
    another one (a data file or the data root changed, or the order code) must not continue over it. The
    checkpoint's stream fingerprint is compared; the run stops naming the checkpoint, its rows untouched."""
    from replaylab.training import build

    _refused_then_resumed(run_train, monkeypatch,
                          lambda m: m.setattr(build, "data_order", lambda n, index: list(reversed(range(n)))),
                          r"its checkpoint at update 4 was written over other training prompts")


def test_a_resume_over_other_benchmark_golds_is_refused_naming_the_checkpoint(run_train, monkeypatch):
    """A checkpoint's evaluations were graded on its benchmarks' golds: a resume after a gold changed would go on
    with the same curve graded on others (updates 0-4 on the old golds, 6 on the new). The checkpoint records what
    the evaluation scores; the run stops naming the checkpoint, its rows untouched (bad-input audit, F5)."""
    from replaylab.evaluation import benchmarks

    _refused_then_resumed(run_train, monkeypatch,
                          lambda m: m.setattr(benchmarks, "get_benchmark", one_gold_changed(benchmarks.get_benchmark)),
                          r"its checkpoint at update 4 was evaluated on other benchmark problems or golds")


def test_a_garbled_done_marker_is_named_by_train_and_show(tmp_path):
    """A torn done.json: the train CLI (which skips finished runs) exits 4 naming the file, not with a traceback,
    and so does `replaylab show` (exit 2); a marker that is valid JSON but not an object too."""
    root, extra = tmp_path / "runs", ["budget.max_updates=2"]
    subprocess.run(train_cmd(root, extra), check=True, capture_output=True)
    run = only_run(root)
    for garbled in ('{"update": 2,', "[]"):
        (run / "done.json").write_text(garbled)
        r = subprocess.run(train_cmd(root, extra), capture_output=True, text=True, check=False)
        assert r.returncode == 4 and f"{run / 'done.json'}: not a JSON object" in r.stderr, r.stderr[-2000:]
        assert "Traceback" not in r.stderr
        s = subprocess.run([sys.executable, "-m", "replaylab.cli.main", "show", str(run)], capture_output=True,
                           text=True, check=False)
        assert s.returncode == 2 and f"{run / 'done.json'}: not a JSON object" in s.stderr, s.stderr[-2000:]


def test_sigkill_right_after_the_rows_rewrite_loses_nothing(tmp_path):
    root, reference = tmp_path / "killed", tmp_path / "full"
    extra = ["budget.max_updates=6", "trainer.keep_checkpoints=3"]
    subprocess.run(train_cmd(reference, extra), check=True, capture_output=True)
    subprocess.run(train_cmd(root, extra), check=True, capture_output=True)
    run = only_run(root)
    (run / "done.json").unlink()
    (run / "checkpoints" / "update_0000006.pt").unlink()
    (run / "checkpoints" / "latest").write_text("update_0000004.pt")
    # The resume rewrites rows.jsonl down to the checkpoint's rows, then this process SIGKILLs itself.
    script = ("import os, signal, sys\nfrom replaylab.results import rows\n"
              "orig = rows.RowWriter.truncate\n"
              "def truncate(self, n):\n    orig(self, n)\n    os.kill(os.getpid(), signal.SIGKILL)\n"
              "rows.RowWriter.truncate = truncate\nsys.argv = ['train', *sys.argv[1:]]\n"
              "from replaylab.cli.train import main\nmain()\n")
    killed = subprocess.run([sys.executable, "-c", script, *train_cmd(root, extra)[3:]], capture_output=True, check=False)
    assert killed.returncode == -signal.SIGKILL
    subprocess.run(train_cmd(root, extra), check=True, capture_output=True)
    assert comparable(load_rows(run)) == comparable(load_rows(only_run(reference)))
    # Through the CLI, rows cut below the checkpoint's count stop the run with exit 4, naming the line.
    (run / "done.json").unlink()
    (run / "checkpoints" / "latest").write_text("update_0000004.pt")
    lines = (run / "rows.jsonl").read_text().splitlines(keepends=True)
    (run / "rows.jsonl").write_text("".join(lines[:3]))
    refused = subprocess.run(train_cmd(root, extra), capture_output=True, text=True, check=False)
    assert refused.returncode == 4 and "rows.jsonl:4:" in refused.stderr and "Traceback" not in refused.stderr
    assert len((run / "rows.jsonl").read_text().splitlines()) == 3  # nothing already written is touched


def test_corrupt_or_missing_latest_falls_back_to_the_newest_valid_checkpoint(run_train, caplog):
    overrides, path, full = _interrupted_run(run_train)
    (path / "checkpoints" / "update_0000004.pt").write_bytes(b"PK\x03\x04 torn")
    caplog.clear()
    caplog.set_level("INFO", logger="replaylab")
    run_train(overrides)
    assert "training from the start" not in caplog.text  # the branch search logged it before every resume
    assert "update_0000004.pt: unreadable checkpoint" in caplog.text and "resuming from" in caplog.text
    assert comparable(load_rows(path)) == comparable(full)

    overrides, path, full = _interrupted_run(run_train, ["trainer.seed=1"])
    (path / "checkpoints" / "latest").write_text("update_0000009.pt")  # names a file that is not there
    run_train(overrides)
    assert "update_0000009.pt, which does not exist" in caplog.text
    assert comparable(load_rows(path)) == comparable(full)


def flip_a_bit_of_the_largest_record(path: Path) -> str:
    """Flip one bit in the middle of the checkpoint's largest tensor record (a weight or an optimizer moment),
    as a disk or a copy might, leaving the zip structure whole; returns the record's name."""
    import struct
    import zipfile

    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26: info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    data[start + info.file_size // 2] ^= 0x10
    path.write_bytes(bytes(data))
    return info.filename


def test_a_checkpoint_with_a_flipped_bit_is_passed_over_not_loaded(run_train, caplog):
    """torch.load never checks the CRC-32 its zip format stores for each record: a checkpoint with one bit
    flipped in a weight loaded silently, and the resumed run trained on from the damaged weight."""
    overrides, path, full = _interrupted_run(run_train)
    record = flip_a_bit_of_the_largest_record(path / "checkpoints" / "update_0000004.pt")
    caplog.clear()
    caplog.set_level("INFO", logger="replaylab")
    run_train(overrides)
    assert f"update_0000004.pt: unreadable checkpoint (record {record} fails its CRC-32 check" in caplog.text
    assert "resuming from" in caplog.text and "update_0000002.pt" in caplog.text
    assert comparable(load_rows(path)) == comparable(full)


def test_a_checkpoint_of_another_run_or_of_nothing_is_passed_over_for_this_runs_own(run_train, caplog):
    """Another run's checkpoint copied over this run's latest restored that run's weights and rows (the rows'
    mismatch then blamed this run's rows and advised a rebuild, which kept the foreign rows); a file without a
    trainer state's keys stopped the resume with a KeyError. Both are passed over, naming the file, for the
    newest checkpoint of this run, which resumes exactly (bad-input audit, F6 and F14)."""
    _, other = run_train(["budget.max_updates=4", "trainer.checkpoint_every=2", "strategy=initial"])
    overrides, path, full = _interrupted_run(run_train)
    shutil.copy(other / "checkpoints" / "update_0000004.pt", path / "checkpoints" / "update_0000004.pt")
    run_train(overrides)
    assert f"was written by run {other.name}, not by this run ({path.name})" in caplog.text
    assert comparable(load_rows(path)) == comparable(full)

    overrides, path, full = _interrupted_run(run_train, ["trainer.seed=1"])
    torch.save({"foo": 1}, path / "checkpoints" / "update_0000004.pt")
    run_train(overrides)
    assert "update_0000004.pt is not a trainer checkpoint (no iteration, ledger" in caplog.text
    assert comparable(load_rows(path)) == comparable(full)


def test_done_only_when_rows_verify(run_train, monkeypatch):
    from replaylab.results import rows as rows_module

    original = rows_module.RowWriter.write

    def write_twice(self, *a, **k):  # as if a second writer appended the same rows
        out = original(self, *a, **k)
        with open(self.path, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in out)
        return out

    monkeypatch.setattr(rows_module.RowWriter, "write", write_twice)
    with pytest.raises(rows_module.RowsMismatch, match="not marked done"):
        run_train(["budget.max_updates=2"])
    assert not list((Path(run_train.run_dir(["budget.max_updates=2"]))).glob("done.json"))


# ---------------------------------------------------------------- safe loading
@pytest.mark.parametrize("garbage", [b"", b"torn", b"PK\x03\x04 torn", b"\x80\x02}q\x00(X", b"\x00" * 64])
def test_torn_bytes_are_a_corrupt_checkpoint_naming_the_file(tmp_path, garbage):
    from replaylab.storage import CorruptCheckpoint, safe_torch_load

    target = tmp_path / "update_0000004.pt"
    target.write_bytes(garbage)
    with pytest.raises(CorruptCheckpoint, match="update_0000004.pt: unreadable checkpoint"):
        safe_torch_load(target)


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ['PWNED_MARKER']}",))


def test_a_crafted_checkpoint_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    os.environ["PWNED_MARKER"] = str(marker)
    crafted = tmp_path / "evil.pt"
    torch.save({"policy": _Payload()}, crafted)
    proc = subprocess.run([sys.executable, "-m", "replaylab.evaluate", f"eval.checkpoint={crafted}", *MICRO_WORLD,
                           "eval.max_problems=1", f"output_root={tmp_path / 'out'}", "wandb.enabled=false"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "refused" in proc.stderr and "posix.system" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not marker.exists()


def test_a_pointer_outside_the_run_directory_is_refused(run_train):
    from replaylab.training.runs import UnsafePointer

    overrides, path, _ = _interrupted_run(run_train)
    (path.parent / "update_0000009.pt").write_bytes(b"")
    (path / "checkpoints" / "latest").write_text("../../update_0000009.pt")
    with pytest.raises(UnsafePointer, match="refused"):
        run_train(overrides)


# ---------------------------------------------------------------- budgets and divergence
def test_an_update_budget_the_iterations_would_overshoot_is_a_config_error(run_train):
    from replaylab.config import ConfigError

    with pytest.raises(ConfigError, match=r"budget.max_updates.*6 is not a multiple of the 4 updates per iteration"):
        run_train(["trainer.minibatches=4", "budget.max_updates=6"])


@pytest.mark.parametrize("rollout", ["fast", "hf"])
def test_a_huge_learning_rate_is_caught_as_divergence_at_its_update(run_train, rollout):
    """lr=1e10 used to die inside generate ("probability tensor contains inf"); now it is
    TrainingDiverged naming the update, wherever the non-finite values first show."""
    overrides = ["trainer.lr=1e10", "trainer.warmup_updates=0", "budget.max_updates=6", "trainer.checkpoint_every=1",
                 f"rollout={rollout}"]
    with pytest.raises(TrainingDiverged, match=r"update \d+"):
        run_train(overrides)
    path = run_train.run_dir(overrides)
    from replaylab.training.runs import checkpoint_candidates, load_checkpoint

    found, _ = checkpoint_candidates(path)
    assert found and all(torch.isfinite(v).all() for v in load_checkpoint(found[0])["policy"].values())
    assert not (path / "done.json").exists()


# ---------------------------------------------------------------- the tiny-world cache
def test_tiny_world_cache_entries_are_checked_and_rebuilt(caplog):
    from replaylab.models.tiny_spec import TinyModelSize, TinyWorldConfig
    from replaylab.models.tiny_world import ensure_tiny_world, tiny_world_dir

    cfg = TinyWorldConfig(teacher_steps=6, student_step=3, seed=7, batch_size=8, warmup=2,
                          teacher=TinyModelSize(hidden_size=32, intermediate_size=64))
    path = ensure_tiny_world(cfg, progress=False)
    weights = path / "teacher" / "model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[:-8] + b"\0" * 8)  # overwritten weights
    assert ensure_tiny_world(cfg, progress=False) == path
    assert "teacher/model.safetensors does not match the checksum" in caplog.text
    assert weights.read_bytes() == good  # rebuilt: the build is deterministic
    (path / "build.json").unlink()  # an entry an older, interrupted build left behind
    assert ensure_tiny_world(cfg, progress=False) == tiny_world_dir(cfg)
    assert "incomplete" in caplog.text and (path / "build.json").exists()


def _build_on_rank(rank: int, port: int, cfg, out) -> None:
    """One rank of a 2-process gloo job asking for the tiny world; rank 1 asks first, as it may under torchrun."""
    import torch.distributed as dist

    from replaylab.models.tiny_world import ensure_tiny_world, missing_model_files

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    if rank == 0:
        time.sleep(3)
    path = ensure_tiny_world(cfg, progress=False, poll_s=0.2)
    (out / f"rank{rank}.json").write_text(json.dumps({"path": str(path), "missing": missing_model_files(path)}))
    dist.barrier()
    dist.destroy_process_group()


def test_under_torchrun_rank_0_builds_the_tiny_world_and_the_others_wait(tmp_path, monkeypatch, caplog):
    """transformers' save_pretrained writes nothing on a rank other than 0 of a torch.distributed job: when rank 1
    won the cache lock on a fresh machine, the entry held tokenizers only, its checksums matched, and every load
    failed ('Unrecognized model') until the cache was deleted by hand. Such an entry is now set aside and rebuilt."""
    import socket

    import torch.multiprocessing as mp

    from replaylab.models.tiny_spec import TinyModelSize, TinyWorldConfig
    from replaylab.models.tiny_world import ensure_tiny_world

    monkeypatch.setenv("REPLAYLAB_CACHE", str(tmp_path / "cache"))
    cfg = TinyWorldConfig(teacher_steps=6, student_step=3, seed=11, batch_size=8, warmup=2,
                          teacher=TinyModelSize(hidden_size=32, intermediate_size=64))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_build_on_rank, args=(port, cfg, tmp_path), nprocs=2)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert results[0] == results[1] and results[0]["missing"] == []
    path = Path(results[0]["path"])
    (path / "student" / "model.safetensors").unlink()  # an entry another rank built before this fix
    (path / "student" / "config.json").unlink()
    build = json.loads((path / "build.json").read_text())
    build["files"] = {k: v for k, v in build["files"].items() if k.startswith(("teacher/tokenizer", "student/tokenizer"))}
    (path / "build.json").write_text(json.dumps(build))
    assert ensure_tiny_world(cfg, progress=False) == path
    assert "lacks student/config.json, student/model.safetensors" in caplog.text
    assert (path / "student" / "model.safetensors").exists()


# ---------------------------------------------------------------- config errors, early and named
CONFIG_ERRORS = [
    (["eval.grader_timeout=0"], "eval.grader_timeout"),
    (["trainer.clip_low=-5"], "trainer.clip_low"),
    (["trainer=grpo", "teacher=none", "trainer.kl_coef=-1"], "trainer.kl_coef"),
    (["trainer.lr=inf"], "trainer.lr"),
    (["trainer=grpo", "teacher=none", "strategy=ropd"], "strategy"),
    (["teacher=none"], "teacher"),
    (["experiment=../../elsewhere"], "experiment"),
    (["trainer.minibatches=4", "budget.max_updates=6"], "budget.max_updates"),
]


@pytest.mark.parametrize(("overrides", "key"), CONFIG_ERRORS, ids=[c[1] + "-" + c[0][-1] for c in CONFIG_ERRORS])
def test_config_errors_name_the_key_before_anything_exists(run_train, tmp_path, overrides, key):
    from replaylab.config import ConfigError

    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        run_train(overrides)
    assert not (tmp_path / "runs").exists()


def test_config_error_exit_code_and_time_through_the_cli(tmp_path):
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "replaylab.train", "trainer.clip_low=-5", f"output_root={tmp_path}"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "trainer.clip_low" in proc.stderr
    assert time.time() - t0 < 30  # a Python start-up and a compose; the model never loads
    assert not (tmp_path / "default").exists()  # no run directory (Hydra's own log directory is under hydra/)


# ---------------------------------------------------------------- files: grade, data, disk
def test_grade_refuses_to_write_over_its_input(tmp_path):
    data = tmp_path / "f.jsonl"
    data.write_text(json.dumps({"response": "\\boxed{2}", "answer": "2"}) + "\n")
    before = data.read_bytes()
    proc = subprocess.run([sys.executable, "-m", "replaylab.cli.grade", str(data), "--out", str(data)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "is the input file" in proc.stderr
    assert data.read_bytes() == before


def test_a_non_utf8_training_row_names_its_file_and_line(tmp_path):
    from replaylab.tasks.data_root import read_rows

    bad = tmp_path / "train.jsonl"
    bad.write_bytes(b'{"id": "a", "problem": "1+1", "answer": "2"}\n{"id": "b", "problem": "\xff", "answer": "1"}\n')
    with pytest.raises(ValueError, match=r"train.jsonl:2: not UTF-8 \(byte 0xff"):
        read_rows(bad)


def test_a_full_disk_names_the_checkpoint_and_keeps_the_old_one(tmp_path, monkeypatch):
    from replaylab.storage import StorageError, atomic_torch_save

    target = tmp_path / "update_0000002.pt"
    atomic_torch_save({"x": torch.ones(2)}, target)

    def full(*a, **k):  # what torch raises when the zip writer hits ENOSPC
        raise RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 64 vs 0")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(StorageError, match=r"writing .*update_0000002.pt failed \(\d+ MiB free\)"):
        atomic_torch_save({"x": torch.zeros(2)}, target)
    monkeypatch.undo()
    assert torch.equal(torch.load(target, weights_only=True)["x"], torch.ones(2))
    assert not list(tmp_path.glob("*.tmp"))

