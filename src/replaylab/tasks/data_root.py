"""Reading the math data files (benchmarks and training prompt sets) from a configurable data root.

The files are never copied into the repository: they live under a data root (`eval.data_root` in the
config, or `$REPLAYLAB_DATA_ROOT`, or `<repo>/../shared/data/math` when that exists), one JSON object
per line with at least `id`, `problem` and `answer` (see that directory's MANIFEST.md). Every row is
validated on load, and a bad one fails with the file, the line number and the offending key, because
a silently skipped or mis-keyed row changes every number computed from the set.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

DATA_ROOT_ENV = "REPLAYLAB_DATA_ROOT"
DATA_ROOT_CONFIG_KEY = "eval.data_root"
REQUIRED_KEYS = ("id", "problem", "answer")

# Training prompt sets in the same data root: name -> (file, expected rows per MANIFEST.md).
TRAIN_SETS: dict[str, tuple[str, int]] = {
    "math_train": ("math_train.jsonl", 7470),
    "gsm8k_train": ("gsm8k_train.jsonl", 7473),
    "aime_1983_2023": ("aime_1983_2023.jsonl", 975),
}



class DataError(ValueError):
    """A data file whose rows cannot be used; the message names the file and line. The CLIs exit 2."""


class MissingData(FileNotFoundError):
    """A data root or data file that does not exist; the message says which key sets it. The CLIs exit 2."""


_HOW_TO_SET = f"set the config key `{DATA_ROOT_CONFIG_KEY}` or the environment variable {DATA_ROOT_ENV}"


def default_data_root() -> Path | None:
    """`$REPLAYLAB_DATA_ROOT`, else `<repo>/../shared/data/math` if it exists, else None."""
    env = os.environ.get(DATA_ROOT_ENV)
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[3]  # src/replaylab/tasks/data_root.py -> repository root
    shared = repo.parent / "shared" / "data" / "math"
    return shared if shared.is_dir() else None


def resolve_data_root(data_root: str | Path | None = None) -> Path:
    """The data root to read from: the explicit argument, else `default_data_root()`; it must exist."""
    if data_root is None or str(data_root) == "":
        root = default_data_root()
        if root is None:
            raise MissingData(
                "no math data root configured: "
                f"{_HOW_TO_SET} to the directory holding the benchmark .jsonl files "
                "(the default `<repo>/../shared/data/math` does not exist)"
            )
        origin = f"${DATA_ROOT_ENV}" if os.environ.get(DATA_ROOT_ENV) else "the default"
    else:
        root, origin = Path(data_root), f"the data_root argument / `{DATA_ROOT_CONFIG_KEY}`"
    root = root.expanduser()
    if not root.is_dir():
        raise MissingData(
            f"math data root {root} (from {origin}) is not a directory; {_HOW_TO_SET} to the directory "
            "holding the benchmark .jsonl files"
        )
    return root


def read_rows(path: Path, expected_rows: int | None = None) -> list[dict]:
    """All rows of a jsonl data file, validated: each is a JSON object whose `id`, `problem` and
    `answer` are non-empty strings, and ids are unique. Blank lines are ignored. `expected_rows`
    (from the data manifest) catches a different revision of the set, e.g. AMC's 83-row variant."""
    if not path.is_file():
        raise MissingData(
            f"data file {path} not found; {_HOW_TO_SET} to the directory that holds {path.name}"
        )
    rows: list[dict] = []
    first_line: dict[str, int] = {}
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{where}: not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(row, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
            for key in REQUIRED_KEYS:
                if key not in row:
                    raise DataError(f"{where}: missing key {key!r} (every row needs {list(REQUIRED_KEYS)})")
                if not isinstance(row[key], str) or not row[key].strip():
                    raise DataError(f"{where}: key {key!r} must be a non-empty string, got {row[key]!r}")
            if row["id"] in first_line:
                raise DataError(f"{where}: key 'id' value {row['id']!r} repeats line {first_line[row['id']]}")
            first_line[row["id"]] = lineno
            rows.append(row)
    if expected_rows is not None and len(rows) != expected_rows:
        raise DataError(
            f"{path}: {len(rows)} rows, expected {expected_rows} (a different revision of this set? "
            "see MANIFEST.md in the data root)"
        )
    return rows


def load_train_rows(name: str, data_root: str | Path | None = None) -> list[dict[str, str]]:
    """A training prompt set (`math_train`, `gsm8k_train`, `aime_1983_2023`) as rows with exactly
    the keys `id`, `problem`, `answer`, validated like the benchmarks."""
    if name not in TRAIN_SETS:
        raise KeyError(f"unknown training prompt set {name!r}; allowed: {sorted(TRAIN_SETS)}")
    file, expected = TRAIN_SETS[name]
    rows = read_rows(resolve_data_root(data_root) / file, expected)
    return [{"id": r["id"], "problem": r["problem"], "answer": r["answer"]} for r in rows]
