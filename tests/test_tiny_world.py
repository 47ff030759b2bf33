"""The tiny world: deterministic task, transformers-format tokenizer, cached deterministic build."""

from __future__ import annotations

import hashlib
import time

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from replaylab.models.tiny_spec import TinyModelSize, TinyWorldConfig
from replaylab.models.tiny_world import ensure_tiny_world
from replaylab.tasks.arithmetic import KINDS, generate
from replaylab.tasks.tiny8 import TINY8_SETS, TINY8_SIZE, held_out_questions, tiny8_set, training_problems

MICRO = TinyWorldConfig(teacher=TinyModelSize(hidden_size=64, intermediate_size=128), teacher_steps=40, student_step=20)


def test_problems_are_deterministic_and_solutions_are_right():
    a = generate(list(KINDS), 200, seed=3, prefix="x")
    assert a == generate(list(KINDS), 200, seed=3, prefix="x")
    assert a != generate(list(KINDS), 200, seed=4, prefix="x")
    for p in a:
        assert p.solution.endswith(f"\\boxed{{{p.answer}}}")
        assert eval(p.question.removesuffix("=?")) == int(p.answer)  # noqa: S307 (our own arithmetic)
        for step in p.solution.split(". ")[:-1]:  # every intermediate step is correct arithmetic
            lhs, rhs = step.rstrip(".").split("=")
            assert eval(lhs) == int(rhs)  # noqa: S307


def test_tiny8_is_held_out_of_training():
    assert len(TINY8_SETS) == 8 and all(len(tiny8_set(s)) == TINY8_SIZE == 300 for s in TINY8_SETS)
    train = training_problems(3000, seed=1)
    assert not {p.question for p in train} & held_out_questions()
    assert {p.kind for p in train} <= {"add2", "sub2", "mul", "add3", "addmul", "mulsub"}


def test_tokenizer_and_models_load_like_hub_models(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAYLAB_CACHE", str(tmp_path))
    root = ensure_tiny_world(MICRO, progress=False)
    tok = AutoTokenizer.from_pretrained(root / "student")
    text = tok.apply_chat_template([{"role": "user", "content": "12+30=?"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\n12+30=?<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    model = AutoModelForCausalLM.from_pretrained(root / "teacher")
    assert model.config.model_type == "qwen3"


def digest(path):
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def test_rebuild_from_empty_cache_is_bit_identical_and_second_call_is_a_cache_hit(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAYLAB_CACHE", str(tmp_path / "a"))
    first = ensure_tiny_world(MICRO, progress=False)
    t0 = time.perf_counter()
    assert ensure_tiny_world(MICRO, progress=False) == first
    assert time.perf_counter() - t0 < 1.0
    monkeypatch.setenv("REPLAYLAB_CACHE", str(tmp_path / "b"))
    second = ensure_tiny_world(MICRO, progress=False)
    assert second != first
    for role in ("teacher", "student"):
        assert digest(first / role) == digest(second / role)
    assert digest(first / "teacher") != digest(first / "student")


def test_unknown_tiny_model_and_bad_student_step_are_rejected():
    from replaylab.config_fields import ConfigError
    from replaylab.models.tiny_world import resolve_tiny

    with pytest.raises(ValueError, match="tiny://teacher, tiny://student"):
        resolve_tiny("tiny://nobody")
    with pytest.raises(ConfigError, match="tiny.student_step"):
        TinyWorldConfig(teacher_steps=10, student_step=10)


def test_the_cache_key_follows_the_held_out_set(monkeypatch):
    """The SFT stream leaves the tiny8 questions out, so a different held-out set is a different world:
    its cache key must change (else a world trained on today's test questions would be reused)."""
    from replaylab.models import tiny_spec

    before = tiny_spec.TinyWorldConfig().digest()
    monkeypatch.setattr(tiny_spec, "held_out_questions", lambda kinds=None: held_out_questions(kinds) | {"1+1=?"})
    assert tiny_spec.TinyWorldConfig().digest() != before
    monkeypatch.setattr(tiny_spec, "held_out_questions", held_out_questions)
    assert tiny_spec.TinyWorldConfig().digest() == before
