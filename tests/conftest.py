"""Shared fixtures: a micro tiny world (built once per session in a private cache) and a helper
that runs `replaylab.train` in-process through Hydra's compose API (the real call path)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# A micro world: same code path as the default tiny world, ~10 s to build instead of minutes.
MICRO_WORLD = [
    "tiny.teacher_steps=60",
    "tiny.student_step=30",
    "tiny.teacher.hidden_size=64",
    "tiny.teacher.intermediate_size=128",
]
# Small, fast runs: few prompts, few updates, a 5-problem-per-set eval, no wandb, no progress bars.
FAST_RUN = [
    "trainer.prompts_per_iteration=8",
    "budget.max_updates=3",
    "budget.max_response_tokens=24",
    "eval.max_problems=4",
    "eval.max_new_tokens=24",
    "trainer.eval_every=0",
    "wandb.enabled=false",
    "progress=false",
    "rollout.micro_batch=64",
    # One torch thread: the grader's worker processes and pytest share the 2 cores; two threads
    # each oversubscribe them and run ~10x slower (measured on the 2-core CI machine).
    "trainer.threads=1",
]
# FAST_RUN's settings for the benchmark evaluation, which a run with `eval=none` (no benchmark) must not set.
FAST_EVAL = ("eval.max_problems=4", "eval.max_new_tokens=24")


def fast_run(overrides: list[str]) -> list[str]:
    """FAST_RUN for a run with these overrides: without its benchmark settings when they choose eval=none."""
    return [o for o in FAST_RUN if "eval=none" not in overrides or o not in FAST_EVAL]


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Tiny worlds built by tests go to a private cache, never the user's."""
    old = os.environ.get("REPLAYLAB_CACHE")
    os.environ["REPLAYLAB_CACHE"] = str(tmp_path_factory.mktemp("replaylab-cache"))
    os.environ.setdefault("WANDB_MODE", "offline")
    yield
    if old is None:
        os.environ.pop("REPLAYLAB_CACHE", None)
    else:
        os.environ["REPLAYLAB_CACHE"] = old


def compose(overrides: list[str], return_hydra_config: bool = False):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from replaylab.paths import conf_dir
    from replaylab.cli.train import register_configs  # noqa: F401  (registers schemas on import)

    with initialize_config_dir(config_dir=conf_dir(), version_base=None):
        return hydra_compose(config_name="config", overrides=overrides, return_hydra_config=return_hydra_config)


@pytest.fixture
def run_train(tmp_path):
    """run_train(overrides) -> (summary, run_dir): a real training run on the micro world."""
    from replaylab.training.runs import run_dir
    from replaylab.cli.train import train

    def _config(overrides: list[str], output_root: Path | None = None):
        return compose(MICRO_WORLD + fast_run(overrides) + [f"output_root={output_root or tmp_path / 'runs'}"] + overrides)

    def _run(overrides: list[str], output_root: Path | None = None):
        cfg = _config(overrides, output_root)
        return train(cfg), run_dir(cfg)

    _run.config = _config
    _run.run_dir = lambda overrides, output_root=None: run_dir(_config(overrides, output_root))
    return _run


def load_rows(run_dir: Path) -> list[dict]:
    from replaylab.results.rows import read_rows

    return read_rows(run_dir / "rows.jsonl")


def comparable(rows: list[dict]) -> list[dict]:
    """Rows without their wall-clock fields (the tokens_per_s rows, the ledger's seconds): what two runs
    of one config and seed must write identically, interrupted, resumed or branched."""
    return [{k: v for k, v in r.items() if not k.startswith(("ledger_wall_time", "ledger_seconds_"))}
            for r in rows if r["metric"] != "tokens_per_s"]


@pytest.fixture(autouse=True)
def _matmul_kernel_restored():
    """The matmul kernel is process-wide (`models.kernels.use`, set by every trainer build from
    `trainer.matmul`): a test that selects one must not hand it to the next test."""
    from replaylab.models import kernels

    before = kernels.active()
    yield
    kernels._active = before


@pytest.fixture(params=["onednn", "blas"])
def matmul_kernel(request):
    """Runs a test under each matmul kernel (models/kernels.py); skips oneDNN where torch lacks it."""
    from replaylab.models import kernels

    if request.param == "onednn" and not kernels.onednn_available():
        pytest.skip("this torch build has no oneDNN linear kernel")
    kernels.use(request.param)
    return request.param


def one_gold_changed(get_benchmark):
    """`get_benchmark` with the first gold of tiny8/add2 changed: a benchmark file edited between two runs."""
    import dataclasses

    def changed(name, data_root=None):
        bench = get_benchmark(name, data_root)
        if name != "tiny8/add2":
            return bench
        return dataclasses.replace(bench, items=(dataclasses.replace(bench.items[0], answer="-1"), *bench.items[1:]))

    return changed
