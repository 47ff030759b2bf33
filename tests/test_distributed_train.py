"""`torchrun --nproc_per_node=2 -m replaylab.train` with gloo on CPU: DDP and FSDP2 train the micro
world to the same weights as one process, R-OPD makes the same decisions, sharded checkpoints
resume and export to a directory `replaylab.evaluate` loads."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

from conftest import MICRO_WORLD, fast_run, load_rows
from test_resume import comparable, only_run

# rollout.micro_batch=4: an iteration's 8 prompts in two seeded chunks, one per rank (one chunk would leave a rank idle,
# which build_components refuses)
COMMON = MICRO_WORLD + fast_run(["eval=none"]) + ["budget.max_updates=4", "trainer.checkpoint_every=2", "eval=none",
                                                  "rollout.micro_batch=4"]
# GRPO whose ranks report different metric names: at a 12-token budget most rows are cut and trainer.mask_truncated
# leaves some slices without a row (their metrics: counts only); the ranks' collectives used to mismatch (a hang)
GRPO_MASKED = ["trainer=grpo", "trainer.samples_per_prompt=4", "trainer.prompts_per_iteration=6", "trainer.minibatches=2",
               "trainer.warmup_updates=0", "trainer.mask_truncated=true", "budget.max_response_tokens=12"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env():
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def torchrun(root, extra, wait=True, code=0):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
           "-m", "replaylab.train", *COMMON, f"output_root={root}", *extra]
    if not wait:
        return subprocess.Popen(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=600)
    assert (out.returncode == 0) == (code == 0), out.stderr[-3000:]
    return out


def single(root, extra):
    out = subprocess.run([sys.executable, "-m", "replaylab.train", *COMMON, f"output_root={root}", *extra],
                         env=env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]


def final_weights(run) -> dict[str, torch.Tensor]:
    from replaylab.training.runs import latest_checkpoint, load_checkpoint

    target = latest_checkpoint(run)
    if target.is_file():
        return load_checkpoint(target)["policy"]
    from replaylab.parallel import load_sharded
    from replaylab.models.loading import load_causal_lm

    model = load_causal_lm(str(run / "export"), "float32")
    load_sharded(model, None, target)
    return model.state_dict()


@pytest.mark.parametrize("mode, objective", [("ddp", ["trainer=opd_sampled"]), ("fsdp2", []), ("ddp", GRPO_MASKED)])
def test_two_ranks_match_one_process(tmp_path, mode, objective):
    single(tmp_path / "one", objective)
    torchrun(tmp_path / "two", [f"trainer.distributed={mode}", *objective])
    one, two = only_run(tmp_path / "one"), only_run(tmp_path / "two")
    subprocess.run([sys.executable, "-m", "replaylab.cli", "export", str(two), str(two / "export")], check=True,
                   capture_output=True, env=env())
    a, b = final_weights(one), final_weights(two)
    assert a.keys() <= b.keys() | {"lm_head.weight"}
    diff = max(float((a[k] - b[k]).abs().max()) for k in a if k in b)
    assert diff < 1e-4, diff
    loss_one = [r["value"] for r in load_rows(one) if r["metric"] == "reverse_kl"]
    loss_two = [r["value"] for r in load_rows(two) if r["metric"] == "reverse_kl"]
    assert loss_one == pytest.approx(loss_two, rel=1e-4, abs=1e-6)
    # every train metric combines over ranks by its kind (training.update_metrics): counts summed, extremes
    # over ranks, token means by tokens, so the rows do not depend on the world size either
    train_one, train_two = ({(r["update"], r["metric"]): r["value"] for r in load_rows(run) if r["split"] == "train"}
                            for run in (one, two))
    assert {"num_tokens", "num_seqs"} | ({"ratio_max", "ratio_min"} if objective[:1] == ["trainer=opd_sampled"] else set()) \
        <= {m for _, m in train_one}
    differing = [(key, value, train_two.get(key)) for key, value in train_one.items() if "per_s" not in key[1]
                 and train_two.get(key) != pytest.approx(value, rel=1e-4, abs=1e-6)]
    assert not differing, differing[:8]


def test_ropd_decisions_do_not_depend_on_world_size(tmp_path):
    extra = ["strategy=ropd", "trainer.warmup_updates=0", "strategy.burn_in=0", "strategy.window=1", "budget.max_updates=6"]
    single(tmp_path / "one", extra)
    torchrun(tmp_path / "two", extra + ["trainer.distributed=ddp"])

    def decisions(root):
        rows = load_rows(only_run(root))
        return [(r["iteration"], r["metric"], r["value"]) for r in rows
                if r["split"] == "strategy" and r["metric"] in ("hit", "switch_iteration", "phase_replay")]

    assert decisions(tmp_path / "one") == decisions(tmp_path / "two")
    norms_one = [r["value"] for r in load_rows(only_run(tmp_path / "one")) if r["metric"] == "grad_mean"]
    norms_two = [r["value"] for r in load_rows(only_run(tmp_path / "two")) if r["metric"] == "grad_mean"]
    assert norms_one == pytest.approx(norms_two, rel=1e-4)


# bf16: the policy's float32 masters (training/optimizer.py) go through torch.distributed.checkpoint as sharded
# optimizer state and come back in float32 (torch's load casts them to bf16: the resumed step then failed)
@pytest.mark.parametrize("precision", [[], ["model.dtype=bfloat16", "rollout.engine=hf", "trainer.lr=1e-6"]],
                         ids=["float32", "bf16-masters"])
def test_sharded_checkpoint_resumes_and_exports_for_evaluate(tmp_path, precision):
    extra = ["trainer.distributed=fsdp2", "budget.max_updates=6", *precision]
    torchrun(tmp_path / "full", extra)
    proc = torchrun(tmp_path / "killed", extra, wait=False)
    deadline = time.time() + 300
    while time.time() < deadline:
        latest = list((tmp_path / "killed").glob("default/*/checkpoints/latest"))
        if latest and latest[0].read_text().strip() >= "update_0000002":
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    subprocess.run(["pkill", "-9", "-f", str(tmp_path / "killed")], check=False)  # the orphaned ranks
    run = only_run(tmp_path / "killed")
    assert not (run / "done.json").exists()
    torchrun(tmp_path / "killed", extra)
    assert comparable(load_rows(run)) == comparable(load_rows(only_run(tmp_path / "full")))
    if precision:
        return
    out = tmp_path / "exported"
    subprocess.run([sys.executable, "-m", "replaylab.cli", "export", str(run), str(out)], check=True, env=env(),
                   capture_output=True)
    ev = subprocess.run([sys.executable, "-m", "replaylab.evaluate", f"model.name_or_path={out}", "eval.max_problems=2",
                         "eval.max_new_tokens=16", f"output_root={tmp_path / 'eval'}", "wandb.enabled=false"],
                        env=env(), capture_output=True, text=True, timeout=300)
    assert ev.returncode == 0, ev.stderr[-2000:]
    assert "tiny8/add2" in ev.stdout


def test_a_rank_left_without_rollouts_is_refused_naming_the_key(tmp_path):
    """rollout.micro_batch cuts an iteration into seeded chunks, shared out whole: one chunk for two ranks
    left one of them idle (it neither generated nor scored). The run stops naming the key and a value."""
    out = torchrun(tmp_path / "idle", ["rollout.micro_batch=64"], code=2)
    assert "rollout.micro_batch: 64 cuts an iteration's 8 prompts x 1 into 1 seeded chunk(s)" in out.stderr
    assert "set rollout.micro_batch <= 4" in out.stderr


def test_the_last_sharded_checkpoint_is_not_overwritten_in_place_and_a_torn_one_is_named(tmp_path):
    """A run's last update is saved twice (in the loop, then after its final evaluation): the second save
    rewrites extra.pt only, since dcp overwrites shards in place and a kill then tore the only copy. A torn
    shard is a corrupt checkpoint named with exit 4, not a traceback."""
    out = torchrun(tmp_path / "run", ["trainer.distributed=fsdp2", "trainer.keep_checkpoints=1"])
    assert "overwriting" not in out.stderr
    run = only_run(tmp_path / "run")
    (run / "done.json").unlink()
    shard = sorted((run / "checkpoints" / "update_0000004").glob("*.distcp"))[0]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    out = torchrun(tmp_path / "run", ["trainer.distributed=fsdp2", "trainer.keep_checkpoints=1"], code=4)
    assert "replaylab: no readable checkpoint in" in out.stderr and "(update_0000004)" in out.stderr
    assert "PytorchStreamReader" not in out.stderr  # dcp's read error is a corrupt checkpoint, not a traceback


SLOW_EVALUATION = """
import sys, time
from replaylab.training import trainer
seconds, sys.argv = float(sys.argv[1]), ["train", *sys.argv[2:]]
original = trainer.Trainer.evaluate_now
def slow(self):  # rank 0 evaluates alone; an evaluation longer than the other ranks' wait at the barrier
    if self.update > 0:
        time.sleep(seconds)
    return original(self)
