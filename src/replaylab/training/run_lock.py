"""One process per run directory: an exclusive lock held for the run's whole life.

Two processes on one directory (a SLURM requeue while the old job still runs, a sweep launched
twice) would both append rows. The lock is `filelock`'s `FileLock` on `<run>/lock` (an `fcntl`
lock on Linux): the kernel releases it when its holder dies, however it dies, so a lock left by a
killed process is taken over by the next run without any staleness heuristics. Who holds it
(pid, host, start time) is written next to it, for the refusal message.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from filelock import FileLock, Timeout


class RunDirectoryBusy(RuntimeError):
    pass


class RunLock:
    def __init__(self, run_dir: Path, wait_seconds: float = 0.0):
        self.run_dir = run_dir
        self.wait_seconds = wait_seconds  # 0: refuse at once; > 0: wait that long for the holder
        self._lock = FileLock(str(run_dir / "lock"))
        self._holder = run_dir / "lock.holder.json"

    def holder(self) -> str:
        try:
            h = json.loads(self._holder.read_text())
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(h["since"]))
            return f"pid {h['pid']} on {h['host']} (since {since})"
        except (OSError, ValueError, KeyError):
            return "another process (holder unknown)"

    def __enter__(self) -> RunLock:
        try:
            self._lock.acquire(timeout=max(0, self.wait_seconds))
        except Timeout:
            waited = f" after waiting {self.wait_seconds:g} s" if self.wait_seconds > 0 else ""
            raise RunDirectoryBusy(
                f"run directory {self.run_dir} is in use by {self.holder()}{waited}; a second process would "
                "interleave its rows. Stop that process, or wait for it with run_lock_wait=SECONDS."
            ) from None
        self._holder.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}))
        return self

    def __exit__(self, *exc) -> None:
        self._holder.unlink(missing_ok=True)
        self._lock.release()
