"""A pool of killable grading processes with a hard wall-clock deadline per item.

Why not multiprocessing.Pool / ProcessPoolExecutor: neither can kill one stuck worker. A timed-out
`future.result(timeout)` leaves the worker running, so one permanently hung sympy call silently
removes a slot (a pitfall verl users report). Here every worker has its own
socket; the parent multiplexes them with `multiprocessing.connection.wait`, tracks a deadline for
the item each worker is on, and SIGKILLs and replaces a worker that overruns. Items queued behind
the killed one go back to the queue; the overrunning item is reported as a timeout.

Workers are fresh interpreters running `replaylab.grading.worker.main`, talking over a
multiprocessing Connection on an inherited socketpair. Not fork: a trainer holds CUDA state and
threads that must not be forked, and only a fresh process can safely cap its own address space.
Not multiprocessing's spawn either: spawn re-imports the parent's `__main__` in every worker (a
trainer's whole torch stack, seconds per replacement; fatal for `python - < script`), and starts a
resource-tracker process. A worker here imports math-verify and nothing else.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

from replaylab.grading.result import ERROR, TIMEOUT

Task = tuple  # (mode, text, gold), or worker.HANG_TASK tasks in tests
Outcome = tuple  # (correct, status, message)

_MAX_START_FAILURES = 3  # consecutive workers dying before "ready": a broken install, not bad luck
_STOP_GRACE_S = 1.0  # how long close() lets workers exit on their own before killing them
_WORKER_CMD = "import sys; from replaylab.grading.worker import main; main(sys.argv[1:])"


@dataclass
class _Worker:
    process: subprocess.Popen
    conn: Connection  # the parent's end
    started_at: float
    ready: bool = False
    assigned: deque = field(default_factory=deque)  # task indices, in the order the worker runs them
    deadline: float = 0.0  # wall-clock limit for assigned[0]

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL (a no-op if already dead), reap, and close our end. Idempotent."""
        if self.alive():
            self.process.kill()
        self.process.wait()
        self.conn.close()


def _stop(workers: list[_Worker]) -> None:
    """Ask each worker to exit, then kill whatever is still alive. Safe to call twice."""
    for w in workers:
        try:
            w.conn.send(None)
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + _STOP_GRACE_S
    for w in workers:
        try:
            w.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        w.kill()
    workers.clear()


