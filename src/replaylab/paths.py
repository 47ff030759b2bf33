"""Where the config tree lives: inside the package (`replaylab/conf`, shipped in the wheel), so an
installed replaylab composes its configs from any directory. The repository's top-level `conf/` and
`experiments/` are links into it."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_CONF = Path(__file__).resolve().parent / "conf"


def conf_dir() -> str:
    """`$REPLAYLAB_CONF` (another tree, e.g. a worktree's for an A/B benchmark), else the package's."""
    path = Path(os.environ.get("REPLAYLAB_CONF", PACKAGE_CONF))
    if not (path / "config.yaml").exists():
        raise FileNotFoundError(
            f"replaylab's config tree was not found at {path}: reinstall the package (its conf/ ships inside it) "
            "or point REPLAYLAB_CONF at a conf/ directory"
        )
    return str(path)
