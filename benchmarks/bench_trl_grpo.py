"""Time per GRPO step: replaylab's trainer vs TRL's GRPOTrainer (the baseline), in one process.

Same tiny-world student, same prompts, batch (8 prompts x 8 samples), response budget, sampling
temperature, learning rate and reward (replaylab's grader on the boxed answer); one optimizer step per
generation batch, no KL, DAPO token-mean loss, gradient checkpointing off. Prints seconds per step for
both (first steps dropped as warm-up) and the ratio ours / TRL.

    pip install -e '.[bench]'; python benchmarks/bench_trl_grpo.py [--steps 12] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

PROMPTS, GROUP, MAX_TOKENS, TEMPERATURE, LR = 8, 8, 48, 0.7, 1e-4


def ours(steps: int, root: Path) -> list[float]:
    from conftest import compose

    from replaylab.training.build import build_components
    from replaylab.config import to_object
    from replaylab.results.rows import RowWriter
    from replaylab.training.runs import run_dir
    from replaylab.training.trainer import Trainer

    cfg = compose(["trainer=grpo", "teacher=none", f"trainer.prompts_per_iteration={PROMPTS}",
                   f"trainer.samples_per_prompt={GROUP}", f"budget.max_response_tokens={MAX_TOKENS}",
                   f"rollout.temperature={TEMPERATURE}", f"trainer.lr={LR}", "trainer.warmup_updates=0",
                   "trainer.stat_groups=1", "eval.suite=none", "wandb.enabled=false", "progress=false",
                   f"output_root={root}"])
    obj = to_object(cfg)
    comp = build_components(obj)
    path = run_dir(cfg)
    path.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(obj, comp, path, RowWriter(path / "rows.jsonl", {}))
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        trainer.run_iteration()
        times.append(time.perf_counter() - t0)
    comp.grader.close()
    return times


def trl(steps: int, root: Path) -> list[float]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from replaylab.grading import Grader
    from replaylab.models.loading import resolve_path
    from replaylab.tasks.tiny8 import training_problems

    path = resolve_path("tiny://student")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    problems = training_problems(PROMPTS * (steps + 2), seed=1)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": p.question}], "answer": p.answer} for p in problems])
    grader = Grader(num_workers=2)

    def reward(completions, answer, **_):
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return [float(r.correct) for r in grader.grade(list(zip(texts, answer)))]

    class Clock(TrainerCallback):
        def __init__(self):
            self.times, self.t0 = [], None

        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self.t0)

    clock = Clock()
    args = GRPOConfig(
        output_dir=str(root / "trl"), use_cpu=True, use_vllm=False, bf16=False, gradient_checkpointing=False,
        per_device_train_batch_size=PROMPTS * GROUP, num_generations=GROUP, max_completion_length=MAX_TOKENS,
        temperature=TEMPERATURE, top_p=1.0, top_k=0, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0,
        beta=0.0, loss_type="dapo", max_steps=steps, logging_steps=10**6, save_strategy="no", report_to="none",
        disable_tqdm=True, dataloader_num_workers=0, seed=0,
    )
    GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=reward, args=args, train_dataset=data,
                callbacks=[clock]).train()
    grader.close()
    return clock.times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("WANDB_MODE", "disabled")
    with tempfile.TemporaryDirectory() as tmp:
        ours_t = ours(args.steps, Path(tmp))
        trl_t = trl(args.steps, Path(tmp))
    a = statistics.mean(ours_t[args.warmup:])
    b = statistics.mean(trl_t[args.warmup:])
    print(f"GRPO step, {PROMPTS} prompts x {GROUP} samples, <= {MAX_TOKENS} tokens, {args.threads} threads")
    print(f"  replaylab: {a:.3f} s/step (median {statistics.median(ours_t[args.warmup:]):.3f})")
    print(f"  TRL GRPOTrainer (baseline): {b:.3f} s/step (median {statistics.median(trl_t[args.warmup:]):.3f})")
    print(f"  ratio replaylab / TRL: {a / b:.2f}x")


if __name__ == "__main__":
    main()
