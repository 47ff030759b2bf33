"""The in-process numeric fast path must give math-verify's verdict wherever it answers at all.

math-verify runs in this (main) thread here, which its signal-based timeouts allow, through the
very function the workers call (verifier.grade_prepared), so "agreement" means agreement with
what the pool would have said.
"""

from __future__ import annotations

import random

import pytest

from replaylab.grading import normalize_answer
from replaylab.grading.fastpath import fast_verdict, parse_plain_number
from replaylab.grading.verifier import grade_prepared


def _thousands(n: int) -> str:
    return f"{n:,}"


def _numeric_pairs(rng: random.Random) -> list[tuple[str, str]]:
    """Pairs in the shapes models and datasets actually produce, equal and unequal."""
    pairs: list[tuple[str, str]] = []
    for _ in range(60):  # integers: equal, off by one, sign flipped
        n = rng.choice([rng.randrange(0, 1000), rng.randrange(1000, 10**7), rng.randrange(10**15, 10**25)])
        pairs += [(str(n), str(n)), (str(n + 1), str(n)), (f"-{n}", str(n)), (f"+{n}", str(n))]
    for _ in range(30):  # thousands separators and leading zeros (AIME golds are zero-padded)
        n = rng.randrange(1000, 10**9)
        pairs += [(_thousands(n), str(n)), (str(n), _thousands(n)), (_thousands(n + 1), str(n)),
                  (f"-{_thousands(n)}", f"-{n}")]
        k = rng.randrange(0, 1000)
        pairs += [(str(k), f"{k:03d}"), (f"{k:03d}", str(k + 1))]
    for _ in range(50):  # decimals: same value, trailing zeros, near and far
        whole, frac = rng.randrange(0, 10**6), rng.randrange(0, 10**6)
        x = f"{whole}.{frac:06d}"
        pairs += [(x, x), (x + "0", x), (x, f"{whole}.{(frac + 1) % 10**6:06d}"),
                  (x + "7", x), (f"{whole + 1}.{frac:06d}", x), (f"{whole}.5", str(whole)),
                  (str(whole), f"{whole}.0"), (f"-{x}", x)]
    pairs += [("0.0000001", "0"), ("1.0000001", "1"), ("1.0000004", "1.0000006"),
              ("123456789.1234567", "123456789.1234568"), (".5", "0.5"), ("0.5", "00.5"),
              ("\u22125", "-5"), ("-0", "0"), ("0,500", "500"), ("10,00", "1000"), ("1,2", "12")]
    return pairs


@pytest.fixture(scope="module")
def pairs() -> list[tuple[str, str]]:
    return _numeric_pairs(random.Random(1234))


def test_fast_path_agrees_with_math_verify(pairs):
    decided = disagreements = 0
    report = []
    for pred, gold in pairs:
        p, g = normalize_answer(pred), normalize_answer(gold)
        fast = fast_verdict(p, g)
        if fast is None:
            continue
        decided += 1
        slow, status, _ = grade_prepared("boxed", p, g, 5, 5)
        assert status == "ok"
        if fast != slow:
            disagreements += 1
            report.append(f"{pred!r} vs {gold!r}: fast={fast} math-verify={slow}")
    assert not report, "\n".join(report)
    assert len(pairs) >= 300
    assert decided >= 0.85 * len(pairs), f"fast path decided only {decided}/{len(pairs)}"


@pytest.mark.parametrize(
    "text, value",
    [("475", "475"), ("-12", "-12"), ("+3", "3"), ("\u22127", "-7"), ("1,000", "1000"),
     ("12,345,678", "12345678"), ("007", "7"), ("3.25", "3.25"), ("1,000.5", "1000.5")],
)
def test_plain_numbers(text, value):
    assert parse_plain_number(text) == parse_plain_number(value) is not None


@pytest.mark.parametrize("text", ["1,2", "0,500", "10,00", "1e3", "\\frac12", "x", "", "1 000", ".5", "5."])
def test_not_plain_numbers(text):
    assert parse_plain_number(text) is None


def test_undecidable_band_is_left_to_math_verify():
    assert fast_verdict("1.0000001", "1") is None  # 6-decimal rounding may merge these
    assert fast_verdict("3.1415926", "3.1415927") is None
    assert fast_verdict("2", "2.0") is True
    assert fast_verdict("2", "3") is False
    assert fast_verdict("2.5", "3") is False
