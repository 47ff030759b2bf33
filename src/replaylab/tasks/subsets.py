"""A fixed subset of a problem file: what `eval.max_problems` and `data.size` take.

A file's first rows are not a sample: AIME files run by problem number (easiest first), MATH's
training file by subject (its first 1,024 rows are all Algebra), so a cap by position measures or
trains on one corner of the set. The items whose ids hash lowest (sha256 of a salt, such as the set's
name, and the id) are one, and the same for every seed, run and machine, so capped runs still pair;
the subsets nest (the 10 include the 4), and they keep the file's order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def hashed_subset(items: Sequence[T], n: int | None, key: Callable[[T], str], salt: str) -> list[T]:
    """`n` of `items` (all of them when n is None, 0 or at least their number), in their order."""
    items = list(items)
    if not n or n >= len(items):
        return items
    rank = sorted(range(len(items)), key=lambda i: hashlib.sha256(f"{salt}/{key(items[i])}".encode()).hexdigest())
    return [items[i] for i in sorted(rank[:n])]
