"""Tally graded rows: counts per status and accuracy, overall and per benchmark.

Accuracy excludes `unparseable_gold` and `error` rows from its denominator: neither says anything
about the model (an unparseable gold is skipped, not scored 0).
Timeouts and missing answers do count as wrong, as they do in training rewards.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from replaylab.grading.result import ERROR, STATUSES, UNPARSEABLE_GOLD

_UNSCORED = (UNPARSEABLE_GOLD, ERROR)


@dataclass
class Tally:
    rows: int = 0
    correct: int = 0
    statuses: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))

    def add(self, correct: bool, status: str) -> None:
        self.rows += 1
        self.correct += bool(correct)
        self.statuses[status] = self.statuses.get(status, 0) + 1

    @property
    def scored(self) -> int:
        return self.rows - sum(self.statuses.get(s, 0) for s in _UNSCORED)

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
        overall.add(row["correct"], row["status"])
        bench = row.get("benchmark")
        if isinstance(bench, str) and bench:
            per_benchmark.setdefault(bench, Tally()).add(row["correct"], row["status"])
    return overall, per_benchmark


def format_summary(overall: Tally, per_benchmark: dict[str, Tally]) -> str:
    """Human-readable multi-line summary."""

    def line(name: str, t: Tally) -> str:
        acc = f"{t.accuracy:.4f}" if t.accuracy is not None else "n/a"
        counts = " ".join(f"{s}={n}" for s, n in t.statuses.items() if n)
        return f"{name:<24} accuracy {acc} ({t.correct}/{t.scored} scored, {t.rows} rows)  {counts}"

    out = [line("all", overall)]
    out += [line(name, per_benchmark[name]) for name in sorted(per_benchmark)]
    out.append("accuracy = correct / scored; unparseable_gold and error rows are not scored")
    return "\n".join(out)
