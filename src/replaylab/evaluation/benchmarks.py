"""The benchmark registry: which question sets a model is scored on, with how many samples each.

A `Benchmark` is a fixed list of (id, question, gold answer) items plus `k`, the default samples per
problem for avg@k. k follows the common reporting convention: the 30-40-problem
competition sets are too small for one sample to mean anything (the same model moves by 2-4 solved
out of 30 across seeds), so they get k=16; MATH-500, Minerva and OlympiadBench (272-675 problems)
get k=4; GSM8K (1319 problems, near saturation for the models we train) gets k=1; the tiny suite is
decoded greedily, so k=1.

Gold answers are taken from the data files, with two per-set repairs that make a correct prediction
gradable (MANIFEST.md caveats; the file's own value stays in `meta["answer_raw"]`):
- Minerva writes scientific notation as `4.5e33` (a LaTeX parser reads `e` as Euler's number), one
  answer as `np.arcsin(10/13)` and two fractions with a stray point (`-1./3`, read as -1): rewritten to
  `4.5 \\times 10^{33}`, `\\arcsin(10/13)` and `-\\frac{1}{3}`.
- OlympiadBench multi-answer rows keep inline-math dollars (`$69$,$84$`): they are removed.

Not repaired (math-verify's parse of the gold loses part of it; an audit on 2026-12-07 found about 9 of
Minerva's 272 rows and 4 of OlympiadBench's 675): a symbol after a fraction (`\\frac{1}{m} t` reads as
1/m, `\\frac{1}{\\sqrt2}c` drops c), sums of terms with subscripts (`\\frac13E_1+\\frac23E_2` reads as
2/3), a letter read as a unit (`6m` as 6), and answers written as equations or with a leading symbol
(`m_{\\max}=n^2-n-1`, `t(0,4]`). A correct answer spelled otherwise can be graded wrong there and a
partial one right: up to a few points on Minerva's level, the same for every strategy of a table.
"""

from __future__ import annotations

import hashlib

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from replaylab.tasks.data_root import read_rows, resolve_data_root
from replaylab.tasks.tiny8 import SUITES as TINY_SUITES
from replaylab.tasks.tiny8 import eval_set

Kind = Literal["math", "tiny"]

# The instruction appended to math questions (Qwen / DeepSeek-R1 convention; the grader reads the
# last \boxed{}). The tiny world is trained without one, so it is evaluated without one.
MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


@dataclass(frozen=True)
class BenchmarkItem:
    id: str
    question: str
    answer: str  # gold final answer, as the grader receives it
    meta: dict = field(default_factory=dict, compare=False)  # the row's other fields (source, unit...)


@dataclass(frozen=True)
class Benchmark:
    name: str
    items: tuple[BenchmarkItem, ...]
    k: int  # default samples per problem (avg@k)
    kind: Kind

    def __len__(self) -> int:
        return len(self.items)


def benchmarks_fingerprint(benchmarks: list[Benchmark]) -> str:
    """16 hex digits over what an evaluation scores (each benchmark's name and its problems' ids, questions and
    golds): a checkpoint records it, so a resumed run whose benchmark files changed does not continue a curve
    graded on other golds."""
    h = hashlib.sha256()
    for bench in benchmarks:
        h.update(f"{bench.name}\1".encode())
        for item in bench.items:
            h.update(f"{item.id}\0{item.question}\0{item.answer}\0".encode())
    return h.hexdigest()[:16]


_SCI = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)[eE]([+-]?)0*(\d+)\s*$")
_NUMPY_FN = re.compile(r"\bnp\.([a-z]+)\(")
# Minerva writes some fractions with a stray point ("-1./3", "-3./2"): math-verify reads "-1." and drops the rest,
# so -1/3 was graded wrong and -1 right.
_DOT_FRACTION = re.compile(r"^\s*([+-]?)(\d+)\./(\d+)\s*$")