def _worker_env() -> dict[str, str]:
    """The parent's environment, with this replaylab's source root first on PYTHONPATH so the
    worker imports the same code even when the parent found it through a sys.path tweak."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


class WorkerPool:
    """Runs prepared tasks on `num_workers` worker processes; see the module doc."""

    def __init__(
        self,
        num_workers: int,
        item_timeout: float,
        worker_args: tuple,
        *,
        chunk_size: int = 8,
        start_timeout: float = 120.0,
    ):
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.num_workers = num_workers
        self.item_timeout = float(item_timeout)
        self.chunk_size = max(1, chunk_size)
        self.start_timeout = start_timeout
        self._worker_args = [str(a) for a in worker_args]
        self._workers: list[_Worker] = []
        self.kills = 0  # workers killed by the outer deadline
        self.deaths = 0  # workers that died on their own (crash, OOM killer)
        self._start_failures = 0
        # Kill the processes even if the owner forgets close(): at GC or interpreter exit.
        self._finalizer = weakref.finalize(self, _stop, self._workers)

    # --- lifecycle -------------------------------------------------------------------------------

    def _spawn(self) -> _Worker:
        parent_sock, child_sock = socket.socketpair()
        child_fd = child_sock.detach()
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CMD, str(child_fd), *self._worker_args],
                pass_fds=(child_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                env=_worker_env(),
            )
        except BaseException:
            parent_sock.close()
            raise
        finally:
            os.close(child_fd)  # the child has its copy; ours would mask EOF when it dies
        return _Worker(process, Connection(parent_sock.detach()), started_at=time.monotonic())

    def _replace(self, w: _Worker) -> None:
        w.kill()
        self._workers[self._workers.index(w)] = self._spawn()

    def pids(self) -> list[int]:
        """Process ids of the current workers (for tests and diagnostics)."""
        return [w.process.pid for w in self._workers]

    def close(self) -> None:
        self._finalizer()

    # --- running ---------------------------------------------------------------------------------

    def run(self, tasks: list[Task]) -> list[Outcome]:
        """Outcome of every task, in order. Never raises for a bad task; raises RuntimeError only
        when workers cannot start at all."""
        if not tasks:
            return []
        for w in list(self._workers):
            if w.assigned:  # a previous run was interrupted: its late results must not leak in
                w.assigned.clear()
                self._replace(w)
        while len(self._workers) < self.num_workers:
            self._workers.append(self._spawn())
        results: list[Outcome | None] = [None] * len(tasks)
        pending = deque(range(len(tasks)))
        remaining = len(tasks)
        while remaining:
            self._assign(tasks, pending)
            # A dead worker's socket reads as EOF, so the connections alone cover deaths too.
            wait([w.conn for w in self._workers], timeout=self._next_wakeup())
            remaining -= self._collect(results, pending)
            remaining -= self._enforce_deadlines(results, pending)
        return results  # type: ignore[return-value]

    def _assign(self, tasks: list[Task], pending: deque) -> None:
        # Smaller chunks as the queue drains, so no worker sits idle while another holds a backlog.
        per_worker = max(1, len(pending) // (2 * self.num_workers))
        for w in self._workers:
            if not pending:
                return
            if w.ready and not w.assigned:
                n = min(self.chunk_size, per_worker, len(pending))
                chunk = [pending.popleft() for _ in range(n)]
                try:
                    w.conn.send([(i, tasks[i]) for i in chunk])
                except OSError:
                    # Died while idle: requeue; _collect sees the dead process and replaces it.
                    pending.extendleft(reversed(chunk))
                    w.process.kill()
                    w.process.wait()
                    continue
                w.assigned.extend(chunk)
                w.deadline = time.monotonic() + self.item_timeout

    def _next_wakeup(self) -> float:
        now = time.monotonic()
        limits = [w.deadline for w in self._workers if w.assigned]
        limits += [w.started_at + self.start_timeout for w in self._workers if not w.ready]
        return max(0.0, min(limits) - now) if limits else 1.0

    def _collect(self, results: list, pending: deque) -> int:
        """Read every finished result; handle workers that died. Returns items completed."""
        done = 0
        for w in list(self._workers):
            try:
                while w.conn.poll():
                    msg = w.conn.recv()
                    if msg[0] == "ready":
                        w.ready = True
                        self._start_failures = 0
                        continue
                    index, outcome = msg
                    if w.assigned and w.assigned[0] == index:
                        w.assigned.popleft()
                        w.deadline = time.monotonic() + self.item_timeout
                        results[index] = outcome
                        done += 1
            except (EOFError, OSError):
                pass  # the pipe closed: the worker is dead, handled just below
            if not w.alive():
                done += self._on_death(w, results, pending)
        return done

    def _on_death(self, w: _Worker, results: list, pending: deque) -> int:
        code = w.process.returncode
        if not w.ready:
            self._start_failures += 1
            if self._start_failures >= _MAX_START_FAILURES:
                raise RuntimeError(
                    f"grading workers keep dying before they start (exit code {code}); "
                    "see the traceback on stderr (is math-verify importable?)"
                )
        done = 0
        self.deaths += 1
        if w.assigned:
            index = w.assigned.popleft()
            results[index] = (False, ERROR, f"grading worker died (exit code {code})")
            done = 1
            pending.extendleft(reversed(w.assigned))
            w.assigned.clear()
        self._replace(w)
        return done

    def _enforce_deadlines(self, results: list, pending: deque) -> int:
        done = 0
        now = time.monotonic()
        for w in list(self._workers):
            if w.assigned and now > w.deadline:
                index = w.assigned.popleft()
                results[index] = (False, TIMEOUT, f"killed after {self.item_timeout:g}s wall clock")
                done += 1
                pending.extendleft(reversed(w.assigned))
                w.assigned.clear()
                self.kills += 1
                self._replace(w)
            elif not w.ready and now > w.started_at + self.start_timeout:
                raise RuntimeError(f"grading worker not ready after {self.start_timeout:g}s")
        return done
