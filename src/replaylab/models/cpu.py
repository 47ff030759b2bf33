"""What CPU this process runs on, from /proc/cpuinfo: its vendor (which decides the default matmul
kernel, `models.kernels`) and its model name (part of every result row's versions, because CPU float
results are bitwise reproducible only on the same CPU model)."""

from __future__ import annotations

import platform
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=None)
def cpuinfo(field: str) -> str | None:
    """The first value of `field` in /proc/cpuinfo (e.g. `vendor_id`, `model name`); None where the
    file or the field is missing (not Linux, some virtual machines, non-x86 processors)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == field:
                return value.strip()
    except OSError:
        pass
    return None


def vendor() -> str:
    """`GenuineIntel`, `AuthenticAMD`, ... or `unknown`."""
    return cpuinfo("vendor_id") or "unknown"


def model_name() -> str:
    return cpuinfo("model name") or platform.processor() or platform.machine() or "unknown"
