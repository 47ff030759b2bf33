"""Decide plain-number answers in-process, without a math-verify worker.

Most GRPO rewards compare an integer to an integer (`\\boxed{475}` vs `475`). Sending those through
a worker costs an IPC round trip plus two sympy parses; comparing them here costs a regex match.
The fast path must never change a verdict, so it only answers where math-verify 0.9.0 provably
agrees (tests/test_grading_fastpath.py checks this on a few hundred pairs) and returns None
otherwise, sending the pair to the workers:

- integers (sign, leading zeros, `1,000`-style thousands groups): math-verify parses both to
  sympy Integers and compares them exactly, so exact comparison is the same verdict;
- decimals: math-verify rounds Floats to 6 places (`float_rounding=6`) at ~15 significant digits,
  so two different decimals can still be "equal". Equal values are decided True; values far
  enough apart that no rounding can merge them are decided False; the band in between is left
  to math-verify.
"""

from __future__ import annotations

import re
from decimal import Decimal

# Thousands groups only with a nonzero leading group: math-verify reads `0,500` differently.
_NUMBER = re.compile(r"([+\-\u2212]?)((?:[1-9]\d{0,2}(?:,\d{3})+)|\d+)(\.\d+)?")

# Differences below these bounds may be merged by math-verify's rounding (absolute 1e-6 at six
# decimals, relative ~1e-15 from sympy Float precision); both bounds carry a wide safety margin.
_ABS_MARGIN = Decimal("1e-5")
_REL_MARGIN = Decimal("1e-12")


def parse_plain_number(text: str) -> Decimal | None:
    """`text` as an exact Decimal if it is a plain number (see module doc), else None."""
    m = _NUMBER.fullmatch(text)
    if m is None:
        return None
    sign = "-" if m.group(1) in ("-", "\u2212") else ""
    return Decimal(sign + m.group(2).replace(",", "") + (m.group(3) or ""))


def fast_verdict(pred: str, gold: str) -> bool | None:
    """True/False when both normalised answers are plain numbers and the verdict is certain."""
    a = parse_plain_number(pred)
    if a is None:
        return None
    b = parse_plain_number(gold)
    if b is None:
        return None
    if a == b:
        return True
    if _written_as_integer(a) and _written_as_integer(b):
        return False
    diff = abs(a - b)
    if diff > _ABS_MARGIN and diff > _REL_MARGIN * max(abs(a), abs(b)):
        return False
    return None


def _written_as_integer(x: Decimal) -> bool:
    """Whether the Decimal was written without a fractional part (`5`, not `5.0`)."""
    return x.as_tuple().exponent == 0
