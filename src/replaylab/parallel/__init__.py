"""Primitives for running one replaylab training run on several processes (one per device).

    torchrun --nproc_per_node=N -m replaylab.train trainer.distributed=fsdp2 ...

The split of work is deliberately narrow (docs/scale_out.md, "How a step is split"):

* Everything that decides *what* to train on is replicated: every rank holds the same strategy
  buffers, ledger, prompt stream and RNG state, so every rank makes the same decisions without
  talking to the others. Rollouts and teacher scores are the only inputs that are produced sharded
  (each rank its contiguous slice, `shard`) and then gathered (`all_gather_objects`).
* The loss of each *gradient group* (a slice of the global minibatch) is split across ranks; DDP or
  FSDP2 synchronise the gradients in `backward`, so what a rank reads off `.grad` afterwards is the
  gradient of the whole global group. Per-group statistics (the R-OPD gradient norms, sketches) are
  therefore taken from the synchronised gradient (`GradientGroups`, `grad_norm`) and are the same
  whatever the world size.
* Generation never runs through the sharded model: `unwrapped_generation_copy` gathers the full
  weights into a plain transformers model on every rank (`GatheredGenerator` does it lazily for
  HFGenerator; a vLLM engine gets them via `rollout.weight_sync`), so ranks that generate different
  numbers of tokens can never deadlock on FSDP all-gathers. No-grad passes that must go through the
  wrapped model (proximal log-probs) use `sharded_map`, which keeps every rank's forwards in step.

Every helper is a no-op (or the obvious single-process equivalent) when torch.distributed is not
initialised, so the single-process trainer can call them unconditionally. Facts behind the choices
(gloo on CPU, rank-0-only full state dicts, in-place mutation by `set_model_state_dict`, ...) were
measured and are recorded in docs/scale_out.md.
"""


from replaylab.parallel.checkpoint import (
                                            export_to_hf,
                                            full_state_dict,
                                            load_sharded,
                                            save_sharded,
)
from replaylab.parallel.collectives import (
                                            all_gather_objects,
                                            all_reduce_max,
                                            all_reduce_mean,
                                            all_reduce_sum,
                                            broadcast_object,
                                            shard,
                                            shard_bounds,
                                            sharded_map,
)
from replaylab.parallel.gradients import (
                                            GradientGroups,
                                            clip_grad_norm,
                                            full_tensors,
                                            grad_norm,
)
from replaylab.parallel.process import (
                                            MODES,
                                            DistInfo,
                                            barrier,
                                            destroy,
                                            export_submitit_env,
                                            init_from_env,
                                            is_distributed,
                                            is_main,
                                            rank,
                                            world_size,
)
from replaylab.parallel.wrap import (
                                            decoder_layers,
                                            grad_sync_scale,
                                            is_fsdp,
                                            unwrap,
                                            wrap_model,
)

__all__ = [
    "MODES", "DistInfo", "GradientGroups", "all_gather_objects", "all_reduce_max", "all_reduce_mean", "all_reduce_sum",
    "barrier", "broadcast_object", "clip_grad_norm", "decoder_layers", "destroy", "export_submitit_env", "export_to_hf",
    "full_state_dict", "full_tensors", "grad_norm", "grad_sync_scale", "init_from_env", "is_distributed", "is_fsdp",
    "is_main", "load_sharded", "rank", "save_sharded", "shard", "shard_bounds", "sharded_map", "unwrap", "world_size", "wrap_model",
]
