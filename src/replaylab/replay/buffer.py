"""`PromptBuffer`: the one replay store the strategies share, keyed by prompt uid.

Every replay method here keeps its stored experience per prompt: RePO a FIFO deque of
completions per prompt, POPO effective groups tagged with their generation step,
RLEP a pool of verified answers per question. One small store covers all of them:

* per-prompt FIFO with an optional bound (`max_per_prompt`: the oldest entry of that prompt goes);
* an optional global bound (`max_total`: the oldest entry of the whole store goes);
* every entry carries the iteration it was stored at (`step`, for ages and recency) and a global
  insertion number (`seq`), so "oldest", "newest" and the iteration order are exact and stable;
* `state_dict` / `load_state_dict` round-trip exactly. Items are kept as they are (samples, groups:
  dataclasses holding tensors), since checkpoints are written with `torch.save`, which pickles them
  and preserves tensors shared between items.

It stores whatever it is given; callers store copies (`Sample.replayed`) when the trainer would
otherwise mutate the objects later (advantages, proximal log-probs, off-policy treatment).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable


@dataclass(eq=False)  # identity equality: items hold tensors, which do not compare to a bool
class Entry:
    item: Any  # a Sample, a Group, or anything a strategy stores
    step: int  # iteration at which it was stored
    seq: int  # global insertion number (0, 1, 2, ...): a total order over the whole store


class PromptBuffer:
    def __init__(self, max_per_prompt: int | None = None, max_total: int | None = None):
        for name, v in (("max_per_prompt", max_per_prompt), ("max_total", max_total)):
            if v is not None and v < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {v}")
        self.max_per_prompt = max_per_prompt
        self.max_total = max_total
        self._store: dict[str, deque[Entry]] = {}
        self._next_seq = 0
        self._size = 0

    # ------------------------------------------------------------------ writing
    def add(self, uid: str, item: Any, step: int) -> None:
        q = self._store.setdefault(uid, deque())
        q.append(Entry(item, step, self._next_seq))
        self._next_seq += 1
        self._size += 1
        if self.max_per_prompt is not None and len(q) > self.max_per_prompt:
            q.popleft()
            self._size -= 1
        while self.max_total is not None and self._size > self.max_total:
            oldest_uid = min(self._store, key=lambda u: self._store[u][0].seq)  # heads are oldest
            self._pop_left(oldest_uid)

    def extend(self, uid: str, items: Iterable[Any], step: int) -> None:
        for item in items:
            self.add(uid, item, step)

    def remove(self, uid: str, entry: Entry) -> None:
        """Take one entry out (e.g. a group used once, as POPO does)."""
        q = self._store[uid]
        q.remove(entry)
        self._size -= 1
        if not q:
            del self._store[uid]

    def drop(self, predicate: Callable[[str, Entry], bool]) -> int:
        """Remove every entry for which predicate(uid, entry) holds; returns how many went."""
        gone = 0
        for uid in list(self._store):
            q = self._store[uid]
            keep = deque(e for e in q if not predicate(uid, e))
            gone += len(q) - len(keep)
            if keep:
                self._store[uid] = keep
            else:
                del self._store[uid]
        self._size -= gone
        return gone

    def _pop_left(self, uid: str) -> None:
        q = self._store[uid]
        q.popleft()
        self._size -= 1
        if not q:
            del self._store[uid]

    # ------------------------------------------------------------------ reading
    def get(self, uid: str) -> list[Entry]:
        """A prompt's entries, oldest first (empty if none)."""
        return list(self._store.get(uid, ()))

    def items(self, uid: str) -> list[Any]:
        return [e.item for e in self._store.get(uid, ())]

    def entries(self) -> list[tuple[str, Entry]]:
        """Every (uid, entry), oldest first across prompts."""
        return sorted(((u, e) for u, q in self._store.items() for e in q), key=lambda ue: ue[1].seq)

    def uids(self) -> list[str]:
        return list(self._store)

    def __contains__(self, uid: str) -> bool:
        return uid in self._store

    def __len__(self) -> int:
        return self._size

    @property
    def num_prompts(self) -> int:
        return len(self._store)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {
            "next_seq": self._next_seq,
            "store": {u: [(e.item, e.step, e.seq) for e in q] for u, q in self._store.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        self._next_seq = state["next_seq"]
        self._store = {u: deque(Entry(i, s, q) for i, s, q in rows) for u, rows in state["store"].items()}
        self._size = sum(len(q) for q in self._store.values())
