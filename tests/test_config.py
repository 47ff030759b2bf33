"""The config tree: composition, help texts, and bad overrides failing early with the key's name."""

from __future__ import annotations

import subprocess
import sys
import typing
from dataclasses import fields, is_dataclass

import pytest

from conftest import compose
from replaylab.config import Config, to_object
from replaylab.replay import STRATEGIES


def run_cli(*overrides):
    return subprocess.run([sys.executable, "-m", "replaylab.train", *overrides], capture_output=True, text=True, timeout=120)


def test_cfg_job_prints_the_resolved_config():
    out = run_cli("--cfg", "job", "strategy=ropd", "order=2")
    assert out.returncode == 0, out.stderr
    assert "name: ropd" in out.stdout and "order: 2" in out.stdout and "max_response_tokens: 48" in out.stdout


@pytest.mark.parametrize("override, expected", [
    ("strategy=nonexistent", ["strategy/nonexistent", "Available options in 'strategy'", "ropd"]),
    ("trainer.lrr=1", ["Key 'lrr' not in 'TrainerConfig'", "trainer.lrr"]),
    ("budget.max_response_tokens=-1", ["budget.max_response_tokens", "positive"]),
    ("trainer.aggregation=mean", ["trainer.aggregation", "allowed values", "dapo"]),
])
def test_bad_override_fails_before_loading_anything_and_names_the_key(override, expected):
    out = run_cli(override, "output_root=/nonexistent/never-created")
    assert out.returncode != 0
    message = out.stdout + out.stderr
    for text in expected:
        assert text in message, message
    assert "Loading weights" not in message and "tiny world" not in message


def test_every_field_has_a_help_text():
    def walk(cls, prefix):
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            assert f.metadata.get("help"), f"{prefix}{f.name} has no help text"
            if is_dataclass(hints.get(f.name)):
                walk(hints[f.name], f"{prefix}{f.name}.")

    walk(Config, "")
    for name, cls in STRATEGIES.items():
        walk(cls.Config, f"strategy[{name}].")


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_every_strategy_composes_and_validates(strategy):
    trainer = "grpo" if "grpo" in STRATEGIES[strategy].trainers and "opd" not in STRATEGIES[strategy].trainers else "opd"
    # fixed_schedule fixes the run length (40 + 20 updates); the tiny default budget is 1000.
    extra = ["budget.max_updates=60"] if strategy == "fixed_schedule" else []
    obj = to_object(compose([f"strategy={strategy}", f"trainer={trainer}", *extra]))
    assert obj.strategy.name == strategy
