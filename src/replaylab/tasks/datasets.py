"""Training prompt sets and data orders.

A prompt set is a list of `Prompt`s rendered through the policy's chat template; a data order is a
reproducible permutation of it (`order.index`), so the same index gives the same walk for every
strategy, and three indices give the three data orders a table averages over.
"""

from __future__ import annotations

import random

from transformers import PreTrainedTokenizerBase

from replaylab.tasks.data_root import load_train_rows
from replaylab.tasks.prompts import render_question
from replaylab.tasks.tiny8 import TINYLONG_TRAIN_KINDS, TRAIN_KINDS, training_problems
from replaylab.types import Prompt


# The tiny world's generated training sets: data.name -> the problem kinds they draw from.
TINY_DATA = {"tiny_arith": TRAIN_KINDS, "tiny_long": TINYLONG_TRAIN_KINDS}


def training_rows(name: str, size: int, seed: int, data_root: str | None) -> list[dict[str, str]]:
    if name in TINY_DATA:
        return [{"id": p.uid, "problem": p.question, "answer": p.answer} for p in training_problems(size, seed, TINY_DATA[name])]

    rows = load_train_rows(name, data_root)
    return rows[:size] if size else rows


def render_prompts(rows: list[dict[str, str]], tokenizer: PreTrainedTokenizerBase, instruction: str,
                   enable_thinking: bool) -> list[Prompt]:
    texts = [render_question(tokenizer, r["problem"], instruction, enable_thinking) for r in rows]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    return [Prompt(r["id"], t, tuple(i), r["answer"]) for r, t, i in zip(rows, texts, ids)]


def data_order(n: int, index: int) -> list[int]:
    """Permutation `index` of range(n); -1 = file order. Independent of every other seed."""
    order = list(range(n))
    if index >= 0:
        random.Random(f"replaylab-order-{index}").shuffle(order)
    return order