def _minerva_gold(answer: str) -> str:
    m = _SCI.match(answer)
    if m:
        mantissa, sign, exponent = m.groups()
        return f"{mantissa} \\times 10^{{{'-' if sign == '-' else ''}{exponent}}}"
    m = _DOT_FRACTION.match(answer)
    if m:
        sign, num, den = m.groups()
        return f"{'-' if sign == '-' else ''}\\frac{{{num}}}{{{den}}}"
    return _NUMPY_FN.sub(r"\\\1(", answer)


def _olympiad_gold(answer: str) -> str:
    return answer.replace("$", "").strip() if "$" in answer else answer


@dataclass(frozen=True)
class _MathSpec:
    file: str
    k: int
    rows: int  # expected row count (MANIFEST.md): a different revision of the set is an error
    gold: Callable[[str], str] = lambda a: a


_MATH: dict[str, _MathSpec] = {
    "aime2024": _MathSpec("aime2024.jsonl", 16, 30),
    "aime2025": _MathSpec("aime2025.jsonl", 16, 30),
    "hmmt_feb_2025": _MathSpec("hmmt_feb_2025.jsonl", 16, 30),
    "brumo2025": _MathSpec("brumo2025.jsonl", 16, 30),
    "amc2023": _MathSpec("amc2023.jsonl", 16, 40),
    "math500": _MathSpec("math500.jsonl", 4, 500),
    "minerva_math": _MathSpec("minerva_math.jsonl", 4, 272, _minerva_gold),
    "olympiadbench": _MathSpec("olympiadbench.jsonl", 4, 675, _olympiad_gold),
    "gsm8k": _MathSpec("gsm8k_test.jsonl", 1, 1319),
    "cmimc2025": _MathSpec("cmimc2025.jsonl", 16, 40),
    "aime2026": _MathSpec("aime2026.jsonl", 16, 30),
}
_TINY = {f"{suite}/{s}": (suite, s) for suite, (sets, _, _) in TINY_SUITES.items() for s in sets}

SUITES: dict[str, tuple[str, ...]] = {
    "math8": (
        "aime2024", "aime2025", "hmmt_feb_2025", "brumo2025", "amc2023", "math500", "minerva_math", "olympiadbench",
    ),
    **{suite: tuple(f"{suite}/{s}" for s in sets) for suite, (sets, _, _) in TINY_SUITES.items()},
}


def benchmark_names() -> list[str]:
    return [*_MATH, *_TINY]


def get_suite(name: str) -> list[str]:
    """The benchmark names of a suite (`math8`, `tiny8`, `tinylong`)."""
    if name not in SUITES:
        raise KeyError(f"unknown benchmark suite {name!r}; allowed: {sorted(SUITES)}")
    return list(SUITES[name])


def get_benchmark(name: str, data_root: str | Path | None = None) -> Benchmark:
    """Load benchmark `name`; math sets read `<data_root>/<file>.jsonl` (see `data.resolve_data_root`
    for the default root), tiny sets are generated and need no data root."""
    if name in _TINY:
        items = tuple(BenchmarkItem(p.uid, p.question, p.answer, {"kind": p.kind}) for p in eval_set(*_TINY[name]))
        return Benchmark(name, items, k=1, kind="tiny")
    if name not in _MATH:
        raise KeyError(f"unknown benchmark {name!r}; allowed: {benchmark_names()} (suites: {sorted(SUITES)})")
    spec = _MATH[name]
    rows = read_rows(resolve_data_root(data_root) / spec.file, spec.rows)
    items = []
    for row in rows:
        meta = {k: v for k, v in row.items() if k not in ("id", "problem", "answer", "solution")}
        gold = spec.gold(row["answer"])
        if gold != row["answer"]:
            meta["answer_raw"] = row["answer"]
        items.append(BenchmarkItem(row["id"], row["problem"], gold, meta))
    return Benchmark(name, tuple(items), k=spec.k, kind="math")


def get_benchmarks(names: str | list[str], data_root: str | Path | None = None) -> list[Benchmark]:
    """A suite name or a list of benchmark names, loaded in order."""
    if isinstance(names, str):
        names = get_suite(names) if names in SUITES else [names]
    return [get_benchmark(n, data_root) for n in names]
