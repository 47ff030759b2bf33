"""`VLLMGenerator`: rollouts from a colocated vLLM engine (GPU machines, the `vllm` extra, 0.33).

Same outputs as `hf.HFGenerator`, so strategies and objectives cannot tell the engines apart:
per-token behaviour log-probs of the sampled tokens, the truncation flag, the policy version and
unique sample ids. The choices that make that true:

* Behaviour log-probs: vLLM reports, for `logprobs=0`, the sampled token's log-prob, and the engine
  option `logprobs_mode` decides which distribution that is. `raw_logprobs` (the default) is
  log-softmax of the *untempered* logits: wrong for temperature != 1. `processed_logprobs` is
  log-softmax after the sampling processors (temperature, then top-k/top-p), i.e. of the
  distribution actually sampled from. With top_k=0 and top_p=1 (replaylab's rollout defaults) it is
  exactly log-softmax(logits / T), HFGenerator's value; with top-k/top-p on it is the truncated,
  renormalised distribution, which differs from HFGenerator (untruncated) by log(kept mass) per
  token. vLLM 0.33 has no "tempered but untruncated" mode, so `processed_logprobs` is used (TRL's
  colocate engine makes the same choice) and a warning is issued once when top-k/top-p are active.
* Determinism: each sequence is its own request (prompts x n, with prefix caching making the
  repeats cheap) with its own seed derived from (seed, index), so results do not depend on how vLLM
  batches requests, and equal seeds give equal samples.
* Truncation: as HFGenerator, a row requested at full length (`ignore_eos`), or one without an EOS (not
  `finish_reason == "length"`, which an EOS drawn as the budget's last token also gives); the EOS token,
  when generated, is part of the response.
  Generation stops at the tokenizer's EOS only (`ignore_eos` + `stop_token_ids=[eos]`), as
  HFGenerator's `generate(eos_token_id=tok.eos_token_id)` does.
* Weights: the engine lives in this process ("colocated": `distributed_executor_backend=
  "external_launcher"`, engine core in-process), one engine per training rank, each on its rank's
  GPU, generating that rank's share of the prompts. `sync_weights` records the new version;
  the weights are pushed (`weight_sync.ColocatedVLLMWeightSync`, pinned to vllm 0.33) at the next
  `generate` or `flush`, so the several optimizer updates of one iteration cost one push. With an
  FSDP2 policy the push all-gathers, so all ranks must call `generate`/`flush` together (they do:
  every rank generates its shard each iteration, possibly an empty one).

Importing this module needs no vllm; constructing a `VLLMGenerator` without it raises an error
naming the extra. Against real vLLM it is tested only by the gpu-marked tests/test_vllm_gpu.py
(which also runs the glue against a fake engine on CPU).
"""

from __future__ import annotations

import os
import socket
import warnings

import torch

from replaylab.rollout.base import SamplingParams
from replaylab.types import Prompt, Sample, Source

LOGPROBS_MODE = "processed_logprobs"


def import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError(
            "rollout.engine=vllm needs the optional `vllm` extra on a CUDA machine: pip install 'replaylab[vllm]' "
            "(pins vllm==0.33.0); or use rollout=hf"
        ) from e
    return vllm


def request_seed(seed: int, index: int) -> int:
    """Seed of the index-th sequence of a generate call: distinct per sequence, stable across runs."""
    return (seed * 1_000_003 + index) % (2**31 - 1)


