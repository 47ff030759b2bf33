"""Every benchmark's trainer configs compose into a valid run config. `make bench` is not part of CI, so a
config check that refuses a benchmark's recipe (a setting of an evaluation the benchmark never runs, say)
would otherwise surface only when someone times something."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from conftest import compose
from replaylab.config import to_object

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench(request):
    sys.path.insert(0, str(BENCHMARKS))  # the scripts import their siblings (alternate, common) by name
    yield importlib.import_module
    sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize("script", ["bench_lean_forward", "bench_matmul_kernel"])
def test_recipes_compose_with_the_timed_sides_settings(bench, script, tmp_path):
    recipes, quiet = bench(script).RECIPES, bench("common").QUIET
    assert "tinylong" in recipes  # the sweep-based recipe, whose own evaluation settings QUIET must reset
    for name, overrides in recipes.items():
        to_object(compose(overrides + ["trainer.threads=2"] + quiet + [f"output_root={tmp_path}"]))


def test_replay_overhead_cases_compose(bench, tmp_path):
    for name, overrides in bench("bench_replay_overhead").CASES.items():
        budget = [] if any(o.startswith("budget.max_updates=") for o in overrides) else ["budget.max_updates=8"]
        to_object(compose(overrides + budget + ["eval=none", "wandb.enabled=false", "progress=false",
                                                 f"output_root={tmp_path / name}"]))
