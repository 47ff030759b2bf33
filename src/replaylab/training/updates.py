"""The optimizer side of an iteration: minibatches, gradient groups, one optimizer step each.

A mixin of `Trainer` (it reads the trainer's optimizer, scheduler, objective and counters): kept in
its own module so the loop in trainer.py reads as the loop.
"""

from __future__ import annotations

import math
import random

import torch

from replaylab import parallel as D
from replaylab.training.components import TrainingDiverged, derived_seed
from replaylab.training.provenance import Provenance
from replaylab.training.update_metrics import UpdateMetrics
from replaylab.types import Sample


def length_chunks(rows: list[Sample], n: int) -> list[list[Sample]]:
    """`rows` cut into `n` near-equal chunks of similar length (sorted by context + response
    length), so that each chunk pads only to its own longest row; with n = 1, `rows` unchanged.
    Measured on 256 GRPO-shaped rows of the tiny student (1 thread): one padded pass 2.5 s, four
    sorted chunks 1.5 s. Chunks may be empty when a rank's shard is smaller than n."""
    if n <= 1:
        return [list(rows)]
    ordered = sorted(rows, key=lambda s: len(s.context_ids) + s.num_tokens)
    bounds = [round(c * len(ordered) / n) for c in range(n + 1)]
    return [ordered[bounds[c] : bounds[c + 1]] for c in range(n)]


class UpdatesMixin:
    def train_on(self, samples: list[Sample], provenance: Provenance) -> tuple[list[float], list | None, dict[str, float]]:
        t = self.cfg.trainer
        norms: list[float] = []
        sketches: list | None = [] if self.sketch else None
        totals: dict[str, float] = {}
        for p in range(t.resample_period):
            order = list(range(len(samples)))
            random.Random(derived_seed(t.seed, "minibatch", self.iteration, p)).shuffle(order)
            # Near-equal minibatches: strategies that enlarge groups (RePO, RLEP) make batches that
            # need not divide evenly, and no sample may be dropped.
            bounds = [round(m * len(order) / t.minibatches) for m in range(t.minibatches + 1)]
            for m in range(t.minibatches):
                mb = [samples[i] for i in order[bounds[m] : bounds[m + 1]]]
                provenance.add(mb, self.update)
                mb_norms, mb_sketches, metrics = self.optimizer_step(mb, self.stat_groups)
                norms += mb_norms
                if sketches is not None:
                    sketches += mb_sketches
                for k, v in metrics.items():
                    totals[k] = totals.get(k, 0.0) + v / t.updates_per_iteration
        return norms, sketches, totals

    def check_finite_weights(self) -> None:
        """A finite loss and gradient can still step the weights to inf/NaN (a huge lr): stop where
        it starts, before the next rollout samples from them or a checkpoint saves them."""
        local = [p.to_local() if hasattr(p, "to_local") else p for p in self.params]  # FSDP2 shards
        bad = any(not bool(torch.isfinite(p).all()) for p in local)
        if D.all_reduce_max(1.0 if bad else 0.0):
            raise TrainingDiverged(f"non-finite weights after update {self.update + 1}, iteration {self.iteration}; the "
                                   f"last good checkpoint in {self.run_dir / 'checkpoints'} is kept. Lower trainer.lr.")

    def optimizer_step(self, mb: list[Sample], n_groups: int) -> tuple[list[float], list, dict[str, float]]:
        """One update on minibatch `mb`, split into `n_groups` gradient groups whose gradients are
        measured for the strategy. Each group is a slice of the global minibatch; under DDP/FSDP2 each
        rank backpropagates its share of it, so a group's gradient, its norm and the update are the
        same whatever the world size."""
        t, model = self.cfg.trainer, self.c.policy
        model.train()
        size = math.ceil(len(mb) / n_groups)
        parts = [mb[i : i + size] for i in range(0, len(mb), size)]
        norms, sketches, metrics = [], [], UpdateMetrics()
        self.opt.zero_grad(set_to_none=True)
        self.grad_groups.reset()
        timed = self.ledger.timed
        for part in parts:
            # Every rank cuts its shard into the same number of chunks (from the global part's size),
            # so ranks run the same number of backwards and their gradient syncs stay in lockstep.
            n_chunks = math.ceil(len(part) / (t.micro_batch * D.world_size())) if t.micro_batch else 1
            for chunk in length_chunks(D.shard(part), n_chunks):
                dummy = not chunk  # a rank without samples still joins the collectives, with weight 0
                with timed("forward_backward"):
                    loss, m = self.objective.loss(model, chunk or part[:1], self.pad_id, self.c.ref_model, batch=mb)
                    if D.all_reduce_max(0.0 if torch.isfinite(loss) else 1.0):
                        raise TrainingDiverged(
                            f"non-finite loss ({loss.item()}) at update {self.update + 1}, iteration {self.iteration}; "
                            f"the last good checkpoint in {self.run_dir / 'checkpoints'} is kept. Lower trainer.lr or check the data."
                        )
                    w_local = 0.0 if dummy else self.objective.share(chunk, mb)
                    (loss * (w_local * D.grad_sync_scale())).backward()
                metrics.add(m, w_local, live=not dummy)
            with timed("gradient_stats"):
                w = self.objective.share(part, mb)
                grads = self.grad_groups.take()
                norms.append(D.grad_norm(grads) / w if w > 0 else 0.0)  # w = 0: every row masked out
                if self.sketch:
                    sketches.append(self.sketch(D.full_tensors(grads)) / w)
        with timed("optimizer"):
            metrics = metrics.result()  # each metric combined over the slices by its kind (update_metrics)
            total = D.clip_grad_norm(self.params, t.grad_clip)
            if not math.isfinite(total):
                raise TrainingDiverged(f"non-finite gradient norm at update {self.update + 1}; last good checkpoint kept")
            lr = self.opt.param_groups[0]["lr"]  # the lr this update steps with (the scheduler moves it on next)
            self.opt.step()
            self.check_finite_weights()
            self.sched.step()
            self.opt.zero_grad(set_to_none=True)
            self.update += 1
            self.ledger.updates = self.update
            self.c.generator.sync_weights(model, self.update)
        metrics["grad_norm"] = total
        metrics["lr"] = lr
        return norms, sketches, metrics
