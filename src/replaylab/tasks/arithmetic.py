"""The tiny world's task: arithmetic word-free problems with step-by-step solutions.

Each problem kind fixes the operand sizes and the number and kind of operations. Solutions are
written the way a reasoning model writes them: one intermediate result per step, then the final
answer in `\\boxed{}`, so the same grader and the same prompt path serve the tiny world and real
math benchmarks. Generation is a pure function of (kind, seed, index): no global RNG.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    uid: str
    question: str  # what the user asks, e.g. "15+43+75=?"
    solution: str  # the chain-of-thought target, ending in \boxed{answer}
    answer: str
    kind: str


@dataclass(frozen=True)
class Kind:
    """One problem family. `level` orders kinds by difficulty (1 = easiest)."""

    name: str
    level: int
    operand_digits: int  # size of the additive operands (2 -> 10..99)
    num_terms: int  # number of additive terms
    multiply: str  # "" none | "last" (a+b*c) | "first_sub" (a*b-c) | "only" (a*b)
    subtract: bool = False


KINDS: dict[str, Kind] = {
    k.name: k
    for k in [
        Kind("add2", 1, 2, 2, ""),
        Kind("sub2", 1, 2, 2, "", subtract=True),
        Kind("mul", 2, 2, 1, "only"),
        Kind("add3", 2, 2, 3, ""),
        Kind("addmul", 3, 2, 1, "last"),
        Kind("mulsub", 3, 2, 1, "first_sub"),
        Kind("add4", 4, 2, 4, ""),
        Kind("add3d", 4, 3, 2, ""),
        # Long reasoning (the tinylong suite): running sums of many two-digit terms, one written step
        # per term, so a solution runs about 12 tokens per term (add6 ~70 tokens, add12 ~145): long
        # enough that a short response budget truncates the longer kinds while a long one fits all.
        Kind("add6", 5, 2, 6, ""),
        Kind("add8", 5, 2, 8, ""),
        Kind("add10", 6, 2, 10, ""),
        Kind("add12", 6, 2, 12, ""),
        Kind("add14", 7, 2, 14, ""),
    ]
}


def _operand(rng: random.Random, digits: int) -> int:
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def make_problem(kind: str, rng: random.Random, uid: str) -> Problem:
    """Draw one problem of `kind` from `rng` and write its step-by-step solution."""
    spec = KINDS[kind]
    if spec.multiply == "only":  # a*b with a one-digit multiplier: one step
        a, m = _operand(rng, spec.operand_digits), rng.randint(2, 9)
        ans = a * m
        return Problem(uid, f"{a}*{m}=?", f"{a}*{m}={ans}. \\boxed{{{ans}}}", str(ans), kind)
    if spec.multiply == "last":  # a+b*c: multiply first, then add
        a, b, m = _operand(rng, 2), _operand(rng, 2), rng.randint(2, 9)
        prod, ans = b * m, a + b * m
        sol = f"{b}*{m}={prod}. {a}+{prod}={ans}. \\boxed{{{ans}}}"
        return Problem(uid, f"{a}+{b}*{m}=?", sol, str(ans), kind)
    if spec.multiply == "first_sub":  # a*b-c with a positive result
        a, m, c = _operand(rng, 2), rng.randint(2, 9), _operand(rng, 2)
        prod = a * m
        if c > prod:
            c = rng.randint(10, max(10, prod - 1))
        ans = prod - c
        sol = f"{a}*{m}={prod}. {prod}-{c}={ans}. \\boxed{{{ans}}}"
        return Problem(uid, f"{a}*{m}-{c}=?", sol, str(ans), kind)
    if spec.subtract:  # a-b with a >= b, so answers stay non-negative
        a, b = sorted((_operand(rng, spec.operand_digits) for _ in range(2)), reverse=True)
        ans = a - b
        return Problem(uid, f"{a}-{b}=?", f"{a}-{b}={ans}. \\boxed{{{ans}}}", str(ans), kind)
    terms = [_operand(rng, spec.operand_digits) for _ in range(spec.num_terms)]
    steps, acc = [], terms[0]
    for t in terms[1:]:  # a running sum, one step per term
        steps.append(f"{acc}+{t}={acc + t}.")
        acc += t
    sol = " ".join(steps) + f" \\boxed{{{acc}}}"
    return Problem(uid, "+".join(map(str, terms)) + "=?", sol, str(acc), kind)


def generate(kinds: list[str], n: int, seed: int, prefix: str, exclude: frozenset[str] = frozenset()) -> list[Problem]:
    """`n` problems drawn uniformly over `kinds` from one seeded stream, skipping questions in
    `exclude` (the held-out test sets) and duplicates, so training never sees a test question."""
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown arithmetic kinds {unknown}; allowed: {sorted(KINDS)}")
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[Problem] = []
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise ValueError(f"could not draw {n} distinct problems of kinds {kinds}: the space is too small")
        p = make_problem(rng.choice(kinds), rng, f"{prefix}-{len(out):06d}")
        if p.question in exclude or p.question in seen:
            continue
        seen.add(p.question)
        out.append(p)
    return out
