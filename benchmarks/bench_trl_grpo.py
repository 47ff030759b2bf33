"""GRPO step time: replaylab's trainer vs TRL's GRPOTrainer (the anchor), each side in its own process.

Matched settings: the tiny-world student (float32, CPU, gradient checkpointing off), the same prompts
in the same order (replaylab's rendered tiny_arith prompts walked in its data order; TRL gets their
texts, unshuffled, and the script checks TRL tokenizes them to the same ids), 8 prompts x 8 samples,
at most 48 new tokens, temperature 0.7 (top-p 1, top-k off), AdamW lr 1e-4 constant (no warm-up),
betas 0.9/0.98, eps 1e-8, no weight decay, gradient-norm clip 1.0, no KL (TRL beta=0, no reference
model), DAPO token-mean loss (TRL loss_type="dapo"), clip 0.2 / 0.2 (TRL epsilon / epsilon_high; inert
at one step per batch, where every ratio is 1),
z-scored group advantages (TRL scale_rewards="group"), one optimizer step per generation batch
(TRL num_iterations=1, steps_per_generation=1), binary reward from replaylab's grader on the decoded
response (special tokens skipped, as replaylab grades). replaylab uses its configured rollout
engine (rollout=fast by default; --rollout hf for the reference engine; --compile for rollout.compile=true).

Side "replaylab" builds the real `Trainer` (tests/conftest.py's compose, trainer=grpo teacher=none) and
times `trainer.run_iteration()`; its tokens are the ledger's `tokens_generated`. Side "trl" times each
GRPOTrainer optimizer step with a callback; its tokens are the logged `completions/mean_length` x 64.
Both count response tokens with the EOS. The first `--warmup` steps of each run are dropped.

Printed: every alternated pair (replaylab then TRL, `--pairs`, default 5) with s/step, tokens and ms per
generated token for both, the ratios replaylab / TRL and their medians. Target: at most 0.5 per generated
token (median of pairs).

    pip install -e '.[bench]'
    python benchmarks/bench_trl_grpo.py [--pairs 5] [--steps 8] [--warmup 2] [--threads 2] [--out grpo.json]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import alternate
import common

PROMPTS, GROUP, MAX_TOKENS, TEMPERATURE, LR = 8, 8, 48, 0.7, 1e-4


def overrides(args: argparse.Namespace) -> list[str]:
    return ["trainer=grpo", "teacher=none", f"rollout.engine={args.rollout}", f"trainer.forward={args.forward}", f"rollout.compile={str(args.compile).lower()}",
            f"trainer.prompts_per_iteration={PROMPTS}",
            f"trainer.samples_per_prompt={GROUP}", f"budget.max_response_tokens={MAX_TOKENS}",
            f"rollout.temperature={TEMPERATURE}", f"trainer.lr={LR}",
            f"trainer.threads={args.threads}"]


def replaylab(args: argparse.Namespace) -> dict:
    return common.replaylab_side(overrides(args), args)


def trl(args: argparse.Namespace) -> dict:
    from trl import GRPOConfig, GRPOTrainer

    from replaylab.grading import Grader
    from replaylab.models.loading import load_causal_lm, resolve_path

    _, obj = common.config(overrides(args))
    prompts, tokenizer = common.matched_prompts(obj, PROMPTS * args.steps)
    data = common.prompt_dataset(prompts, tokenizer)
    model = load_causal_lm(resolve_path(obj.model.name_or_path, obj.tiny, progress=False), obj.model.dtype)
    grader = Grader(num_workers=obj.eval.grader_workers, timeout_seconds=obj.eval.grader_timeout)

    def reward(completions, answer, **_):
        return [1.0 if r.correct else 0.0 for r in grader.grade(list(zip(completions, answer)))]

    t, r = obj.trainer, obj.rollout
    clock = common.trl_clock(PROMPTS * GROUP)
    with tempfile.TemporaryDirectory() as tmp:
        config = GRPOConfig(
            **common.trl_common_args(Path(tmp), args.steps), use_vllm=False,
            per_device_train_batch_size=PROMPTS * GROUP, num_generations=GROUP, steps_per_generation=1,
            num_iterations=1, max_completion_length=MAX_TOKENS, temperature=r.temperature, top_p=r.top_p,
            top_k=r.top_k, learning_rate=t.lr, adam_beta1=t.betas[0], adam_beta2=t.betas[1], adam_epsilon=t.eps,
            weight_decay=t.weight_decay, max_grad_norm=t.grad_clip, beta=t.kl_coef, loss_type=t.aggregation,
            epsilon=t.clip_low, epsilon_high=t.clip_high, scale_rewards="group" if t.advantage == "zscore" else "none",
        )
        GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=reward, args=config, train_dataset=data,
                    callbacks=[clock]).train()
    grader.close()
    return common.trl_result(clock, args, loss_type=config.loss_type)


SIDES = {"replaylab": replaylab, "trl": trl}


def main() -> None:
    p = alternate.parser(__doc__, SIDES)
    common.add_step_arguments(p)
    args = p.parse_args()
    if args.side:
        return alternate.run_side(args, SIDES)
    title = (f"GRPO step: replaylab (rollout={args.rollout}{' compiled' if args.compile else ''}, trainer.forward={args.forward}) vs TRL GRPOTrainer, {PROMPTS} prompts x {GROUP} samples, "
             f"<= {MAX_TOKENS} tokens, {args.threads} threads")
    alternate.save(args.out, [alternate.parent(__file__, args, "replaylab", "trl", title,
                                               target=("ratio_token", "<=", 0.5))])


if __name__ == "__main__":
    main()
