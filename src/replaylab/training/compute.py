"""FLOP estimates for compute-matched budgets (ALGORITHMS.md §16): what the ledger's `flops_*` count.

The cost model is Kaplan et al.'s (2020): a forward pass costs 2N FLOPs per token and a forward plus
backward 6N, with N the model's non-embedding parameters (`non_embedding_params`). Every token a
model processes is one position of a forward pass, so each cost below is the model's per-token
rate times the tokens of the sequence it runs over:

    generation      2 N_policy  (C + T)        per sampled sequence, current or initial policy
                    2 N_teacher (C + T)        per rollout of the teacher (source "teacher": a prefix pool)
    teacher         2 N_teacher (C + T)        per sequence the teacher scores (once: scores are cached)
    training        (6 N_policy + 2 N_ref)(C + T) x passes   per trained sample
    proximal        2 N_policy  (C + T)        per replayed sample whose log-probs are recomputed
                                               (and per sequence of a strategy's own no-grad scoring,
                                               `Ledger.record_forward`, counted with training)

with C the context (the prompt's tokens plus, for a prefix continuation, the stored prefix it
continues) and T the response tokens the policy generated. The choices:

* Prompt (context) tokens are counted, at the forward rate, once per sequence: generation prefills
  the context of every sampled sequence (n samples of one prompt pay n prefills; an engine with
  prefix caching pays fewer, so this is an upper bound there), the teacher and the training forward
  run over the whole sequence, and the backward runs over the context positions too (response
  tokens attend to them). The last sampled token is never fed back and the first comes out of the
  prefill, so generation really runs C + T - 1 positions; C + T is the model's round figure.
* Padding is not counted: the estimate is of the tokens, not of a batch layout. Nor are the tokens a
  batched prefix continuation decodes past its own pair's limit and drops (`rollout.base.continue_prefixes`
  decodes every pair of a call to the longest remaining budget): the ledger charges the algorithm, a
  continuation of its own length, not this engine's batching. The gap is the share of continuations cut
  at their limit: 0% on tiny8 (nothing truncates), up to about 30% more decoding for HDL at a budget that
  truncates most answers (an audit measured 31% on the micro test world at 24 tokens).
* The attention term (Kaplan's 2 n_layer n_ctx d_attn per token) is left out. For a dense model
  it is about n_ctx / (12 d_model) of the 2N term, so it matters only at contexts comparable to
  12 d_model tokens; a table comparing long-context runs then understates every row's compute.
* Embeddings are not in N (the spec's choice), so the output head's matmul (2 V d_model per token)
  is not counted either.
* Training: `passes` is trainer.resample_period (every pass over an iteration's batch is a forward
  and backward of every sample in it). Rows that trainer.mask_truncated leaves out of the loss are
  still counted (the ledger's `samples_trained` counts them too), and so are GRPO's inert rows (a group
  whose rewards are all equal has advantage 0 and no gradient, and the objective skips their forward
  when no KL reference or distributed run needs it; about half of the tiny GRPO groups): the charge is
  for the batch a strategy asks to train on, so two arms with different shares of inert groups are
  charged alike for the samples they drew. A frozen KL reference (GRPO with
  trainer.kl_coef > 0) runs a no-grad forward of every trained sample in every pass: 2 N_ref.
  Proximal log-probs (the iteration-start policy's, recomputed once per iteration for replayed
  samples, `Trainer.attach_proximal`) are a no-grad forward at 2 N_policy; the ledger recognises
  them as the trained samples that carry `proximal_logprobs` when `record_trained` runs.
* The teacher: a local teacher's N is read from its model. A server teacher (vLLM) has no local
  model and no config field gives its size, so N_teacher = 0 and teacher FLOPs are not counted
  (its scored tokens still are: `teacher_tokens_scored`). GRPO has no teacher.
* Not counted: evaluation and the probe set (`training.probe`), which no ledger count includes, and
  the optimizer step (O(parameters) per update, not per token).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn


def non_embedding_params(model: nn.Module | None) -> int:
    """Parameters of `model` minus its input embedding and, when untied, its output head (0 for
    None). Read through transformers' `get_input_embeddings()` / `get_output_embeddings()`; a tied
    head shares the embedding's tensor and `parameters()` yields it once, so it is taken off once.
    DDP and torch.compile wrappers are looked through (an FSDP2 model's DTensor parameters have their full shapes)."""
    if model is None:
        return 0
    from replaylab.parallel.wrap import unwrap

    model = unwrap(model)
    excluded: set[int] = set()
    for getter in ("get_input_embeddings", "get_output_embeddings"):
        module = getattr(model, getter, lambda: None)()
        if module is not None:
            excluded |= {id(p) for p in module.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in excluded)


@dataclass(frozen=True)
class ComputeModel:
    """The FLOP rates of one run (see the module doc); the trainer builds it from its models."""

    policy: int  # N of the policy (student); the initial policy is a copy of it
    teacher: int = 0  # N of a local teacher; 0 = no teacher, or a server teacher
    reference: int = 0  # N of the frozen KL reference forwarded in every loss; 0 = none
    passes: int = 1  # forward/backward passes over each iteration's batch (trainer.resample_period)

    def generation(self, context: int, response: int, by_teacher: bool = False) -> int:
        """Sampling `response` tokens after prefilling `context` tokens, by the policy (or the teacher)."""
        return 2 * (self.teacher if by_teacher else self.policy) * (context + response)

    def teacher_scoring(self, context: int, response: int) -> int:
        """The teacher's forward over one sequence (context + the response it scores)."""
        return 2 * self.teacher * (context + response)

    def forward(self, context: int, response: int) -> int:
        """One no-grad forward of the policy over a sequence (proximal log-probs, a strategy's scoring)."""
        return 2 * self.policy * (context + response)

    def training(self, context: int, response: int, proximal: bool = False) -> int:
        """All passes of forward + backward over one trained sample (and the reference's forward),
        plus the one no-grad forward of its proximal log-probs when they were recomputed."""
        tokens = context + response
        return self.passes * (6 * self.policy + 2 * self.reference) * tokens + (self.forward(context, response) if proximal else 0)


def context_tokens(sample) -> int:
    """The tokens a sample's response is conditioned on: its prompt, plus a stored prefix it continues."""
    return len(sample.prompt.token_ids) + (sample.prefix.num_tokens if sample.prefix is not None else 0)