def _colocated_env() -> None:
    """What vLLM's external launcher needs: an in-process engine core (so collective_rpc passes
    tensors by reference) and torch.distributed rendezvous variables. Under torchrun they are set;
    a single process gets a world of one on a free local port."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})


class VLLMGenerator:
    def __init__(self, model_path: str, tokenizer, *, dtype: str = "auto", revision: str | None = None,
                 gpu_memory_utilization: float = 0.4, tensor_parallel_size: int = 1, enforce_eager: bool = False,
                 seed: int = 0, max_model_len: int | None = None, **engine_kwargs):
        """Start a colocated engine on `model_path` (a local directory or hub id; the same weights
        as the trainer's policy). `engine_kwargs` go to `vllm.LLM` (e.g. max_num_seqs)."""
        vllm = import_vllm()
        if not torch.cuda.is_available():
            raise RuntimeError("rollout.engine=vllm needs a CUDA GPU; use rollout=hf on this machine")
        if tensor_parallel_size != 1:
            raise ValueError(
                f"rollout.tensor_parallel_size={tensor_parallel_size}: the colocated engine runs one tensor-parallel "
                "degree-1 engine per training rank (data-parallel rollouts). Shard the model over more training ranks "
                "instead, or serve the policy separately")
        from replaylab.rollout.weight_sync import ColocatedVLLMWeightSync

        _colocated_env()
        self.llm = vllm.LLM(
            model=model_path, tokenizer=model_path, revision=revision, dtype=dtype, seed=seed,
            gpu_memory_utilization=gpu_memory_utilization, tensor_parallel_size=1, enforce_eager=enforce_eager,
            max_model_len=max_model_len, distributed_executor_backend="external_launcher",
            logprobs_mode=LOGPROBS_MODE, enable_prefix_caching=True, **engine_kwargs,
        )
        self.weight_sync = ColocatedVLLMWeightSync(self.llm)
        self.device = torch.device("cuda", torch.cuda.current_device())  # the engine's (and this rank's) GPU
        self.tokenizer = tokenizer
        self.eos_id = tokenizer.eos_token_id
        self.policy_version = 0
        self.tokens_generated = 0
        self._pending: torch.nn.Module | None = None
        self.policy_model: torch.nn.Module | None = None  # the trainer's policy, set by from_config / sync
        self._scoring_copy: torch.nn.Module | None = None  # FSDP2: model_for_scoring's gathered plain copy
        self._scoring_stale = True
        self._warned_truncation = False

    @classmethod
    def from_config(cls, cfg, model, tokenizer) -> VLLMGenerator:
        """The engine loads the same checkpoint the policy was loaded from (`cfg.model`), so no push
        is needed before the first update."""
        from replaylab.models.loading import resolve_path

        m, r = cfg.model, cfg.rollout
        if m.gguf_file:
            raise ValueError("rollout.engine=vllm does not load GGUF files here; use rollout=hf for model.gguf_file")
        path = resolve_path(m.name_or_path, cfg.tiny, progress=cfg.progress)
        engine = cls(path, tokenizer, dtype=m.dtype, revision=m.revision, gpu_memory_utilization=r.gpu_memory_utilization,
                     tensor_parallel_size=r.tensor_parallel_size, enforce_eager=r.enforce_eager, seed=cfg.trainer.seed)
        engine.policy_model = model
        return engine

    # ------------------------------------------------------------------ weights
    def sync_weights(self, model: torch.nn.Module, version: int) -> None:
        """Tag future samples with `version`; the weights themselves are pushed at the next
        generate/flush (one push per iteration, however many updates it has)."""
        self._pending = model
        self.policy_model = model
        self.policy_version = version
        self._scoring_stale = True

    def model_for_scoring(self) -> torch.nn.Module:
        """The policy for no-grad scoring (the engine's copy has no torch forward to reuse): the trainer's own
        module, or under FSDP2 a plain gathered copy, refreshed after each weight sync. Every rank calls it
        together (the trainer does, before rank 0 evaluates alone): it pushes pending weights to the engine
        and gathers the copy, both collectives under FSDP2, so rank 0's evaluation then generates, scores and
        probes without one (a generate that pushed, or a probe through the sharded module, on rank 0 alone
        waited forever for the other ranks)."""
        from replaylab.parallel.wrap import is_fsdp, unwrap
        from replaylab.rollout.gathered import unwrapped_generation_copy

        self.flush()
        if not is_fsdp(unwrap(self.policy_model)):
            return self.policy_model
        if self._scoring_stale or self._scoring_copy is None:
            self._scoring_copy = unwrapped_generation_copy(self.policy_model, self._scoring_copy)
            self._scoring_stale = False
        return self._scoring_copy

    def flush(self) -> None:
        """Push pending weights now (all ranks together when the policy is FSDP2-sharded)."""
        if self._pending is None:
            return
        from replaylab.rollout.weight_sync import iter_full_tensors

        self.weight_sync.push(iter_full_tensors(self._pending, device=self.device))
        self._pending = None

    # ------------------------------------------------------------------ sampling
    def generate(self, prompts: list[Prompt], params: SamplingParams, seed: int,
                 source: Source = "fresh") -> list[list[Sample]]:
        self.flush()
        if not prompts:
            return []
        vllm = import_vllm()
        greedy = params.temperature == 0
        if not greedy and (params.top_k > 0 or params.top_p < 1) and not self._warned_truncation:
            warnings.warn("VLLMGenerator with top_k/top_p: behaviour log-probs are those of the truncated, renormalised "
                          "distribution (vLLM processed_logprobs), not HFGenerator's untruncated log-softmax(logits/T)",
                          stacklevel=2)
            self._warned_truncation = True
        flat = [p for p in prompts for _ in range(params.n)]
        requests = [{"prompt_token_ids": list(p.token_ids)} for p in flat]
        sampling = [
            vllm.SamplingParams(
                n=1, max_tokens=params.max_new_tokens, temperature=params.temperature,
                top_p=1.0 if greedy else params.top_p, top_k=0 if greedy else params.top_k,
                seed=request_seed(seed, i), logprobs=0, detokenize=False,
                # Stop exactly where HFGenerator stops: at the tokenizer's EOS only, not at other
                # EOS ids a generation_config may list (Qwen3 also lists <|endoftext|>); nowhere when the
                # caller asks for full-length rows (params.ignore_eos), as rollout=hf and rollout=fast do.
                ignore_eos=True, stop_token_ids=[] if params.ignore_eos else [self.eos_id],
            )
            for i in range(len(flat))
        ]
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        samples = [self._sample(p, out.outputs[0], source, seed, i, params.ignore_eos)
                   for i, (p, out) in enumerate(zip(flat, outputs))]
        return [samples[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]

    def _sample(self, prompt: Prompt, completion, source: Source, seed: int, index: int, ignore_eos: bool) -> Sample:
        ids = list(completion.token_ids)
        if completion.logprobs is None or len(completion.logprobs) != len(ids):
            raise RuntimeError(f"vLLM returned {0 if completion.logprobs is None else len(completion.logprobs)} "
                               f"log-prob entries for {len(ids)} tokens")
        logps = [completion.logprobs[t][tok].logprob for t, tok in enumerate(ids)]
        self.tokens_generated += len(ids)
        return Sample(
            prompt=prompt,
            response_ids=torch.tensor(ids, dtype=torch.long),
            behaviour_logprobs=torch.tensor(logps, dtype=torch.float32),
            policy_version=self.policy_version,
            source=source,
            # as HFGenerator decides: a full-length row when EOS is an ordinary token, else no EOS (vLLM checks the
            # length cap before the stop tokens, so an EOS drawn as the budget's last token finishes "length")
            truncated=ignore_eos or self.eos_id not in ids,
            sample_id=f"{source}-v{self.policy_version}-s{seed}-{index}",
        )
