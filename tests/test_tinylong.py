"""The long-reasoning tiny world (`world=tinylong`, issue 14 item 3): held-out sets whose solutions
the short budget cuts and the long one fits, a training stream that never sees them, a cache key
for the default world that adding the suite left alone, and a training run through it."""

from __future__ import annotations

import hashlib

from conftest import compose, load_rows
from replaylab.config import to_object
from replaylab.models.tiny_spec import TinyWorldConfig
from replaylab.models.tiny_tokenizer import build_tiny_tokenizer
from replaylab.tasks.tiny8 import (
    TINY8_SETS,
    TINYLONG_SETS,
    TINYLONG_SFT_KINDS,
    TINYLONG_TRAIN_KINDS,
    eval_set,
    held_out_questions,
    tiny8_set,
    training_problems,
)


def _response_tokens(problem) -> int:
    return len(build_tiny_tokenizer()(problem.solution, add_special_tokens=False)["input_ids"]) + 1  # + EOS


def test_short_budget_cuts_the_long_kinds_and_the_long_budget_fits_all():
    short = to_object(compose(["world=tinylong", "budget=tinylong_short"])).budget.max_response_tokens
    long = to_object(compose(["world=tinylong"])).budget.max_response_tokens
    lengths = {k: [_response_tokens(p) for p in eval_set("tinylong", k)[:50]] for k in TINYLONG_SETS}
    assert all(len(eval_set("tinylong", k)) == 200 for k in TINYLONG_SETS)
    assert max(lengths["add6"]) <= short < min(lengths["add10"])  # add6 fits the short budget, add10+ do not
    assert max(max(v) for v in lengths.values()) <= long
    assert 100 <= sum(map(sum, lengths.values())) / sum(map(len, lengths.values())) <= 250  # responses of ~100-250 tokens


def test_held_out_of_training_and_the_default_world_key_unchanged():
    train = training_problems(3000, seed=1, kinds=TINYLONG_TRAIN_KINDS)
    assert not {p.question for p in train} & held_out_questions()
    tiny8 = frozenset(p.question for s in TINY8_SETS for p in tiny8_set(s))
    assert held_out_questions(tuple(TINY8_SETS)) == tiny8  # what the default world's key hashed before tinylong
    key = hashlib.sha256("\n".join(sorted(tiny8)).encode()).hexdigest()[:16]
    long_world = TinyWorldConfig(kinds=list(TINYLONG_SFT_KINDS))
    assert long_world.digest() != TinyWorldConfig().digest()
    assert held_out_questions(tuple(TINYLONG_SFT_KINDS)) > {p.question for p in eval_set("tinylong", "add14")}
    assert key != hashlib.sha256("\n".join(sorted(held_out_questions(tuple(TINYLONG_SFT_KINDS)))).encode()).hexdigest()[:16]


def test_world_preset_matches_the_constants():
    cfg = to_object(compose(["world=tinylong"]))
    assert (cfg.data.name, cfg.eval.suite, cfg.tiny.kinds) == ("tiny_long", "tinylong", list(TINYLONG_SFT_KINDS))


def test_a_training_run_on_the_long_world(run_train):
    _, path = run_train(["world=tinylong", "budget.max_updates=2"])
    rows = load_rows(path)
    benchmarks = {r["benchmark"] for r in rows if r["split"] == "eval"}
    assert benchmarks == {f"tinylong/{k}" for k in TINYLONG_SETS} | {"mean"}
    assert (path / "config.yaml").read_text().count("tiny_long") >= 1
