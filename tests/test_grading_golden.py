"""Frozen regression cases for the math grader (tests/data/grading_golden.jsonl).

Each row is a full model response (`prediction`), a gold answer and the verdict a correct grader
SHOULD give (`expected`, plus `status` when it is not "ok"). Rows where math-verify 0.9.0 is wrong
and no reasonable fix exists carry `known_failure` and a `reason`; they run as strict xfails, so
they stay visible and a library upgrade that fixes one turns the suite red until the flag goes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replaylab.grading import STATUSES, Grader

GOLDEN = Path(__file__).parent / "data" / "grading_golden.jsonl"
ROWS = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines() if line.strip()]


def _param(row: dict):
    marks = [pytest.mark.xfail(strict=True, reason=row["reason"])] if row.get("known_failure") else []
    return pytest.param(row, id=row["id"], marks=marks)


@pytest.fixture(scope="module")
def verdicts() -> dict[str, object]:
    """Grade every golden row in one batch (one pool start for the whole file)."""
    with Grader(num_workers=2, parsing_timeout=2, timeout_seconds=2, cache_size=0) as grader:
        results = grader.grade([(r["prediction"], r["gold"]) for r in ROWS])
    return {r["id"]: res for r, res in zip(ROWS, results)}


def test_golden_file_is_well_formed():
    ids = [r["id"] for r in ROWS]
    assert len(ids) == len(set(ids)), "duplicate ids"
    for r in ROWS:
        assert isinstance(r["prediction"], str) and isinstance(r["gold"], str), r["id"]
        assert isinstance(r["expected"], bool), r["id"]
        assert r.get("status", "ok") in STATUSES, r["id"]
        assert not r.get("known_failure") or r.get("reason"), f"{r['id']}: known_failure needs a reason"
    categories = {r["category"] for r in ROWS}
    for needed in ("markdown", "subset", "units", "thousands", "tuple_interval", "fraction_decimal",
                   "dfrac", "text", "percent", "degrees", "sqrt", "negative", "boxes", "no_answer"):
        assert needed in categories, needed


@pytest.mark.parametrize("row", [_param(r) for r in ROWS])
def test_golden_case(row: dict, verdicts: dict):
    result = verdicts[row["id"]]
    got = (result.correct, result.status)
    want = (row["expected"], row.get("status", "ok"))
    assert got == want, (
        f"{row['id']}: prediction={row['prediction']!r} gold={row['gold']!r} "
        f"extracted={result.extracted!r} message={result.message!r}"
    )
