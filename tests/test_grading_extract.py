"""Answer extraction and normalisation: behaviour on real formats and on hostile input."""

from __future__ import annotations

import random
import time

import pytest

from replaylab.grading import extract_answer, normalize_answer
from replaylab.grading.extract import response_tail


@pytest.mark.parametrize(
    "response, expected",
    [
        ("The answer is \\boxed{42}.", "42"),
        ("\\boxed{1} and later \\boxed{2}", "2"),  # last box wins
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),  # escaped braces do not count
        ("\\boxed{\\left\\{ x \\right\\}}", "\\left\\{ x \\right\\}"),
        ("\\fbox{7}", "7"),
        ("\\boxed {7}", "7"),  # space before the brace is legal TeX
        ("\\boxed 7.", "7."),  # brace-less argument
        ("\\boxed{}", ""),
        ("\\boxed{\\boxed{5}}", "5"),
        ("\\boxed{5} then \\boxed{6", "5"),  # truncated last box: the last complete one
        ("\\\\boxed{3}", "3"),  # preceded by a TeX line break
        ("no box here", None),
        ("\\boxed{5", None),
        ("}}}}\\boxed{{{{1}", None),  # unbalanced: never closes
        ("", None),
    ],
)
def test_extract_answer(response, expected):
    assert extract_answer(response) == expected


def test_extract_answer_is_linear_on_hostile_input():
    rng = random.Random(0)
    garbage = "".join(chr(rng.randrange(0x20, 0x7F)) for _ in range(200_000))
    cases = [
        "\\boxed{" + "{" * 5000 + "1" + "}" * 5000 + "}",  # deep nesting, no recursion limit
        "\\boxed{" * 50_000,  # every box unbalanced: quadratic if each were scanned separately
        "\\boxed{1}" * 20_000 + "\\boxed{2}",
        "x" * 1_000_000,
        garbage,
        bytes(rng.randrange(256) for _ in range(100_000)).decode("latin-1"),
    ]
    for text in cases:
        start = time.perf_counter()
        extract_answer(text)
        assert time.perf_counter() - start < 1.0, text[:40]
    assert extract_answer(cases[0]) == "{" * 5000 + "1" + "}" * 5000
    assert extract_answer(cases[1]) is None
    assert extract_answer(cases[2]) == "2"


@pytest.mark.parametrize(
    "raw, normalised",
    [
        ("  42 ", "42"),
        ("**42**", "42"),
        ("5.", "5"),
        ("1, 2, \\ldots", "1, 2, \\ldots"),
        ("x...", "x..."),
        ("1\\,000", "1000"),
        ("1\\,000\\,000", "1000000"),
        ("1{,}000", "1000"),
        ("(1\\,2)", "(1\\,2)"),  # a thin space that is not a thousands separator stays
        ("4.5e33", "4.5\\times 10^{33}"),
        ("-2E-3", "-2\\times 10^{-3}"),
        ("e", "e"),
        ("2e", "2e"),
        ("\\frac{1}{2}", "\\frac{1}{2}"),
        ("√12", "\\sqrt{12}"),  # Unicode radicals get explicit braces
        ("√(x+1)", "\\sqrt{x+1}"),
        ("−∞", "-\\infty"),
        ("30°", "30^\\circ"),
        ("1½", "1\\frac{1}{2}"),
        ("3×4", "3\\times 4"),
    ],
)
def test_normalize_answer(raw, normalised):
    assert normalize_answer(raw) == normalised


def test_response_tail_strips_bold_and_bounds_length():
    text = "x" * 5000 + "The final answer is **7**"
    tail = response_tail(text, 100)
    assert len(tail) <= 100
    assert tail.endswith("The final answer is 7")