trainer.Trainer.evaluate_now = slow
from replaylab.cli.train import main
main()
"""


def test_the_other_ranks_wait_for_rank_0s_evaluation_as_long_as_dist_timeout_s(tmp_path):
    """Rank 0 evaluates alone while the others wait at a barrier, under the process group's timeout: it was a
    fixed 30 minutes, which a math8 evaluation at a 16k budget can outlast, failing the job at its first
    evaluation every time it was requeued. trainer.dist_timeout_s sets it, and is not in the config hash."""
    script = tmp_path / "slow_eval.py"
    script.write_text(SLOW_EVALUATION)
    args = [*MICRO_WORLD, *fast_run([]), "budget.max_updates=4", "trainer.eval_every=2", "rollout.micro_batch=4",
            "trainer.distributed=ddp"]

    def run(timeout_s: int):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
               str(script), "12", *args, f"output_root={tmp_path / 'runs'}", f"trainer.dist_timeout_s={timeout_s}"]
        return subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=600)

    short = run(4)
    assert short.returncode != 0 and "Timed out waiting 4000ms" in short.stderr, short.stderr[-3000:]
    long = run(120)  # the same run directory: the hash leaves the timeout out, so it resumes
    assert long.returncode == 0, long.stderr[-3000:]
    run_dir = only_run(tmp_path / "runs")
    assert {r["update"] for r in load_rows(run_dir) if r["split"] == "eval"} == {0, 2, 4}
