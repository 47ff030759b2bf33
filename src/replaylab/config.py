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
class TrainerConfig:
    """The common trainer: objective, optimizer, batch shape and cadences."""

    objective: str = knob("opd_full_rkl", "objectives registry key (replaylab.objectives): opd_full_rkl | opd_sampled | grpo")
    kind: str = knob("${objective_family:${.objective}}", "the objective's family, derived from trainer.objective: "
                                                          "opd (teacher-scored) | grpo (verifiable reward); do not set")
    lr: float = knob(1e-3, "peak learning rate (AdamW)")
    betas: list[float] = knob([0.9, 0.98], "AdamW betas")
    eps: float = knob(1e-8, "AdamW epsilon")
    weight_decay: float = knob(0.0, "AdamW weight decay")
    warmup_updates: int = knob(10, "linear warm-up updates (update u of the warm-up steps at lr x (u + 1) / warm-up), then lr_schedule")
    warmup_fraction: float = knob(0.0, "warm-up as a fraction of budget.max_updates, rounded up (TRL/HF warmup_ratio; RePO: 0.1); "
                                       "> 0 replaces warmup_updates, which must then be 0")
    lr_schedule: str = knob("constant", "after warm-up: constant | cosine (half a cosine to 0 at budget.max_updates, HF's)")
    grad_clip: float = knob(1.0, "global gradient-norm clip (0 = off)")
    prompts_per_iteration: int = knob(64, "distinct prompts (queries) per rollout iteration")
    samples_per_prompt: int = knob(1, "rollouts per prompt (the GRPO group size)")
    minibatches: int = knob(1, "optimizer updates per pass over an iteration's batch (the batch is split into this many)")
    resample_period: int = knob(1, "passes over the same rollouts before fresh sampling (updates between fresh rollouts = minibatches x this)")
    stat_groups: int = knob(4, "gradient groups per update, for strategies that read gradient statistics (ropd); others take one backward per update")
    stat_groups_for_all: bool = knob(False, "every strategy takes stat_groups backward passes per update: ropd then trains bitwise as current until it switches")
    micro_batch: int = knob(0, "sequences per loss forward/backward: a gradient group larger than this is cut into "
                               "chunks of similar length whose gradients accumulate (each chunk pads only to its own "
                               "longest row; the same gradient up to float summation order); 0 = one pass per group")
    forward: str = knob("auto", "how loss, scoring and probe forwards run: auto (models/lean.py's packed forward for a plain float32 "
                                "Qwen3/Qwen2/Llama module, else the module; without autograd its last layer's o_proj and MLP "
                                "run only where logits are read: no number changes) | pruned (auto with the loss forward "
                                "pruned too: the same logits, that layer's weight gradients summed over fewer rows, so not "
                                "auto's run bit for bit; an error if the policy cannot take the lean forward) | module "
                                "(always the transformers module: the reference path)")
    sketch_dim: int = knob(0, "dimension of the random gradient sketch handed to strategies that read it (ropd statistic=sketch); 0 = norms only")
    aggregation: str = knob("dapo", "loss aggregation: grpo (per-sequence mean) | dapo (global token mean) | dr_grpo (constant normaliser; GRPO objective only)")
    advantage: str = knob("zscore", "GRPO group advantage: zscore | center (grpo objective only)")
    advantage_std: str = knob("population", "zscore's group standard deviation: population (ddof 0: a z-scored group has unit "
                                            "RMS) | sample (ddof 1, Bessel's correction: TRL's and verl's torch.std)")
    overlong_cache: int = knob(0, "DAPO overlong reward shaping: responses longer than budget.max_response_tokens - this many "
                                  "tokens get a penalty growing linearly to -overlong_factor at the limit (0 = off; RLEP 512 of 3072)")
    overlong_factor: float = knob(1.0, "the overlong penalty at the response limit (DAPO, RLEP: 1.0); needs overlong_cache > 0")
    mask_truncated: bool = knob(False, "leave completions that hit budget.max_response_tokens out of the loss (their rewards still "
                                       "enter their group's advantages; open-instruct mask_truncated_completions, DAPO overlong filtering)")
    dynamic_sampling: bool = knob(False, "DAPO dynamic sampling: drop fresh groups without reward variance and sample more prompts "
                                         "until the iteration holds as many informative groups as it planned; the extra rollouts "
                                         "are counted in the ledger (dynamic_rounds, filtered_groups, filtered_trajectories)")
    dynamic_sampling_max_rounds: int = knob(10, "generation rounds dynamic sampling may take in one iteration (verl max_num_gen_batches) "
                                                "before the run stops with an error: the data is then too easy or too hard; 0 = unlimited")
    clip_low: float = knob(0.2, "PPO clip below 1 (objectives with a ratio: opd_sampled, grpo)")
    clip_high: float = knob(0.2, "PPO clip above 1 (clip-higher: 0.28)")
    dual_clip: float | None = knob(None, "dual-clip constant for negative advantages (DAPO recipe: 10); None = off")
    kl_coef: float = knob(0.0, "GRPO: coefficient of the k3 KL to the initial policy (0 = off, no reference model)")
    opd_coef: float = knob(1.0, "opd_sampled: scale of the per-token advantage log p_teacher - log p_student")
    is_cap: float | None = knob(None, "cap of truncated behaviour importance weights on replayed samples (opd_sampled, grpo; strategies that replay); None = no correction")
    eval_every: int = knob(50, "updates between periodic evaluations (0 = only at start and end)")
    checkpoint_every: int = knob(50, "updates between checkpoints (0 = only at the end)")
    keep_checkpoints: int = knob(1, "checkpoints kept on disk (the last N)")
    seed: int = knob(0, "seed of sampling, minibatch order and strategy randomness")
    device: str = knob("auto", "auto | cpu | cuda")
    distributed: str = knob("none", "none | ddp | fsdp2: how the policy is wrapped under torchrun / submitit tasks (each rank takes its slice of every batch)")
    threads: int = knob(0, "torch CPU threads (0 = torch default)")
    matmul: str = knob("auto", "float32 CPU matmuls of the lean forward and decoder (models/kernels.py): auto (blas on Intel, "
                               "onednn elsewhere if torch has it) | onednn (2-2.4x MKL on AMD) | blas (torch's BLAS: MKL on x86)")

    def __post_init__(self) -> None:
        p = "trainer."
        check_choice(self.aggregation, p + "aggregation", ["grpo", "dapo", "dr_grpo"])
        check_choice(self.advantage, p + "advantage", ["zscore", "center"])
        check_choice(self.forward, p + "forward", ["auto", "pruned", "module"])
        check_choice(self.matmul, p + "matmul", ["auto", "onednn", "blas"])
        check_choice(self.advantage_std, p + "advantage_std", ["population", "sample"])
        check_choice(self.lr_schedule, p + "lr_schedule", ["constant", "cosine"])
        check(0 <= self.warmup_fraction < 1, p + "warmup_fraction", f"must be in [0, 1), got {self.warmup_fraction}")
        check(not (self.warmup_fraction > 0 and self.warmup_updates), p + "warmup_updates",
              f"{self.warmup_updates} conflicts with trainer.warmup_fraction={self.warmup_fraction}: set one, the other to 0")
        check(self.overlong_cache >= 0, p + "overlong_cache", f"must be >= 0, got {self.overlong_cache}")
        check(math.isfinite(self.overlong_factor) and self.overlong_factor > 0, p + "overlong_factor",
              f"must be a finite number > 0, got {self.overlong_factor}")
        check(self.dynamic_sampling_max_rounds >= 0, p + "dynamic_sampling_max_rounds",
              f"must be >= 0, got {self.dynamic_sampling_max_rounds}")
        check_choice(self.device, p + "device", ["auto", "cpu", "cuda"])
        check_choice(self.distributed, p + "distributed", ["none", "ddp", "fsdp2"])
        check(math.isfinite(self.lr) and self.lr > 0, p + "lr", f"must be a positive finite number, got {self.lr}")
        for key in ("eps", "weight_decay", "grad_clip", "clip_low", "clip_high", "kl_coef", "opd_coef"):
            value = getattr(self, key)
            check(math.isfinite(value) and value >= 0, p + key, f"must be a finite number >= 0, got {value}")
        check(self.clip_low < 1, p + "clip_low", f"must be < 1 (the ratio's lower bound is 1 - clip_low), got {self.clip_low}")
        check(self.eps > 0, p + "eps", f"must be > 0 (AdamW divides by sqrt(v) + eps), got {self.eps}")
        check(self.dual_clip is None or (math.isfinite(self.dual_clip) and self.dual_clip > 1), p + "dual_clip",
              f"must be None or a finite number > 1 (a bound beyond the clipped ratio), got {self.dual_clip}")
        check(self.is_cap is None or (math.isfinite(self.is_cap) and self.is_cap > 0), p + "is_cap",
              f"must be None or a finite number > 0, got {self.is_cap}")
        check(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), p + "betas", f"need two values in [0, 1), got {self.betas}")
        for key in ("prompts_per_iteration", "samples_per_prompt", "minibatches", "resample_period", "stat_groups"):
            check(getattr(self, key) >= 1, p + key, f"must be >= 1, got {getattr(self, key)}")
        check(self.kind != "grpo" or self.samples_per_prompt >= 2, p + "samples_per_prompt", "GRPO needs groups of at least 2 samples")
        check((self.prompts_per_iteration * self.samples_per_prompt) % self.minibatches == 0, p + "minibatches",
              f"{self.minibatches} does not divide the batch of {self.prompts_per_iteration * self.samples_per_prompt} samples")
        for key in ("eval_every", "checkpoint_every", "warmup_updates", "sketch_dim", "threads", "micro_batch"):
            check(getattr(self, key) >= 0, p + key, f"must be >= 0, got {getattr(self, key)}")
        check(self.keep_checkpoints >= 1, p + "keep_checkpoints", f"must be >= 1, got {self.keep_checkpoints}")

    @property
    def updates_per_iteration(self) -> int:
        return self.minibatches * self.resample_period

    def warmup_for(self, max_updates: int) -> int:
        """Warm-up length in updates: warmup_updates, or warmup_fraction of the run rounded up (as HF)."""
        return math.ceil(self.warmup_fraction * max_updates) if self.warmup_fraction > 0 else self.warmup_updates


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
