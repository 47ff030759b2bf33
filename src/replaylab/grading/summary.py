"""Tally graded rows: counts per status and accuracy, overall and per benchmark.

Accuracy excludes `unparseable_gold` rows and malformed input lines (rows flagged `malformed`: no
response to grade) from its denominator: neither says anything about the model (an unparseable gold
is skipped, not scored 0). Timeouts, missing answers and grading errors on a well-formed response (the
parser raised on the model's output, a worker died on it) count as wrong, as they do in the evaluator
(evaluation/summary.py) and in training rewards: a response that breaks the grader must not leave the
denominator (before 2026-12-07 it did, and the CLI's accuracy read higher than the evaluator's).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from replaylab.grading.result import STATUSES, UNPARSEABLE_GOLD


@dataclass
class Tally:
    rows: int = 0
    correct: int = 0
    unscored: int = 0  # unparseable golds and malformed input lines
    statuses: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))

    def add(self, correct: bool, status: str, malformed: bool = False) -> None:
        self.rows += 1
        self.correct += bool(correct)
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.unscored += bool(malformed) or status == UNPARSEABLE_GOLD

    @property
    def scored(self) -> int:
        return self.rows - self.unscored

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.scored if self.scored else None

    def as_dict(self) -> dict:
        return {"rows": self.rows, "correct": self.correct, "scored": self.scored,
                "accuracy": self.accuracy, "statuses": dict(self.statuses)}


def summarize(rows: Iterable[dict]) -> tuple[Tally, dict[str, Tally]]:
    """Overall tally and one per `benchmark` value (rows without one are only in the overall)."""
    overall, per_benchmark = Tally(), {}
    for row in rows:
        overall.add(row["correct"], row["status"], row.get("malformed", False))
        bench = row.get("benchmark")
        if isinstance(bench, str) and bench:
            per_benchmark.setdefault(bench, Tally()).add(row["correct"], row["status"], row.get("malformed", False))
    return overall, per_benchmark


def format_summary(overall: Tally, per_benchmark: dict[str, Tally]) -> str:
    """Human-readable multi-line summary."""

    def line(name: str, t: Tally) -> str:
        acc = f"{t.accuracy:.4f}" if t.accuracy is not None else "n/a"
        counts = " ".join(f"{s}={n}" for s, n in t.statuses.items() if n)
        return f"{name:<24} accuracy {acc} ({t.correct}/{t.scored} scored, {t.rows} rows)  {counts}"

    out = [line("all", overall)]
    out += [line(name, per_benchmark[name]) for name in sorted(per_benchmark)]
    out.append("accuracy = correct / scored; unparseable_gold rows and malformed lines are not scored; a grading "
               "error on a response counts as wrong, as in the evaluator")
    return "\n".join(out)
