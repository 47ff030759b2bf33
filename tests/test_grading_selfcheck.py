"""Gold self-check on the real benchmark data: the grader must accept the benchmarks' own answers.

- MATH-500: every official `solution` (whose last box holds the answer, often in another form
  than `answer`) graded against `answer`: at least 99% correct.
- AIME 2024/2025, AMC 2023, HMMT Feb 2025, BRUMO 2025: every answer, boxed inside a sentence,
  graded against itself: 100% correct.

The data is read-only and outside the repo: $REPLAYLAB_DATA_ROOT, default ../shared/data/math
next to the repository. Skipped when absent. Disagreements are printed (pytest -s) and listed in
the failure message.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from replaylab.grading import Grader

_DEFAULT_ROOT = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "math"
DATA_ROOT = Path(os.environ.get("REPLAYLAB_DATA_ROOT", _DEFAULT_ROOT))
COMPETITIONS = ["aime2024", "aime2025", "amc2023", "hmmt_feb_2025", "brumo2025"]

pytestmark = pytest.mark.skipif(
    not (DATA_ROOT / "math500.jsonl").is_file(), reason=f"no benchmark data at {DATA_ROOT}"
)


def _rows(name: str) -> list[dict]:
    with (DATA_ROOT / f"{name}.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def grader():
    with Grader(num_workers=2) as g:
        yield g


def _disagreements(rows: list[dict], results) -> list[str]:
    lines = [
        f"{row['id']}: gold={row['answer']!r} extracted={res.extracted!r} status={res.status} {res.message}"
        for row, res in zip(rows, results) if not res.correct
    ]
    for line in lines:
        print("disagreement:", line)
    return lines


def test_math500_solutions_match_their_answers(grader):
    rows = _rows("math500")
    results = grader.grade([(row["solution"], row["answer"]) for row in rows])
    bad = _disagreements(rows, results)
    accuracy = 1 - len(bad) / len(rows)
    print(f"MATH-500 solution vs answer: {accuracy:.2%} ({len(rows) - len(bad)}/{len(rows)})")
    assert accuracy >= 0.99, "\n".join(bad)


@pytest.mark.parametrize("name", COMPETITIONS)
def test_competition_answers_match_themselves(grader, name):
    rows = _rows(name)
    results = grader.grade([(f"Therefore, the final answer is $\\boxed{{{row['answer']}}}$.", row["answer"])
                            for row in rows])
    bad = _disagreements(rows, results)
    print(f"{name}: {len(rows) - len(bad)}/{len(rows)}")
    assert not bad, "\n".join(bad)
