"""OPD step time: replaylab's trainer vs TRL's DistillationTrainer (the anchor), each side in its own process.

TRL's DistillationTrainer (stable API, `from trl import DistillationTrainer`, TRL >= 1.16) is on-policy
distillation: the student samples its own completions every step (the trainer has no off-policy mix:
no `lmbda`), and the loss is the generalized JSD between the student's and the teacher's full
next-token distributions on those tokens, with `beta` choosing the divergence: 0 forward KL, 1 reverse
KL(student || teacher) (trl/trainer/distillation_config.py, `beta`; trl/kernels/chunked_divergence.py,
ChunkedDivergenceFunction). beta=1.0 is therefore replaylab's `opd_full_rkl`: the exact full-vocabulary
reverse KL at every position of the student's own rollouts, averaged over all response tokens of the
batch (TRL divides by the batch's completion-token count, replaylab's dapo aggregation).

Matched to replaylab's default OPD run (conf/trainer/opd.yaml, conf/budget/tiny.yaml): tiny-world
student and frozen tiny teacher (float32, CPU, gradient checkpointing off), the same prompts in the
same order (the rendered tiny_arith prompts walked in replaylab's data order; TRL gets their texts
unshuffled, and the script checks TRL tokenizes them to the same ids), 64 prompts x 1 sample, at most
48 new tokens, the configured rollout temperature (1.0; top-p 1, top-k off), AdamW lr 1e-3 constant
(warm-up 0 on both sides, so every timed step is a full-lr step), betas 0.9/0.98, eps 1e-8, no weight
decay, gradient-norm clip 1.0, one optimizer step per generation batch. replaylab uses its configured
rollout engine (rollout=fast by default; --rollout hf for the reference engine; --compile for
rollout.compile=true, whose compiling falls in the warm-up steps).

Side "replaylab" builds the real `Trainer` (tests/conftest.py's compose, default trainer=opd with the tiny
teacher) and times `trainer.run_iteration()` (generate, teacher scoring, update); its tokens are the
ledger's `tokens_generated`. Side "trl" times each DistillationTrainer optimizer step with a callback
(generation, teacher forward, loss, update); its tokens are the logged `completions/mean_length` x 64.
Both count response tokens with the EOS. The first `--warmup` steps of each run are dropped.

Printed: every alternated pair (replaylab then TRL, `--pairs`, default 5) with s/step, tokens and ms per
generated token for both, the ratios replaylab / TRL and their medians. Target: at most 0.5 per generated
token (median of pairs).

    pip install -e '.[bench]'
    python benchmarks/bench_trl_opd.py [--pairs 5] [--steps 8] [--warmup 2] [--threads 2] [--compile] [--forward auto|pruned|module] [--out opd.json]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import alternate
import common


def overrides(args: argparse.Namespace) -> list[str]:
    return ["trainer=opd", f"rollout.engine={args.rollout}", f"trainer.forward={args.forward}", f"rollout.compile={str(args.compile).lower()}",
            f"trainer.threads={args.threads}"]


def replaylab(args: argparse.Namespace) -> dict:
    return common.replaylab_side(overrides(args), args)


def trl(args: argparse.Namespace) -> dict:
    from trl import DistillationConfig, DistillationTrainer

    from replaylab.models.loading import load_causal_lm, resolve_path

    _, obj = common.config(overrides(args))
    t, r, batch = obj.trainer, obj.rollout, obj.trainer.prompts_per_iteration * obj.trainer.samples_per_prompt
    if t.objective != "opd_full_rkl" or t.samples_per_prompt != 1:
        raise ValueError(f"the TRL anchor matches opd_full_rkl with one sample per prompt, not {t.objective} x "
                         f"{t.samples_per_prompt}")
    prompts, tokenizer = common.matched_prompts(obj, t.prompts_per_iteration * args.steps)
    data = common.prompt_dataset(prompts, tokenizer)
    student = load_causal_lm(resolve_path(obj.model.name_or_path, obj.tiny, progress=False), obj.model.dtype)
    teacher = load_causal_lm(resolve_path(obj.teacher.name_or_path, obj.tiny, progress=False), obj.teacher.dtype)
    clock = common.trl_clock(batch)
    with tempfile.TemporaryDirectory() as tmp:
        config = DistillationConfig(
            **common.trl_common_args(Path(tmp), args.steps), use_vllm=False, beta=1.0,  # 1.0 = reverse KL
            per_device_train_batch_size=batch, gradient_accumulation_steps=1,
            max_completion_length=obj.budget.max_response_tokens, temperature=r.temperature, top_p=r.top_p,
            top_k=r.top_k, learning_rate=t.lr, adam_beta1=t.betas[0], adam_beta2=t.betas[1], adam_epsilon=t.eps,
            weight_decay=t.weight_decay, max_grad_norm=t.grad_clip,
        )
        DistillationTrainer(model=student, teacher_model=teacher, args=config, train_dataset=data,
                            processing_class=tokenizer, callbacks=[clock]).train()
    return common.trl_result(clock, args, beta=config.beta, temperature=config.temperature, batch=batch)


SIDES = {"replaylab": replaylab, "trl": trl}


def main() -> None:
    p = alternate.parser(__doc__, SIDES)
    common.add_step_arguments(p)
    args = p.parse_args()
    if args.side:
        return alternate.run_side(args, SIDES)
    _, obj = common.config(overrides(args))
    t = obj.trainer
    title = (f"OPD step ({t.objective} vs DistillationTrainer beta=1, reverse KL): replaylab (rollout={args.rollout}{' compiled' if args.compile else ''}, trainer.forward={args.forward}) "
             f"vs TRL, {t.prompts_per_iteration} prompts x {t.samples_per_prompt} sample, <= "
             f"{obj.budget.max_response_tokens} tokens, lr {t.lr:g}, {args.threads} threads")
    alternate.save(args.out, [alternate.parent(__file__, args, "replaylab", "trl", title,
                                               target=("ratio_token", "<=", 0.5))])


if __name__ == "__main__":
    main()
