"""Training prompt sets and data orders.

A prompt set is a list of `Prompt`s rendered through the policy's chat template; a data order is a
reproducible permutation of it (`order.index`), so the same index gives the same walk for every
strategy, and three indices give the three data orders a table averages over.
"""

from __future__ import annotations

import hashlib
import random
import re

from transformers import PreTrainedTokenizerBase

from replaylab.tasks.data_root import load_train_rows
from replaylab.tasks.prompts import render_question
from replaylab.tasks.subsets import hashed_subset
from replaylab.tasks.tiny8 import TINYLONG_TRAIN_KINDS, TRAIN_KINDS, training_problems
from replaylab.types import Prompt


# The tiny world's generated training sets: data.name -> the problem kinds they draw from.
TINY_DATA = {"tiny_arith": TRAIN_KINDS, "tiny_long": TINYLONG_TRAIN_KINDS}


_LATEX_COMMAND = re.compile(r"\\([a-zA-Z]+|[()\[\]])")  # \left, \dots, \frac, ...; the \( \) \[ \] delimiters
_NOT_CONTENT = re.compile(r"[^a-z0-9+\-*/=^<>()]")  # $, \[ \], braces, punctuation, spacing


def normalised(question: str) -> str:
    """A question as the overlap check compares it: its letters, digits and operators, lower case. Case,
    spacing, punctuation, math delimiters ($, \\[ \\]) and LaTeX command names do not count: MATH-500 and
    aime_1983_2023 write the same problems with other delimiters, \\dots for \\cdots or a comma moved
    (an audit found 4 such pairs besides 3 equal up to spacing, and one MATH train problem in OlympiadBench).
    A paraphrase is not caught. Distinct tiny-world questions stay distinct (their operators count)."""
    return _NOT_CONTENT.sub("", _LATEX_COMMAND.sub("", question.lower()))


def training_rows(name: str, size: int, seed: int, data_root: str | None,
                  held_out: frozenset[str] = frozenset()) -> tuple[list[dict[str, str]], list[str]]:
    """(rows, ids dropped): the training prompt set, without any problem whose question (`normalised`) is in
    `held_out` (the questions the run evaluates on: training on a test question inflates its accuracy;
    aime_1983_2023 holds 7 of MATH-500's problems, math_train 2 of OlympiadBench's). For a file, `size` rows are then a fixed sample by id
    hash (tasks.subsets); the tiny world's generated sets exclude their own held-out sets already."""
    if name in TINY_DATA:
        rows = [{"id": p.uid, "problem": p.question, "answer": p.answer} for p in training_problems(size, seed, TINY_DATA[name])]
    else:
        rows = load_train_rows(name, data_root)
    kept, dropped = [], []
    for r in rows:
        (dropped if normalised(r["problem"]) in held_out else kept).append(r)
    ids = [r["id"] for r in dropped]
    return (kept if name in TINY_DATA else hashed_subset(kept, size, lambda row: row["id"], name)), ids


def render_prompts(rows: list[dict[str, str]], tokenizer: PreTrainedTokenizerBase, instruction: str,
                   enable_thinking: bool) -> list[Prompt]:
    texts = [render_question(tokenizer, r["problem"], instruction, enable_thinking) for r in rows]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    return [Prompt(r["id"], t, tuple(i), r["answer"]) for r, t, i in zip(rows, texts, ids)]


def rows_fingerprint(rows: list[dict[str, str]], order: list[int]) -> str:
    """16 hex digits over the training problems in data order (id, problem, answer): what a run trained on,
    whatever the tokenizer or prompt template (the config hash names those); rows carry it as `train_data`."""
    h = hashlib.sha256()
    for i in order:
        h.update(f"{rows[i]['id']}\0{rows[i]['problem']}\0{rows[i]['answer']}\0".encode())
    return h.hexdigest()[:16]


def data_order(n: int, index: int) -> list[int]:
    """Permutation `index` of range(n); -1 = file order. Independent of every other seed."""
    order = list(range(n))
    if index >= 0:
        random.Random(f"replaylab-order-{index}").shuffle(order)
    return order
