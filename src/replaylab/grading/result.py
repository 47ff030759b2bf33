"""The verdict for one (response, gold) pair."""

from __future__ import annotations

from dataclasses import dataclass

# Every status a GradeResult can carry. Only "ok" is a trustworthy verdict either way; the others
# say why `correct` is False without the answer having been judged wrong:
OK = "ok"  # graded; `correct` is the verdict
NO_ANSWER = "no_answer"  # the response holds nothing to grade (no box and no anchored answer, or an empty box)
UNPARSEABLE_GOLD = "unparseable_gold"  # the gold itself cannot be parsed: exclude the item, do not score it 0
TIMEOUT = "timeout"  # math-verify's own timeout fired, or the worker was killed by the outer wall-clock guard
ERROR = "error"  # anything unexpected (a worker crash, bad input types); `message` says what

STATUSES = (OK, NO_ANSWER, UNPARSEABLE_GOLD, TIMEOUT, ERROR)

# Results that depend only on the inputs, and may therefore be cached. Timeouts and errors can be
# transient (machine load, a killed worker), so they are retried on the next call.
CACHEABLE = frozenset({OK, NO_ANSWER, UNPARSEABLE_GOLD})


@dataclass(frozen=True)
class GradeResult:
    """Whether a response's final answer matches the gold answer, and how sure we are."""

    correct: bool
    status: str
    message: str = ""  # human-readable reason for a non-"ok" status (empty otherwise)
    extracted: str | None = None  # the normalised boxed answer graded (None: no non-empty box)

# What a prepared item's text is (set by the grader, read by the verifier in the worker process).
MODE_BOXED = "boxed"  # text is the normalised content of the response's last box
MODE_TAIL = "tail"  # the response has no box: text is its tail, searched for an anchored answer
MODE_NONE = "none"  # nothing to grade (empty box, or no box with the tail fallback off)
