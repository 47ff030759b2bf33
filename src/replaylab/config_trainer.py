"""The trainer's structured config (`trainer.*`): objective, optimizer, batch shape, cadences and the
process layout; one dataclass, every field with a help text, its ranges and choices checked in
`__post_init__` (re-exported by `replaylab.config`, whose other groups it sits beside)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from replaylab.config_fields import check, check_choice, knob


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
    dist_timeout_s: float = knob(1800.0, "seconds a rank waits in a collective before the job fails (the process group's "
                                         "timeout; distributed runs only). Rank 0 evaluates alone while the other ranks "
                                         "wait at a barrier: set it above the longest evaluation (math8 at a 16k budget on "
                                         "one GPU can take longer than the default 30 minutes). Not in the config hash")
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
        check(math.isfinite(self.dist_timeout_s) and self.dist_timeout_s > 0, p + "dist_timeout_s",
              f"must be a positive number of seconds, got {self.dist_timeout_s}")
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
