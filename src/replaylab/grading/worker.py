"""The body of one grading worker process.

A worker owns one end of a duplex pipe. It announces itself with ("ready", pid) once math-verify is
imported (so start-up time is never charged to an item's timeout), then loops: receive a batch of
(index, task) pairs, grade them one by one, and send back (index, (correct, status, message)) as
each finishes. The parent measures every item against its own wall-clock deadline and SIGKILLs the
worker when one overruns; that is the only guard that works when sympy is stuck inside a C call
that signal.alarm cannot interrupt.
"""

from __future__ import annotations

import os
import signal
import time

from replaylab.grading.result import ERROR, OK

# Test-only task kind: hang with SIGALRM blocked, like a C call math-verify's alarm cannot
# interrupt. Grader never produces it; tests send it straight to WorkerPool.run.
HANG_TASK = "__hang__"


def _limit_memory(limit_mb: int | None) -> None:
    """Cap the address space so a runaway power tower raises MemoryError instead of OOM-killing
    the machine (2^{2^{30}} alone peaks near 750 MB). Only safe in a fresh (spawned) process."""
    if not limit_mb:
        return
    import resource

    limit = limit_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _hang(seconds: float) -> tuple[bool, str, str]:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        time.sleep(seconds)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
    return False, OK, "hang task finished without being killed"


def worker_main(conn, parsing_timeout: int, timeout_seconds: int, memory_limit_mb: int | None) -> None:
    """Entry point of a spawned worker; returns (exits) on a None message or a closed pipe."""
    # Ctrl-C reaches the whole process group; only the parent should react to it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _limit_memory(memory_limit_mb)
    from replaylab.grading.verifier import grade_prepared

    conn.send(("ready", os.getpid()))
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):
            return  # the parent went away
        if batch is None:
            return
        for index, task in batch:
            try:
                if task[0] == HANG_TASK:
                    result = _hang(float(task[1]))
                else:
                    result = grade_prepared(*task, parsing_timeout, timeout_seconds)
            except BaseException as e:  # noqa: BLE001 - MemoryError, RecursionError, math-verify's TimeoutException
                result = (False, ERROR, f"{type(e).__name__} while grading")
            try:
                conn.send((index, result))
            except (EOFError, OSError, BrokenPipeError):
                return
