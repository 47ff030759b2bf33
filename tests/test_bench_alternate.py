"""benchmarks/alternate.py, the A/B harness every speed number in docs/speed.md comes from: each side in its own
fresh process, A B A B, the ratio pair by pair and its median, and the target check, through a real bench script
(two sides that sleep for known times per step). The check must say "NOT met" where the ratio misses the target."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
# loaded from its file, not through sys.path: the benchmarks' other modules stay out of the test session
_spec = importlib.util.spec_from_file_location("bench_alternate", BENCHMARKS / "alternate.py")
alternate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(alternate)

# A bench script: side "slow" sleeps 40 ms per step, "quick" 8 ms (both make 10 tokens a step), except the
# second slow run, which sleeps four times as long (one slow moment: it must move one pair, not the median).
# Every child appends its side and process id to a log, so the test sees the order and the fresh processes.
SCRIPT = '''
import os, sys, time
sys.path.insert(0, {benchmarks!r})
import alternate

def side(pause):
    def run(args):
        with open({log!r}, "a") as f:
            f.write(f"{{args.side}} {{os.getpid()}}\\n")
        if args.side == "slow" and {fail!r}:
            raise SystemExit("the slow side broke")
        secs, wait = [], pause
        with open({log!r}) as f:
            if args.side == "slow" and sum(line.startswith("slow") for line in f) == 2:
                wait = 4 * pause
        for _ in range(args.steps):
            t = time.perf_counter()
            time.sleep(wait)
            secs.append(time.perf_counter() - t)
        return alternate.measured(secs, [10] * args.steps, 1)
    return run

SIDES = {{"slow": side(0.040), "quick": side(0.008)}}
p = alternate.parser("test bench", SIDES)
p.add_argument("--steps", type=int, default=4)
p.add_argument("--bound", type=float, default=2.5)
args = p.parse_args()
if args.side:
    alternate.run_side(args, SIDES)
else:
    out = alternate.parent(__file__, args, "slow", "quick", "sleeps", target=("ratio_token", ">=", args.bound))
    alternate.save(args.out, [out])
'''


def _bench(tmp_path: Path, *argv: str, fail: bool = False) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = tmp_path / "children.log"
    script = tmp_path / "bench_sleep.py"
    script.write_text(SCRIPT.format(benchmarks=str(BENCHMARKS), log=str(log), fail=fail))
    proc = subprocess.run([sys.executable, str(script), "--threads", "1", *argv], capture_output=True, text=True,
                          timeout=300, check=False)
    return proc, log.read_text().splitlines() if log.exists() else []


def test_pairs_alternate_in_fresh_processes_and_the_median_ratio_decides_the_target(tmp_path):
    out = tmp_path / "result.json"
    proc, children = _bench(tmp_path, "--pairs", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [c.split()[0] for c in children] == ["slow", "quick"] * 3  # A B A B A B
    assert len({c.split()[1] for c in children}) == 6  # each run in its own process
    (result,) = json.loads(out.read_text())
    ratios = [r["ratio_token"] for r in result["pairs"]]
    assert len(ratios) == 3 and all(r["slow"]["steps"] == 3 for r in result["pairs"])  # 4 steps, 1 warm-up dropped
    assert result["medians"]["ratio_token"] == pytest.approx(sorted(ratios)[1])
    median = result["medians"]["ratio_token"]
    assert max(ratios) > 2 * median  # the pair with the slow moment stands out
    assert 3.0 < median < 6.0  # 40 ms against 8 ms of sleep (the mean of the three would be about 10)
    assert result["target"]["met"] and "target: median ratio per token slow/quick >= 2.5: met" in proc.stdout
    assert all(len(r[side]["probe_ms"]) == 2 and len(r[side]["load"]) == 2 for r in result["pairs"] for side in ("slow", "quick"))


def test_a_missed_target_says_not_met(tmp_path):
    proc, _ = _bench(tmp_path, "--pairs", "1", "--bound", "10")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ">= 10.0: NOT met" in proc.stdout


def test_a_failing_side_names_itself(tmp_path):
    proc, _ = _bench(tmp_path, "--pairs", "1", fail=True)
    assert proc.returncode != 0
    assert "side 'slow' failed" in proc.stderr and "the slow side broke" in proc.stderr


def test_children_get_the_parents_arguments_less_the_parent_only_ones():
    argv = ["--pairs", "5", "--steps", "3", "--out=x.json", "--verbose", "--recipe", "opd"]
    assert alternate.child_argv(argv) == ["--steps", "3", "--recipe", "opd"]
