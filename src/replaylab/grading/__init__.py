"""Math answer grading: math-verify in killable worker processes, with a numeric fast path.

    from replaylab.grading import Grader
    with Grader(num_workers=2) as grader:
        results = grader.grade([(response, gold), ...])   # list[GradeResult], input order
        rewards = [float(r.correct) for r in results]
        grader.counters                                  # timeouts, unparseable golds, ...

Importing this package does not import math-verify or sympy; only the worker processes do.
"""

from replaylab.grading.extract import extract_answer, normalize_answer
from replaylab.grading.grader import Grader, default_grader
from replaylab.grading.result import (
    ERROR,
    NO_ANSWER,
    OK,
    STATUSES,
    TIMEOUT,
    UNPARSEABLE_GOLD,
    GradeResult,
)

__all__ = [
    "ERROR",
    "NO_ANSWER",
    "OK",
    "STATUSES",
    "TIMEOUT",
    "UNPARSEABLE_GOLD",
    "GradeResult",
    "Grader",
    "default_grader",
    "extract_answer",
    "normalize_answer",
]
