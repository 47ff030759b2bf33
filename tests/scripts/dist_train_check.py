"""A few optimizer steps of a tiny Qwen3 with replaylab.parallel, as the trainer will take them.

    python tests/scripts/dist_train_check.py --mode none --out DIR             # reference, 1 process
    python -m torch.distributed.run --nproc_per_node=2 --master_port=P \\
        tests/scripts/dist_train_check.py --mode ddp|fsdp2 --out DIR

Each step mirrors `Trainer.optimizer_step`: the global minibatch is split into gradient groups;
each rank takes its contiguous slice of every group (`shard`), weights its token-mean loss by its
share of the global minibatch (times `grad_sync_scale`), and reads the group's gradient off the
synchronised `.grad` (`GradientGroups`). The test compares weights, losses and per-group gradient
norms with the single-process run. The script also exercises, on every rank: the generation copy
(ranks generate different lengths: no deadlock), `GatheredGenerator` sampling sharded
prompts (one rank with none), `sharded_map` scoring through the wrapped model, `iter_full_tensors`
vs `full_state_dict`,
`save_sharded` at step --save-at and `load_sharded` into a fresh model (resumed == continuous).
Results go to DIR (rank 0 writes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

torch.set_num_threads(1)

from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: E402

from replaylab import parallel as D
from replaylab.rollout.gathered import GatheredGenerator, unwrapped_generation_copy  # noqa: E402
from replaylab.models.batching import score_logprobs  # noqa: E402
from replaylab.models.tiny_tokenizer import build_tiny_tokenizer  # noqa: E402
from replaylab.rollout.base import SamplingParams  # noqa: E402
from replaylab.rollout.hf import HFGenerator  # noqa: E402
from replaylab.rollout.weight_sync import iter_full_tensors  # noqa: E402
from replaylab.types import Prompt  # noqa: E402

VOCAB, ROWS, WIDTH, GROUPS = 128, 8, 12, 2
PROMPT = [5, 17, 33, 2, 9]
PROMPTS = [Prompt(f"p{i}", "", tuple(PROMPT[: 2 + i]), "0") for i in range(5)]


def build_model() -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                      tie_word_embeddings=True, bos_token_id=None, eos_token_id=1, pad_token_id=0,
                      initializer_range=0.2)
    # float64: the distributed and single-process runs then agree to ~1e-12 unless the logic is
    # wrong, instead of hiding a small error under float32 reduction-order noise (~1e-5 after Adam).
    return Qwen3ForCausalLM(cfg).double()


def batch(step: int) -> list[tuple[torch.Tensor, int]]:
    """The global minibatch of a step: ROWS rows of token ids with different valid lengths, so token
    shares (the DAPO weights) differ between rows, ranks and groups."""
    g = torch.Generator().manual_seed(1000 + step)
    rows = []
    for _ in range(ROWS):
        ids = torch.randint(2, VOCAB, (WIDTH,), generator=g)
        rows.append((ids, int(torch.randint(4, WIDTH + 1, (1,), generator=g))))
    return rows


def token_loss_sum(model, rows) -> tuple[torch.Tensor, int]:
    ids = torch.stack([r[0] for r in rows])
    mask = torch.stack([(torch.arange(WIDTH) < n).double() for _, n in rows])
    logits = model(input_ids=ids, attention_mask=mask.long()).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1), reduction="none")
    m = mask[:, 1:].reshape(-1)
    return (nll * m).sum(), int(m.sum())


def tokens(rows) -> int:
    return sum(n - 1 for _, n in rows)


def step_fn(model, opt, groups: D.GradientGroups, step: int) -> dict:
    """One optimizer update over the global minibatch of `step`, split into GROUPS gradient groups."""
    mb = batch(step)
    total_tokens = tokens(mb)
    size = len(mb) // GROUPS
    parts = [mb[i : i + size] for i in range(0, len(mb), size)]
    norms, loss = [], 0.0
    groups.reset()
    for part in parts:
        local = D.shard(part)
        s, _ = token_loss_sum(model, local)
        local_weighted = s / total_tokens  # = token-mean(local) * share of the global minibatch
        (local_weighted * D.grad_sync_scale()).backward()
        w_group = tokens(part) / total_tokens
        norms.append(D.grad_norm(groups.take()) / w_group)  # norm of the group's token-mean loss gradient
        loss += float(local_weighted.detach())
    total_norm = D.clip_grad_norm(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return {"loss": D.all_reduce_sum(loss), "group_norms": norms, "total_norm": total_norm}


def make(mode: str, device):
    model = D.wrap_model(build_model(), mode, device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    return model, opt, D.GradientGroups(model.parameters())


def greedy(model, prompt: list[int], n: int) -> list[int]:
    out = model.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         do_sample=False, max_new_tokens=n, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=D.MODES, required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--save-at", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    t0 = time.perf_counter()
    info = D.init_from_env("cpu", timeout_s=60)
    if args.mode != "none" and info.world_size < 2:
        sys.exit("run under torchrun with --nproc_per_node >= 2")
    model, opt, groups = make(args.mode, info.device)
    if D.is_main():
        out.mkdir(parents=True, exist_ok=True)
        D.unwrap(model).config.save_pretrained(out / "base")  # the export's base model directory
    D.barrier()
    result: dict = {"mode": args.mode, "world_size": info.world_size, "steps": []}
    gen_copy = None
    for step in range(args.steps):
        result["steps"].append(step_fn(model, opt, groups, step))
        if step + 1 == args.save_at:
            D.save_sharded(model, opt, out / "ckpt", extra={"step": step + 1})
            gen_copy = unwrapped_generation_copy(model, gen_copy)
            result["gen_at_ckpt"] = greedy(gen_copy, PROMPT, 8)
    # Generation on every rank from the gathered copy, with rank-dependent prompts and lengths: a
    # forward through the FSDP2 model here would deadlock (different numbers of forwards).
    gen_copy = unwrapped_generation_copy(model, gen_copy)
    mine = greedy(gen_copy, PROMPT[: 3 + D.rank()], 4 + 5 * D.rank())
    result["gen_final"] = greedy(gen_copy, PROMPT, 8)
    result["gen_lengths"] = D.all_gather_objects([len(mine)])
    # The trainer's rollout path: GatheredGenerator over HFGenerator, each rank sampling its shard
    # of the prompts (rank 0's shard of one prompt is empty), gathered; then the policy's log-probs of
    # those samples through the wrapped model itself with sharded_map (FSDP2 forwards kept in step).
    tok = build_tiny_tokenizer()
    gen = GatheredGenerator(HFGenerator(None, tok), model)
    gen.sync_weights(model, args.steps)
    params = SamplingParams(max_new_tokens=6, temperature=1.0, n=2)
    one = D.all_gather_objects(gen.generate(D.shard(PROMPTS[:1]), params, seed=7))
    result["gen_sampled"] = [s.response_ids.tolist() for s in one[0]]
    five = D.all_gather_objects(gen.generate(D.shard(PROMPTS), params, seed=8))
    samples = [s for g in five for s in g]
    result["gen5_groups"] = [len(g) for g in five]
    model.eval()
    scored = D.sharded_map(lambda c: [lp for lp, _ in score_logprobs(model, c, tok.pad_token_id, 64)], samples, 2)
    model.train()
    result["sharded_score_max_diff"] = max(float((a - s.behaviour_logprobs).abs().max()) for a, s in zip(scored, samples))
    result["policy_version"] = gen.policy_version
    # Streaming full tensors (every rank) == rank 0's gathered full state dict.
    streamed = {k: v.clone() for k, v in iter_full_tensors(model)}
    full = D.full_state_dict(model)
    if D.is_main():
        result["stream_matches_full"] = sorted(streamed) == sorted(full) and all(
            torch.equal(streamed[k], full[k]) for k in full)
        result["full_keys"] = len(full)
    else:
        result["nonzero_rank_full_is_empty"] = full == {}
    result["nonzero_rank_ok"] = D.all_gather_objects([result.get("nonzero_rank_full_is_empty", True)])
    # Resume: a fresh model and optimizer loaded from the sharded checkpoint, then the remaining
    # steps, must end where the uninterrupted run ended.
    model2, opt2, groups2 = make(args.mode, info.device)
    extra = D.load_sharded(model2, opt2, out / "ckpt")
    for step in range(extra["step"], args.steps):
        step_fn(model2, opt2, groups2, step)
    resumed = D.full_state_dict(model2)
    if D.is_main():
        result["resume_max_diff"] = max(float((resumed[k] - full[k]).abs().max()) for k in full)
        torch.save(full, out / "weights.pt")
        result["seconds"] = time.perf_counter() - t0
        (out / "result.json").write_text(json.dumps(result, indent=1))
    D.barrier()
    D.destroy()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
