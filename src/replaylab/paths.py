"""Where the repository's config tree lives (the package is installed editable from the repo)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def conf_dir() -> str:
    """`$REPLAYLAB_CONF`, else the repository's `conf/`."""
    path = Path(os.environ.get("REPLAYLAB_CONF", REPO_ROOT / "conf"))
    if not (path / "config.yaml").exists():
        raise FileNotFoundError(
            f"replaylab's config tree was not found at {path}; install the package editable from its repository "
            "(pip install -e .) or set REPLAYLAB_CONF to the conf/ directory"
        )
    return str(path)
