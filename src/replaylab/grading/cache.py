"""A bounded LRU map for grading verdicts.

GRPO samples many responses per prompt and most of them end in the same few answers, so
(answer, gold) pairs repeat heavily within and across steps. Keys are built from exactly what the
verifier sees (see Grader), never from the whole response, so a hit can never return a verdict
for different input; long strings are replaced by a digest so memory stays bounded.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Generic, Hashable, TypeVar

V = TypeVar("V")

_MAX_LITERAL = 256  # longer key strings are stored as a 16-byte digest


def compact(text: str) -> str | bytes:
    """`text` itself if short, else a BLAKE2b digest of it (collisions are negligible)."""
    if len(text) <= _MAX_LITERAL:
        return text
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class LRUCache(Generic[V]):
    """Least-recently-used map with at most `maxsize` entries (0 disables caching)."""

    def __init__(self, maxsize: int):
        if maxsize < 0:
            raise ValueError(f"cache size must be >= 0, got {maxsize}")
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, V] = OrderedDict()

    def get(self, key: Hashable) -> V | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: Hashable, value: V) -> None:
        if self.maxsize == 0:
            return
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
