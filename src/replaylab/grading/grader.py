"""Grader: turn (response, gold) pairs into GradeResults, fast where possible, safe always.

Per pair, in the caller's process:
1. extract the last `\\boxed{}` (linear time) and normalise it and the gold (extract.py);
2. plain numbers on both sides are decided on the spot (fastpath.py);
3. otherwise the LRU cache is consulted, keyed by exactly what the verifier would see;
4. the rest is de-duplicated and graded with math-verify in killable worker processes (pool.py).

Creating a Grader starts nothing; worker processes (fresh interpreters that import only
math-verify, see pool.py) start on the first pair that needs one and live until close(). grade()
may be called from any thread: math-verify itself only ever runs in the workers' main threads.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterable, Sequence

from replaylab.grading.cache import LRUCache, compact
from replaylab.grading.extract import extract_answer, normalize_answer, response_tail
from replaylab.grading.fastpath import fast_verdict, parse_plain_number
from replaylab.grading.pool import WorkerPool
from replaylab.grading.result import CACHEABLE, ERROR, NO_ANSWER, OK, STATUSES, GradeResult
from replaylab.grading.result import MODE_BOXED, MODE_NONE, MODE_TAIL



def _positive_int(name: str, value: int) -> int:
    # math-verify passes its timeouts to signal.alarm, which only takes whole seconds.
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a whole number of seconds >= 1, got {value!r}")
    return value


class Grader:
    """Math answer grader backed by math-verify in a pool of killable processes.

    Args:
        num_workers: worker processes (default: min(2, CPU count)).
        parsing_timeout: math-verify's per-parse timeout, whole seconds. 2 rather than 1: a
            long legitimate answer can take ~1 s to parse in a fresh worker (antlr warms up).
        timeout_seconds: math-verify's per-comparison timeout, whole seconds.
        item_timeout: hard wall-clock limit for one item in a worker, after which the worker is
            killed and replaced; default 3 * parsing_timeout + 2 * timeout_seconds + 2 (one item
            does up to three parses and one comparison, each bounded by its own alarm).
        cache_size: LRU entries for verdicts (0 disables the cache).
        fallback_unboxed: grade a response without any box by an anchored answer in its tail
            ("final answer is 42"); False makes such responses `no_answer`. A response marked
            truncated in `grade` never takes the fallback.
        tail_chars: how much of an unboxed response the fallback searches.
        memory_limit_mb: address-space cap per worker (None: no cap).
        chunk_size: items sent to a worker per message (amortises pipe round trips).
        fast_path: decide plain-number pairs in-process (False sends everything to math-verify,
            for audits and benchmarks).
    """

    def __init__(
        self,
        num_workers: int | None = None,
        *,
        parsing_timeout: int = 2,
        timeout_seconds: int = 2,
        item_timeout: float | None = None,
        cache_size: int = 100_000,
        fallback_unboxed: bool = True,
        tail_chars: int = 2000,
        memory_limit_mb: int | None = 4096,
        chunk_size: int = 8,
        fast_path: bool = True,
    ):
        self.num_workers = num_workers if num_workers is not None else min(2, os.cpu_count() or 1)
        self.parsing_timeout = _positive_int("parsing_timeout", parsing_timeout)
        self.timeout_seconds = _positive_int("timeout_seconds", timeout_seconds)
        if item_timeout is None:
            item_timeout = 3 * parsing_timeout + 2 * timeout_seconds + 2
        if item_timeout <= 0:
            raise ValueError(f"item_timeout must be > 0 seconds, got {item_timeout!r}")
        self.item_timeout = float(item_timeout)
        self.fallback_unboxed = fallback_unboxed
        self.tail_chars = tail_chars
        self.fast_path = fast_path
        self._cache: LRUCache[GradeResult] = LRUCache(cache_size)
        self._pool = WorkerPool(
            self.num_workers, self.item_timeout,
            (self.parsing_timeout, self.timeout_seconds, memory_limit_mb),
            chunk_size=chunk_size,
        )
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(("items", "correct", "fast_path", "cache_hits", "worker_items"), 0)
        self._counts.update(dict.fromkeys(STATUSES, 0))
        self._closed = False

    # --- public API ------------------------------------------------------------------------------

    def grade(self, pairs: Iterable[tuple[str, str]], truncated: Sequence[bool] | None = None) -> list[GradeResult]:
        """Grade (response, gold) pairs; results are in input order. Never raises for bad input:
        a non-string response or gold gives status "error" with a message.

        `truncated[i]` marks a response the token budget cut off: it is graded by a complete box only,
        never by the unboxed fallback, whose anchored phrase ("so the answer is 7? wait...") in a cut
        reasoning is a guess the model had not committed to."""
        pairs = pairs if isinstance(pairs, Sequence) else list(pairs)
        if truncated is not None and len(truncated) != len(pairs):
            raise ValueError(f"truncated has {len(truncated)} flags for {len(pairs)} pairs")
        with self._lock:
            if self._closed:
                raise RuntimeError("Grader is closed")
            results: list[GradeResult | None] = [None] * len(pairs)
            todo: dict[tuple, list[int]] = {}  # cache key -> indices waiting for it
            tasks: dict[tuple, tuple] = {}
            for i, pair in enumerate(pairs):
                results[i] = self._prepare(i, pair, todo, tasks, fallback=self.fallback_unboxed
                                           and not (truncated is not None and truncated[i]))
            if tasks:
                keys = list(tasks)
                self._counts["worker_items"] += len(keys)
                for key, (correct, status, message) in zip(keys, self._pool.run([tasks[k] for k in keys])):
                    mode, text, _ = tasks[key]
                    result = GradeResult(correct, status, message, text if mode == MODE_BOXED else None)
                    if status in CACHEABLE:
                        self._cache.put(key, result)
                    for i in todo[key]:
                        results[i] = result
            for r in results:
                self._counts["items"] += 1
                self._counts[r.status] += 1
                self._counts["correct"] += r.correct
            return results  # type: ignore[return-value]

    def grade_one(self, response: str, gold: str) -> GradeResult:
        return self.grade([(response, gold)])[0]

    @property
    def counters(self) -> dict[str, int]:
        """Running totals: items, correct, per status, fast_path, cache_hits, worker_items,
        worker_kills (outer timeout) and worker_deaths (crashes)."""
        counts = dict(self._counts)
        counts["worker_kills"] = self._pool.kills
        counts["worker_deaths"] = self._pool.deaths
        return counts

    def worker_pids(self) -> list[int]:
        return self._pool.pids()

    def clear_cache(self) -> None:
        self._cache.clear()

    def close(self) -> None:
        """Stop the worker processes. Idempotent; the Grader cannot grade afterwards."""
        self._closed = True
        self._pool.close()

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- internals -------------------------------------------------------------------------------

    def _prepare(self, i: int, pair, todo: dict, tasks: dict, fallback: bool) -> GradeResult | None:
        """A result decided without a worker, or None after queueing the pair in todo/tasks."""
        try:
            response, gold = pair
        except (TypeError, ValueError):
            return GradeResult(False, ERROR, f"pair {i} is not a (response, gold) tuple")
        if not isinstance(response, str) or not isinstance(gold, str):
            return GradeResult(
                False, ERROR,
                f"pair {i}: response and gold must be str, got {type(response).__name__} "
                f"and {type(gold).__name__}",
            )
        gold_n = normalize_answer(gold)
        boxed = extract_answer(response)
        if boxed is not None:
            text = normalize_answer(boxed)
            mode = MODE_BOXED if text else MODE_NONE
        elif fallback:
            text = response_tail(response, self.tail_chars)
            mode = MODE_TAIL if text.strip() else MODE_NONE
        else:
            text, mode = "", MODE_NONE

        if self.fast_path:
            local = _decide_in_process(mode, text, gold_n)
            if local is not None:
                self._counts["fast_path"] += 1
                return local

        key = (mode, compact(text), compact(gold_n))
        cached = self._cache.get(key)
        if cached is not None:
            self._counts["cache_hits"] += 1
            return cached
        todo.setdefault(key, []).append(i)
        tasks.setdefault(key, (mode, text, gold_n))
        return None


def _decide_in_process(mode: str, text: str, gold: str) -> GradeResult | None:
    """The verdict when no worker is needed to reach math-verify's answer, else None."""
    if mode == MODE_BOXED:
        verdict = fast_verdict(text, gold)
        return None if verdict is None else GradeResult(verdict, OK, "", text)
    if mode == MODE_NONE and parse_plain_number(gold) is not None:
        # A plain-number gold always parses, so "no answer" needs no worker to confirm it.
        return GradeResult(False, NO_ANSWER)
    return None


_default: Grader | None = None
_default_lock = threading.Lock()


def default_grader() -> Grader:
    """A process-wide Grader with default settings, created on first use, closed at exit."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = Grader()
            atexit.register(_default.close)
        return _default
