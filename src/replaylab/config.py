"""Structured configs: one dataclass per Hydra group, every field with a help text.

The YAML files under `conf/` pick values; these dataclasses fix the keys and types (Hydra rejects a
mistyped key or a wrongly typed value while composing) and their `__post_init__` checks ranges and
choices, so a bad override fails in seconds with the key's full name, before any model loads.
Strategy configs live beside their strategies (`replaylab.replay.*`) and register themselves.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from replaylab.config_checks import check_run
from replaylab.config_fields import ConfigError, check, check_choice, knob
from replaylab.config_trainer import TrainerConfig
from replaylab.objectives import OBJECTIVES
from replaylab.models.tiny_spec import TinyModelSize, TinyWorldConfig


@dataclass
class ModelConfig:
    """The policy (student) model."""

    name_or_path: str = knob("tiny://student", "hub id, local directory, or tiny://student|teacher (built and cached locally)")
    revision: str | None = knob(None, "hub revision (commit) to pin; None = default branch")
    gguf_file: str | None = knob(None, "load weights from this GGUF file inside name_or_path (needs the `gguf` package)")
    dtype: str = knob("float32", "parameter dtype: float32 | bfloat16 | float16 (a lower one steps through float32 master weights)")
    attn_implementation: str | None = knob(None, "transformers attention backend (eager | sdpa | flash_attention_2); None = default")
    gradient_checkpointing: bool = knob(False, "recompute activations in backward to save memory (large models)")

    def __post_init__(self) -> None:
        check_choice(self.dtype, "model.dtype", ["float32", "bfloat16", "float16"])


@dataclass
class TeacherConfig:
    """The frozen teacher that scores every student token (OPD)."""

    kind: str = knob("local", "local (transformers, same process) | server (vLLM OpenAI-compatible prompt log-probs) | none")
    name_or_path: str = knob("tiny://teacher", "hub id, local directory or tiny://teacher")
    revision: str | None = knob(None, "hub revision to pin")
    dtype: str = knob("float32", "teacher dtype: float32 | bfloat16 | float16")
    server_url: str | None = knob(None, "base URL of the vLLM server when kind=server, e.g. http://host:8000/v1")
    micro_batch: int = knob(256, "sequences per teacher forward pass")

    def __post_init__(self) -> None:
        check_choice(self.kind, "teacher.kind", ["local", "server", "none"])
        check_choice(self.dtype, "teacher.dtype", ["float32", "bfloat16", "float16"])
        check(self.micro_batch > 0, "teacher.micro_batch", f"must be positive, got {self.micro_batch}")
        check(self.kind != "server" or bool(self.server_url), "teacher.server_url", "required when teacher.kind=server")


@dataclass
class DataConfig:
    """The training prompts."""

    name: str = knob("tiny_arith", "tiny_arith | tiny_long (generated: tiny8's training kinds | tinylong's) | math_train | "
                                   "gsm8k_train | aime_1983_2023 (jsonl under data_root)")
    data_root: str | None = knob(None, "directory of the benchmark/training jsonl files; None = $REPLAYLAB_DATA_ROOT or ../shared/data/math")
    size: int = knob(4096, "tiny_arith / tiny_long: number of distinct training problems; others: a fixed sample by id hash (0 = all)")
    seed: int = knob(1, "tiny_arith / tiny_long: seed of the generated problem set")
    instruction: str = knob("", "text appended to each question in the user turn (real models: ask for \\boxed{})")
    enable_thinking: bool = knob(False, "passed to the chat template (Qwen3 thinking mode)")

    def __post_init__(self) -> None:
        check_choice(self.name, "data.name", ["tiny_arith", "tiny_long", "math_train", "gsm8k_train", "aime_1983_2023"])
        check(self.size >= 0, "data.size", f"must be >= 0, got {self.size}")


@dataclass
class BudgetConfig:
    """Response and run budgets; a sweep matches these across strategies."""

    name: str = knob("tiny", "label of the response budget in tables (e.g. 16k, 32k, tiny_short)")
    max_response_tokens: int = knob(48, "maximum new tokens per rollout (longer responses are truncated)")
    max_updates: int = knob(400, "optimization budget: stop after this many optimizer updates")
    max_trajectories: int = knob(0, "trajectory budget: stop once this many trajectories were generated, by the current or the initial policy (0 = no limit)")
    max_compute: float = knob(0.0, "compute budget in estimated FLOPs (2N per token forward, 6N forward+backward; "
                                   "replaylab.training.compute): stop at the first iteration boundary where the ledger's "
                                   "flops_total (generation, teacher scoring, training) reaches it, e.g. 1.0e15 (0 = no limit)")

    def __post_init__(self) -> None:
        check(self.max_response_tokens > 0, "budget.max_response_tokens", f"must be a positive number of tokens, got {self.max_response_tokens}")
        check(self.max_updates > 0, "budget.max_updates", f"must be positive, got {self.max_updates}")
        check(self.max_trajectories >= 0, "budget.max_trajectories", f"must be >= 0, got {self.max_trajectories}")
        check(math.isfinite(self.max_compute) and self.max_compute >= 0, "budget.max_compute",
              f"must be a finite number of FLOPs >= 0, got {self.max_compute}")


@dataclass
class RolloutConfig:
    """The engine and decoding used for training rollouts."""

    engine: str = knob("fast", "fast (lean decoding loop for Qwen3/Qwen2/Llama, CPU/GPU, the default) | hf "
                       "(transformers generate, any causal LM: the reference) | vllm (GPU, optional extra)")
    temperature: float = knob(1.0, "sampling temperature for rollouts (log-probs use the same temperature)")
    top_p: float = knob(1.0, "nucleus sampling threshold")
    top_k: int = knob(0, "top-k sampling (0 = off)")
    micro_batch: int = knob(256, "sequences per decoding batch (fast, hf) and per scoring pass")
    gpu_memory_utilization: float = knob(0.4, "vllm: fraction of GPU memory for the engine (colocated with training)")
    tensor_parallel_size: int = knob(1, "vllm: tensor parallel degree")
    enforce_eager: bool = knob(False, "vllm: disable CUDA graphs (faster start, slower decode)")
    compile: bool = knob(False, "fast: torch.compile the one-token decode step (inductor, needs a C++ compiler; rollout/compiled.py): 1.2-1.5x faster CPU decoding, 7-22 s to compile per process")

    def __post_init__(self) -> None:
        check_choice(self.engine, "rollout.engine", ["fast", "hf", "vllm"])
        check(self.temperature > 0, "rollout.temperature", f"must be > 0 for sampling, got {self.temperature}")
        check(0 < self.top_p <= 1, "rollout.top_p", f"must be in (0, 1], got {self.top_p}")
        check(self.top_k >= 0, "rollout.top_k", f"must be >= 0, got {self.top_k}")


@dataclass
class EvalConfig:
    """Periodic and final evaluation."""

    suite: str = knob("tiny8", "benchmark suite: tiny8 | math8 | none (or list benchmarks explicitly)")
    benchmarks: list[str] = knob([], "explicit benchmark names; overrides suite when non-empty")
    data_root: str | None = knob(None, "jsonl data root; None = data.data_root, $REPLAYLAB_DATA_ROOT or ../shared/data/math")
    budget: str = knob("tiny", "label of the evaluation response budget (e.g. 16k, 32k)")
    max_new_tokens: int = knob(64, "maximum new tokens per evaluation response")
    temperature: float = knob(0.0, "0 = greedy; Qwen3 thinking default 0.6")
    top_p: float = knob(1.0, "nucleus threshold (Qwen3 thinking: 0.95)")
    top_k: int = knob(0, "top-k (Qwen3 thinking: 20); 0 = off")
    samples: int = knob(0, "samples per problem for avg@k (0 = each benchmark's default k; greedy forces 1)")
    sampled_k: int = knob(0, "beside the main decoding (greedy by default), also score k samples per problem at "
                             "eval.sampled_temperature, written as sampled_avg@k, sampled_se, sampled_pass@k, ... "
                             "(0 = off). Greedy accuracy moves in jumps as argmaxes flip; avg@k over samples "
                             "measures the policy's distribution, which is what training changes")
    sampled_temperature: float = knob(1.0, "temperature of the sampled evaluation (acts with eval.sampled_k > 0; plain "
                                           "sampling: eval.top_p / eval.top_k shape the main decoding only)")
    max_problems: int = knob(0, "evaluate N problems per benchmark (0 = all), a fixed sample by id hash (runner.problem_subset)")
    instruction: str = knob("", "instruction appended to each question (real models: 'Please reason step by step, and put your final answer within \\boxed{}.')")
    enable_thinking: bool = knob(False, "Qwen3 thinking mode in the chat template")
    at_start: bool = knob(True, "evaluate the initial policy before training")
    tail: int = knob(1, "evaluations that end the run, eval.tail_every updates apart, the last at budget.max_updates "
                        "(besides trainer.eval_every's); rows carry it as eval_tail, and tables, paired tables and claims read "
                        "each run's final value as the mean over its last eval.tail evaluations, which averages out the "
                        "scatter of single late iterates (greedy accuracy of one checkpoint moves by several points "
                        "between neighbouring updates). 1 = the final evaluation only")
    tail_every: int = knob(0, "updates between the tail evaluations (needs eval.tail > 1)")
    grader_workers: int = knob(2, "grading worker processes")
    grader_timeout: int = knob(2, "math-verify per-item timeout (whole seconds)")
    checkpoint: str | None = knob(None, "evaluate.py: a run directory (its latest checkpoint) or a checkpoint file to load into model before evaluating")
    probe_size: int = knob(64, "initial-policy rollouts in the fixed probe set measured at every evaluation "
                               "(probe_student_logprob, probe_reverse_kl; replaylab.training.probe); 0 = off")
    probe_seed: int = knob(0, "seed of the probe's prompts and rollouts: the same set for every strategy and data order")

    def __post_init__(self) -> None:
        check(self.max_new_tokens > 0, "eval.max_new_tokens", f"must be positive, got {self.max_new_tokens}")
        check(self.temperature >= 0, "eval.temperature", f"must be >= 0, got {self.temperature}")
        check(self.samples >= 0, "eval.samples", f"must be >= 0, got {self.samples}")
        check(self.grader_workers >= 1, "eval.grader_workers", f"must be >= 1, got {self.grader_workers}")
        check(self.grader_timeout >= 1, "eval.grader_timeout", f"must be >= 1 whole second, got {self.grader_timeout}")
        check(self.probe_size >= 0, "eval.probe_size", f"must be >= 0, got {self.probe_size}")
        check(self.sampled_k >= 0, "eval.sampled_k", f"must be >= 0, got {self.sampled_k}")
        check(self.sampled_temperature > 0, "eval.sampled_temperature", f"must be > 0 (at 0 it is the greedy evaluation), got {self.sampled_temperature}")


@dataclass
class WandbConfig:
    """The wandb mirror of the result rows (local rows are the source of truth)."""

    enabled: bool = knob(True, "mirror rows and the resolved config to wandb")
    mode: str | None = knob(None, "online | offline | disabled; None = $WANDB_MODE, else offline")
    project: str | None = knob(None, "wandb project (default: replaylab-<experiment>, one project per experiment)")
    entity: str | None = knob(None, "wandb entity (team)")
    group: str | None = knob(None, "wandb group (default: the strategy label, so grouped curves compare strategies)")


@dataclass
class Config:
    """A replaylab run. Its resolved form, hashed, names the run directory."""

    trainer: TrainerConfig = knob(MISSING, "group trainer: objective, optimizer, batch shape, cadences (opd | opd_sampled | grpo)")
    strategy: Any = knob(MISSING, "group strategy: the replay strategy and its own fields (replaylab.replay.*)")
    model: ModelConfig = knob(MISSING, "group model: the policy (student)")
    teacher: TeacherConfig = knob(MISSING, "group teacher: the frozen OPD teacher")
    data: DataConfig = knob(MISSING, "group data: the training prompts")
    budget: BudgetConfig = knob(MISSING, "group budget: response budget and run budgets (updates, trajectories, compute)")
    eval: EvalConfig = knob(MISSING, "group eval: benchmark suite and decoding for evaluation")
    rollout: RolloutConfig = knob(MISSING, "group rollout: engine and decoding of training rollouts")
    tiny: TinyWorldConfig = field(default_factory=TinyWorldConfig, metadata={"help": "how the tiny world is built (its hash names the cache entry)"})
    wandb: WandbConfig = field(default_factory=WandbConfig, metadata={"help": "the wandb mirror of the result rows"})
    order: int = knob(0, "data order: a reproducible permutation of the training prompts (-1 = file order); a plain key, so "
                         "`order=0,1,2` sweeps work")
    experiment: str = knob("default", "experiment name: groups runs in results and tables")
    output_root: str = knob("runs", "root directory of run directories (each named by its config hash)")
    progress: bool = knob(True, "show a progress bar")
    run_lock_wait: float = knob(0.0, "seconds to wait when another process holds this run's directory (0 = refuse at once)")
    branch: bool | None = knob(None, "start a run whose first updates are current's from the checkpoint of a sibling run (training/branch.py); None = yes, unless distributed")
    share: bool | None = knob(None, "read the initial policy's evaluation and rollouts a sibling run wrote (training/shared.py); None = yes, unless distributed")
    resume_rows: str = knob("verify", "verify | rebuild: on resume, rows.jsonl must hold exactly the checkpoint's rows (else the "
                                      "run stops, naming the line), or is rewritten from the copy the checkpoint keeps")

    def __post_init__(self) -> None:
        check(self.order >= -1, "order", f"must be >= -1, got {self.order}")
        check(bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]*", self.experiment)) and ".." not in self.experiment,
              "experiment", f"must be a plain name (letters, digits, _ . -), got {self.experiment!r}: it names a directory "
              "under output_root")
        check(self.run_lock_wait >= 0, "run_lock_wait", f"must be >= 0, got {self.run_lock_wait}")
        check_choice(self.resume_rows, "resume_rows", ["verify", "rebuild"])
        check_run(self)


def objective_family(name: str) -> str:
    """`trainer.kind` is this resolver of `trainer.objective` (unknown names fail in config_checks)."""
    return OBJECTIVES[name].family if name in OBJECTIVES else f"<unknown objective {name}>"


OmegaConf.register_new_resolver("objective_family", objective_family, replace=True)


def register_configs() -> None:
    """Register every schema with Hydra's ConfigStore (YAML files extend these)."""
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for group, node in [("trainer", TrainerConfig), ("model", ModelConfig), ("teacher", TeacherConfig), ("data", DataConfig),
                        ("budget", BudgetConfig), ("eval", EvalConfig), ("rollout", RolloutConfig)]:
        cs.store(group=f"schema/{group}", name="base", node=node)
    from replaylab.replay import STRATEGIES  # registers the strategy modules

    for name, cls in STRATEGIES.items():
        cs.store(group="schema/strategy", name=name, node=cls.Config)


def to_object(cfg: DictConfig) -> Config:
    """Instantiate the dataclasses (running their checks); errors name the offending key."""
    try:
        return OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except Exception as e:  # omegaconf validation errors carry full_key
        raise ConfigError(str(e)) from e


__all__ = ["Config", "ConfigError", "TinyModelSize", "TinyWorldConfig", "check", "check_choice", "knob", "register_configs", "to_object"]
