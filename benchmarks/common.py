"""What the TRL anchors share: replaylab's real trainer timed per iteration, the matched prompts in
replaylab's data order, and a TRL callback that times optimizer steps and reads the logged lengths."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

# No evaluation, no probe, no checkpoint (the side times iterations only). eval=none resets what an eval group
# set; a sweep's own evaluation settings (tiny_ropd: the response budget as eval length, five tail evaluations)
# are reset to the schema defaults here, as a setting of an evaluation that never runs is a config error.
QUIET = ["eval=none", "eval.probe_size=0", "eval.max_new_tokens=64", "eval.tail=1", "eval.tail_every=0",
         "wandb.enabled=false", "progress=false", "trainer.warmup_updates=0", "trainer.eval_every=0",
         "trainer.checkpoint_every=0", "trainer.keep_checkpoints=1"]  # (tiny_ropd keeps 2; one is written here)


def config(overrides: list[str]):
    """The composed (DictConfig) and instantiated (Config) run config, through tests/conftest.py's compose."""
    from conftest import compose

    from replaylab.config import to_object

    cfg = compose(overrides)
    return cfg, to_object(cfg)


def time_replaylab(overrides: list[str], steps: int, root: Path) -> tuple[list[float], list[int], dict]:
    """Build the real `Trainer` and time `run_iteration()` `steps` times: (seconds, tokens generated, config facts)."""
    from replaylab.results.rows import RowWriter
    from replaylab.training.build import build_components
    from replaylab.training.runs import run_dir
    from replaylab.training.trainer import Trainer

    cfg, obj = config(overrides + QUIET + [f"output_root={root}"])
    comp = build_components(obj)
    path = run_dir(cfg)
    path.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(obj, comp, path, RowWriter(path / "rows.jsonl", {}))
    seconds, tokens = [], []
    for _ in range(steps):
        before = trainer.ledger.tokens_generated
        t0 = time.perf_counter()
        trainer.run_iteration()
        seconds.append(time.perf_counter() - t0)
        tokens.append(trainer.ledger.tokens_generated - before)
    comp.grader.close()
    facts = {"rollout_engine": obj.rollout.engine, "objective": obj.trainer.objective, "updates": trainer.update,
             "phase_seconds": {k: round(v, 3) for k, v in trainer.ledger.seconds.items()}}  # all steps, warm-up too
    return seconds, tokens, facts


def matched_prompts(obj, n: int):
    """The first `n` prompts of replaylab's walk over its training set (data order `obj.order`), rendered
    exactly as the trainer renders them: strategy=current takes them in this order, P per iteration."""
    from replaylab.models.loading import load_tokenizer, resolve_path
    from replaylab.tasks.datasets import data_order, render_prompts, training_rows
    from replaylab.tasks.stream import PromptStream

    d = obj.data
    tokenizer = load_tokenizer(resolve_path(obj.model.name_or_path, obj.tiny, progress=False))
    prompts = render_prompts(training_rows(d.name, d.size, d.seed, d.data_root), tokenizer, d.instruction,
                             d.enable_thinking)
    return PromptStream(prompts, data_order(len(prompts), obj.order)).take(n), tokenizer


def prompt_dataset(prompts, tokenizer):
    """A `datasets.Dataset` of the rendered prompt texts (TRL's standard, non-conversational format), checking
    that TRL's tokenization of them (`processing_class(text=...)`) gives replaylab's token ids."""
    from datasets import Dataset

    ids = tokenizer([p.text for p in prompts])["input_ids"]
    bad = [p.uid for p, i in zip(prompts, ids) if tuple(i) != p.token_ids]
    if bad:
        raise RuntimeError(f"TRL would tokenize {len(bad)} prompts differently from replaylab, e.g. {bad[0]}")
    return Dataset.from_list([{"prompt": p.text, "answer": p.answer} for p in prompts])


def trl_clock(completions_per_step: int):
    """A TrainerCallback timing each optimizer step (on_step_begin -> on_step_end: generation, scoring,
    forward, backward, optimizer) and reading the generated tokens from the logged `completions/mean_length`
    (TRL logs it per generation batch; with logging_steps=1 that is once per step, after on_step_end)."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def __init__(self):
            self.seconds, self.tokens, self.t0 = [], [], None
            self.logged_step_time = []  # TRL's own per-step timer (training_step only), a cross-check

        def on_step_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.t0)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs:
                self.tokens.append(round(logs["completions/mean_length"] * completions_per_step))
            if logs and "step_time" in logs:
                self.logged_step_time.append(logs["step_time"])

    return Clock()


def trl_common_args(root: Path, steps: int) -> dict:
    """TrainingArguments both TRL anchors share: CPU float32, no checkpointing, no saving, a log line
    per step (the token count), constant learning rate."""
    return {"output_dir": str(root / "trl"), "use_cpu": True, "bf16": False, "gradient_checkpointing": False,
            "lr_scheduler_type": "constant", "warmup_steps": 0, "max_steps": steps, "logging_steps": 1,
            "save_strategy": "no", "report_to": "none", "disable_tqdm": True, "dataloader_num_workers": 0,
            "shuffle_dataset": False, "seed": 0}


def replaylab_side(overrides: list[str], args) -> dict:
    """The replaylab side of a TRL anchor: the real trainer, `args.steps` iterations, `args.warmup` dropped."""
    import alternate

    with tempfile.TemporaryDirectory() as tmp:
        seconds, tokens, facts = time_replaylab(overrides, args.steps, Path(tmp))
    return alternate.measured(seconds, tokens, args.warmup, **facts)


def recipe_side(recipes: dict[str, list[str]], key: str, value: str):
    """A side of an A/B benchmark on the real trainer: `args.recipe`'s overrides with `key=value` and `args.threads`."""
    def run(args) -> dict:
        overrides = recipes[args.recipe] + [f"{key}={value}", f"trainer.threads={args.threads}"]
        return {**replaylab_side(overrides, args), "recipe": args.recipe}
    return run


def trl_result(clock, args, **extra) -> dict:
    """The TRL side's result from its clock (every timed step must have logged its completion lengths)."""
    import alternate

    if len(clock.tokens) != len(clock.seconds):
        raise RuntimeError(f"{len(clock.seconds)} steps timed but {len(clock.tokens)} completion lengths logged")
    return alternate.measured(clock.seconds, clock.tokens, args.warmup,
                              trl_logged_step_time=clock.logged_step_time[args.warmup:], **extra)


def add_step_arguments(p) -> None:
    """The command-line options both TRL anchors take."""
    p.add_argument("--steps", type=int, default=8, help="optimizer steps per run, warm-up included")
    p.add_argument("--warmup", type=int, default=2, help="steps dropped at the start of each run")
    p.add_argument("--rollout", default="fast", choices=["fast", "hf"], help="replaylab's rollout engine")
    p.add_argument("--compile", action="store_true", help="replaylab with rollout.compile=true (rollout=fast only; "
                   "the compiling falls in the warm-up steps)")
    p.add_argument("--forward", default="auto", choices=["auto", "pruned", "module"],
                   help="replaylab's trainer.forward (pruned: the lean forward's last layer on the read positions only)")
