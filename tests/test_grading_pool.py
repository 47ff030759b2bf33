"""Grader and WorkerPool: laziness, ordering, caching, counters, killing, crashes, cleanup."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from replaylab.grading import ERROR, NO_ANSWER, OK, TIMEOUT, Grader, default_grader
from replaylab.grading.worker import HANG_TASK

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _alive(pid: int) -> bool:
    stat = _proc_stat(pid)
    return stat is not None and stat[0] != "Z"  # a zombie has exited


def _live_children() -> set[int]:
    me = str(os.getpid())
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _proc_stat(int(entry.name))
            if stat is not None and stat[1] == me and stat[0] != "Z":
                found.add(int(entry.name))
    return found


def _is_resource_tracker(pid: int) -> bool:
    try:
        return b"resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@pytest.fixture(scope="module")
def grader():
    with Grader(num_workers=2, parsing_timeout=1, timeout_seconds=1, item_timeout=5) as g:
        yield g


def test_creating_a_grader_starts_nothing():
    start = time.perf_counter()
    g = Grader()
    assert time.perf_counter() - start < 0.1
    assert g.worker_pids() == []
    g.close()


def test_integer_answers_never_reach_a_worker():
    with Grader() as g:
        results = g.grade([("\\boxed{475}", "475"), ("so \\boxed{12}", "13"), ("\\boxed{1,000}", "1000"),
                           ("\\boxed{-3.50}", "-3.5"), ("\\boxed{}", "7")])
        assert [(r.correct, r.status) for r in results] == [
            (True, OK), (False, OK), (True, OK), (True, OK), (False, NO_ANSWER)]
        assert g.worker_pids() == [], "plain numbers must be decided in-process"
        assert g.counters["fast_path"] == 5


def test_order_dedup_and_cache(grader):
    pairs = [
        ("\\boxed{\\frac{1}{2}}", "0.5"),
        ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}"),
        ("\\boxed{\\frac{1}{2}}", "0.5"),  # duplicate: graded once
        ("\\boxed{(1,2)}", "[1,2]"),
        ("\\boxed{}", "\\frac{1}{2}"),
        ("\\boxed{42}", "42"),
    ]
    before = grader.counters
    results = grader.grade(pairs)
    assert [(r.correct, r.status) for r in results] == [
        (True, OK), (True, OK), (True, OK), (False, OK), (False, NO_ANSWER), (True, OK)]
    after = grader.counters
    assert after["worker_items"] - before["worker_items"] == 4  # 6 pairs - 1 duplicate - 1 fast path
    again = grader.grade(pairs)
    assert again == results
    assert grader.counters["cache_hits"] - after["cache_hits"] == 5
    assert grader.counters["worker_items"] == after["worker_items"]


def test_grading_from_a_thread(grader):
    # math-verify's signal.alarm raises outside a main thread (Math-Verify #50); the Grader must not
    # care which thread calls it, since math-verify only runs in the workers.
    out = []
    t = threading.Thread(target=lambda: out.extend(grader.grade([("\\boxed{\\tfrac{3}{4}}", "0.75")])))
    t.start()
    t.join(60)
    assert [(r.correct, r.status) for r in out] == [(True, OK)]


def test_empty_batch(grader):
    assert grader.grade([]) == []


def test_bad_inputs_are_errors_not_exceptions(grader):
    results = grader.grade([(None, "5"), ("\\boxed{5}", 5), "not a pair", ("\\boxed{5}", "5")])
    assert [r.status for r in results] == [ERROR, ERROR, ERROR, OK]
    assert "must be str" in results[0].message


def test_timeouts_are_reported_counted_and_not_cached(grader):
    before = grader.counters
    tower = ("\\boxed{9^{9^{9^{9}}}}", "5")
    start = time.perf_counter()
    first = grader.grade([tower])[0]
    assert time.perf_counter() - start < grader.item_timeout + 1
    assert (first.correct, first.status) == (False, TIMEOUT)
    assert grader.counters["timeout"] == before["timeout"] + 1
    grader.grade([tower])
    assert grader.counters["cache_hits"] == before["cache_hits"], "a timeout must be retried, not cached"


@linux_only
def test_stuck_worker_is_killed_and_replaced():
    # A task that blocks SIGALRM and sleeps: math-verify's own timeout cannot end it, so only the
    # pool's wall-clock deadline can. One worker, so the normal task must wait for the kill.
    with Grader(num_workers=1, item_timeout=1.5) as g:
        pool = g._pool
        assert pool.run([("boxed", "1", "1")]) == [(True, OK, "")]
        (pid,) = g.worker_pids()
        start = time.perf_counter()
        outcomes = pool.run([(HANG_TASK, 60), ("boxed", "\\frac{1}{2}", "0.5"), ("boxed", "3", "4")])
        elapsed = time.perf_counter() - start
        assert outcomes[0][:2] == (False, TIMEOUT) and "killed" in outcomes[0][2]
        assert outcomes[1:] == [(True, OK, ""), (False, OK, "")]
        assert elapsed < 1.5 + 10, elapsed  # the kill, one respawn, two quick items
        assert not _alive(pid)
        assert g.worker_pids() != [pid]
        assert g.counters["worker_kills"] == 1
        assert g.grade_one("\\boxed{\\sqrt{4}}", "2").correct  # the pool keeps working


@linux_only
def test_crashed_worker_is_replaced():
    with Grader(num_workers=1, item_timeout=30) as g:
        g.grade_one("\\boxed{x}", "x")
        (pid,) = g.worker_pids()
        threading.Timer(0.5, os.kill, (pid, signal.SIGKILL)).start()
        outcomes = g._pool.run([(HANG_TASK, 20), ("boxed", "2", "2")])
        assert outcomes[0][:2] == (False, ERROR) and "died" in outcomes[0][2]
        assert outcomes[1] == (True, OK, "")
        assert g.counters["worker_deaths"] == 1


@linux_only
def test_close_leaves_no_child_processes():
    before = _live_children()
    g = Grader(num_workers=2)
    g.grade([("\\boxed{\\frac{1}{3}}", "1/3"), ("\\boxed{y}", "y")])
    pids = g.worker_pids()
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    g.close()
    g.close()  # idempotent
    assert not any(_alive(p) for p in pids)
    # multiprocessing's resource tracker is a per-interpreter singleton, not ours to stop.
    leftover = {pid for pid in _live_children() - before if not _is_resource_tracker(pid)}
    assert not leftover, leftover
    with pytest.raises(RuntimeError, match="closed"):
        g.grade([("\\boxed{1}", "1")])


def test_workers_that_cannot_start_raise_instead_of_respawning_forever(monkeypatch):
    from replaylab.grading import pool

    monkeypatch.setattr(pool, "_WORKER_CMD", "import sys; sys.exit(3)")
    with Grader(num_workers=1) as g:
        with pytest.raises(RuntimeError, match="keep dying before they start"):
            g.grade([("\\boxed{x}", "x")])


def test_invalid_settings_are_rejected():
    with pytest.raises(ValueError, match="whole number"):
        Grader(parsing_timeout=0.5)
    with pytest.raises(ValueError, match="item_timeout"):
        Grader(item_timeout=0)
    with pytest.raises(ValueError, match="num_workers"):
        Grader(num_workers=0)


def test_boxed_only_mode():
    with Grader(fallback_unboxed=False) as g:
        r = g.grade_one("The final answer is 5", "5")
        assert (r.correct, r.status) == (False, NO_ANSWER)
        assert g.worker_pids() == []


def test_default_grader_is_shared():
    g = default_grader()
    assert default_grader() is g
    assert g.grade_one("\\boxed{\\frac{6}{2}}", "3").correct
    g.close()  # leave no workers behind for other test modules
    assert default_grader() is not g  # a closed default is replaced, not returned
    default_grader().close()
