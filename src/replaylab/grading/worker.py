"""The body of one grading worker process, started by pool.py as a fresh interpreter running
`worker.main([FD, PT, VT, MEM])` (via `python -c`, so the package is imported only once).

FD is an inherited socket (a multiprocessing Connection), PT and VT are math-verify's parse and
comparison timeouts in whole seconds, MEM the address-space cap in MB (0: none). pool.py starts it.

A worker owns one end of a duplex socket. It announces itself with ("ready", pid) once math-verify is
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
from multiprocessing.connection import Connection

from replaylab.grading.result import ERROR, OK

# A task is (mode, text, gold) with gold normalised (extract.normalize_answer) and mode one of:
# Test-only task kind: hang with SIGALRM blocked, like a C call math-verify's alarm cannot
# interrupt. Grader never produces it; tests send it straight to WorkerPool.run.
HANG_TASK = "__hang__"


def _limit_memory(limit_mb: int | None) -> None:
    """Cap the address space so a runaway power tower raises MemoryError instead of OOM-killing
    the machine (2^{2^{30}} alone peaks near 750 MB). Only sensible in a fresh interpreter: a
    forked trainer's inherited mappings (CUDA reserves a lot of address space) would count too."""
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
    """Serve grading batches on `conn`; returns on a None message or when the parent goes away."""
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


def main(argv: list[str]) -> None:
    """Command-line entry used by pool.py: FD PARSING_TIMEOUT VERIFY_TIMEOUT MEMORY_MB."""
    fd, pt, vt, mem = argv
    worker_main(Connection(int(fd)), int(pt), int(vt), int(mem) if mem not in ("None", "0") else None)
