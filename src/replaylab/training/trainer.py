"""The common trainer: one strategy-blind loop for OPD and GRPO (docs/architecture.md).

    plan -> generate -> score -> compose -> (prox log-probs) -> updates -> observe -> ledger, rows

Checkpoints are taken at iteration boundaries and hold everything the loop's future depends on
(weights, optimizer, scheduler, data-order position, strategy state and RNG, ledger, row count);
every other random choice is derived from (seed, iteration), so a resumed run writes the same rows
as an uninterrupted one.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import torch

from replaylab import parallel as D
from replaylab.objectives import Scorers
from replaylab.replay.base import GradientReading, StepContext, UpdateStats
from replaylab.results.report import eval_line
from replaylab.results.rows import RowsMismatch, RowWriter
from replaylab.storage import CorruptCheckpoint
from replaylab.tasks.stream import StreamChanged
from replaylab.training.branch import Branch, branch_state
from replaylab.training.budget import Ledger, budgets_reached, ended_by
from replaylab.training.components import Components, derived_seed
from replaylab.training.components import TrainingDiverged  # noqa: F401  (re-exported: callers catch it from here)
from replaylab.training.compute import ComputeModel, non_embedding_params
from replaylab.training.dynamic_sampling import DynamicSamplingMixin
from replaylab.training.grad_stats import CountSketch
from replaylab.training.optimizer import build_optimizer
from replaylab.training.probe import ProbeSet
from replaylab.training.progress import Progress
from replaylab.training.provenance import Provenance
from replaylab.training.rollouts import RolloutsMixin
from replaylab.training.schedule import build_scheduler
from replaylab.training.shared import SharedWork
from replaylab.training.runs import (checkpoint_candidates, checkpoint_due, checkpoint_updates, check_own_state,
                                     load_checkpoint, mark_done, prune_checkpoints, rows_without_checkpoint,
                                     save_checkpoint, write_latest)
from replaylab.training.updates import UpdatesMixin
from replaylab.types import Group

log = logging.getLogger(__name__)

class Trainer(UpdatesMixin, DynamicSamplingMixin, RolloutsMixin):
    def __init__(self, cfg, comp: Components, run_dir: Path, rows: RowWriter, shared: SharedWork | None = None):
        self.cfg, self.c, self.run_dir, self.rows = cfg, comp, run_dir, rows
        self.shared = shared  # work the sweep's sibling runs share (training/shared.py); None: compute it all here
        t = cfg.trainer
        self.params = [p for p in comp.policy.parameters() if p.requires_grad]
        self.grad_groups = D.GradientGroups(self.params)
        self.sharded = t.distributed != "none"  # DDP / FSDP2 under torchrun: sharded checkpoints
        self.opt = build_optimizer(self.params, t)  # float32 masters for bf16/fp16 weights (training/optimizer.py)
        self.sched = build_scheduler(self.opt, t, cfg.budget.max_updates)
        self.sketch = CountSketch(t.sketch_dim, seed=t.seed) if t.sketch_dim else None
        # FLOP rates of the compute ledger (training.compute): N of the policy, of a local teacher
        # (a server teacher has no local model and no config field sizing it: 0, not counted) and of
        # the KL reference when the objective forwards one.
        teacher = comp.teacher.distribution_model() if comp.teacher is not None else None
        reference = comp.ref_model if comp.objective is not None and comp.objective.needs_reference() else None
        self.compute = ComputeModel(non_embedding_params(comp.policy), non_embedding_params(teacher),
                                    non_embedding_params(reference), t.resample_period)
        self.ledger = Ledger()
        self.ledger.compute = self.compute
        self.iteration = 0
        self.update = 0
        self.last_eval = 0  # the update of the last evaluation (at the start, if eval.at_start)
        self.strategy_rng = random.Random(derived_seed(t.seed, "strategy"))
        self.pad_id = comp.tokenizer.pad_token_id
        self.objective = comp.objective
        self.scorers = Scorers(comp.teacher, comp.grader, comp.tokenizer)
        self.probe: ProbeSet | None = None
        self.branched_from = ""  # "<donor run>@<update>" when the run started from a sibling run's checkpoint
        # Gradient groups cost extra backward passes; only strategies that read them get them, unless
        # the sweep asks every arm to share their update arithmetic (trainer.stat_groups_for_all).
        self.stat_groups = t.stat_groups if comp.strategy.reads_gradients or t.stat_groups_for_all else 1
        # With gradient groups, every iteration's norms (GradientReading.as_list), checkpointed: a run
        # whose strategy follows them (R-OPD's trigger) may branch from this run (training/branch.py).
        self.gradient_readings: list[list] = []
        self.sharded_at = -1  # the update whose weights this process last wrote to a sharded checkpoint

    # ----------------------------------------------------------------- state
    def state_dict(self, weights: bool = True) -> dict:
        """Everything the loop's future depends on. Replicated on every rank; with `weights` False the
        policy and optimizer are left to a sharded checkpoint."""
        state = {
            "scheduler": self.sched.state_dict(), "strategy": self.c.strategy.state_dict(),
            "strategy_rng": self.strategy_rng.getstate(), "stream_position": self.c.stream.position,
            "stream_fingerprint": self.c.stream.fingerprint, "eval_fingerprint": self.c.eval_fingerprint,
            "ledger": self.ledger.state_dict(), "rows": self.rows.count, "rows_text": self.rows.snapshot(),
            "iteration": self.iteration,
            "update": self.update, "last_eval": self.last_eval, "torch_rng": torch.get_rng_state(),
            "world_size": D.world_size(), "probe": self.probe.state_dict() if self.probe else None,
            "branched_from": self.branched_from, "gradient_readings": self.gradient_readings, "run": self.run_dir.name}
        if weights:
            state.update(policy=self.c.policy.state_dict(), optimizer=self.opt.state_dict())
        return state

    def load_state_dict(self, s: dict) -> None:
        if "policy" in s:
            self.c.policy.load_state_dict(s["policy"])
            self.opt.load_state_dict(s["optimizer"])
        self.sched.load_state_dict(s["scheduler"])
        self.c.strategy.load_state_dict(s["strategy"])
        self.strategy_rng.setstate(s["strategy_rng"])
        where = f"{self.run_dir}: its checkpoint at update {s['update']}"
        self.c.stream.restore(s["stream_position"], s.get("stream_fingerprint"), where)
        if s.get("eval_fingerprint", self.c.eval_fingerprint) != self.c.eval_fingerprint:  # None: from before the field
            raise StreamChanged(f"{where} was evaluated on other benchmark problems or golds (fingerprint "
                                f"{s['eval_fingerprint']}, this run's {self.c.eval_fingerprint}): a benchmark file or the "
                                "data root changed since; restore it, or move the run directory away to start over")
        self.ledger = Ledger.from_state(s["ledger"])
        self.ledger.compute = self.compute  # derived from the models, not part of the state
        self.rows.restore(s["rows"], s.get("rows_text"), rebuild=self.cfg.resume_rows == "rebuild")
        self.iteration, self.update, self.last_eval = s["iteration"], s["update"], s["last_eval"]
        self.branched_from = s.get("branched_from", "")
        self.gradient_readings = s.get("gradient_readings", [])
        torch.set_rng_state(s["torch_rng"])
        if s.get("probe") is not None:
            self.probe = ProbeSet.from_state(s["probe"], self.c.stream.prompts)
        self.c.generator.sync_weights(self.c.policy, self.update)

    def checkpoint(self) -> Path:
        keep = self.cfg.trainer.keep_checkpoints
        with self.ledger.timed("checkpoint"):
            if not self.sharded:
                return save_checkpoint(self.run_dir, self.update, self.state_dict(), keep)
            # torch.distributed.checkpoint: each rank writes its shards; rank 0 the replicated state.
            # a second save of one update (a run's last, after its final evaluation) rewrites extra.pt alone
            target = D.save_sharded(self.c.policy, self.opt, self.run_dir / "checkpoints" / f"update_{self.update:07d}",
                                    extra=self.state_dict(weights=False), weights=self.sharded_at != self.update)
            self.sharded_at = self.update
            if D.is_main():
                write_latest(self.run_dir, target.name)
                prune_checkpoints(self.run_dir, keep)
            D.barrier()
            return target

    def resume(self) -> bool:
        """Resume from the newest readable checkpoint: the one `latest` names, else (saying so) an
        older one. A run directory with checkpoints but none readable stops the run."""
        found, notes = D.broadcast_object(checkpoint_candidates(self.run_dir))
        for note in notes:
            log.warning("replaylab: %s", note)
        for i, target in enumerate(found):
            try:
                state = D.load_sharded(self.c.policy, self.opt, target) if target.is_dir() else load_checkpoint(target)
                check_own_state(state, self.run_dir, target, weights=not target.is_dir())
            except CorruptCheckpoint as e:
                log.warning("replaylab: %s; trying an older checkpoint", e)
                continue
            if i or notes:
                log.warning("replaylab: resuming from %s", target)
            self.load_state_dict(state)
            self.sharded_at = self.update if target.is_dir() else -1  # its weights are on disk there already
            self.rows.mirror_again()  # the rows it kept: a killed process never sent its last steps to wandb
            return True
        if found:
            raise CorruptCheckpoint(f"no readable checkpoint in {self.run_dir / 'checkpoints'} "
                                    f"({', '.join(p.name for p in found)}); remove the run directory to start over")
        if notes:  # a pointer to a checkpoint that is gone, and no other: one was written, so do not start over
            raise CorruptCheckpoint(f"{notes[0]}, and no other checkpoint is left; remove the run directory to "
                                    "start over")
        return False

    def refuse_lost_rows(self, start: int) -> None:
        """Before rows.jsonl is rewritten from update `start` (0, or a branch point): refuse when it holds rows
        at or past the first checkpoint the run writes after `start` (training.runs.rows_without_checkpoint)."""
        t = self.cfg.trainer
        due = checkpoint_updates(t.checkpoint_every, t.updates_per_iteration, self.cfg.budget.max_updates)
        first = next((u for u in due if u > start), due[-1])
        refusal = D.broadcast_object(rows_without_checkpoint(self.run_dir, first) if D.is_main() else None)
        if refusal:
            raise RowsMismatch(refusal)

    # ----------------------------------------------------------------- loop
    def context(self) -> StepContext:
        t = self.cfg.trainer
        return StepContext(self.iteration, self.update, t.prompts_per_iteration, t.samples_per_prompt,
                           t.updates_per_iteration, self.cfg.budget.max_updates, self.c.stream, self.strategy_rng,
                           self.c.tokenizer, self.policy_logprobs)

    def budget_left(self) -> bool:
        return not budgets_reached(self.cfg.budget, self.update, self.ledger)

    def start_from(self, branch: Branch) -> bool:
        """Take the donor's state at the branch point (training/branch.py); False if it cannot serve."""
        found = branch_state(branch, self.rows.identity, self.c.strategy)
        if found is None:
            return False
        state, rows = found
        self.refuse_lost_rows(branch.update)
        self.rows.restore(state["rows"], state["rows_text"], rebuild=True)  # rows of a start killed early at most
        self.load_state_dict(state)
        for mirror in self.rows.mirrors:
            mirror.log_rows(rows)
        self.branched_from = f"{branch.donor.name}@{branch.update}"
        log.info("replaylab: branched from %s at update %d (both runs train as current up to there)", branch.donor, branch.update)
        return True

    def run(self, branches: list[Branch] = ()) -> dict:
        """Train to the budget: from this run's own checkpoint, else from the first of `branches` that
        serves (training/branch.py), else from the start."""
        resumed = self.resume() or any(self.start_from(b) for b in branches)
        self.ledger.start_clock()
        if not resumed:
            self.refuse_lost_rows(0)
            self.rows.truncate(0)
            self.draw_probe()
            if self.cfg.eval.at_start:
                self.run_eval()
            self.build_initial_store()
        label = self.cfg.strategy.label or self.cfg.strategy.name
        bar = Progress(self.cfg.progress and D.is_main(), self.cfg.budget.max_updates, self.update,
                       f"{self.cfg.trainer.kind}/{label}")
        t = self.cfg.trainer
        while self.budget_left():
            start_update = self.update
            metrics = self.run_iteration()
            bar.update(start_update, self.update, metrics)
            if (t.eval_every and self.update // t.eval_every > self.last_eval // t.eval_every) or self.tail_due():
                self.run_eval()
            if checkpoint_due(t.checkpoint_every, start_update, self.update):
                self.checkpoint()
        bar.close()
        if self.last_eval != self.update:
            self.run_eval()
        self.checkpoint()
        summary = {"update": self.update, "iteration": self.iteration,
                   "ended_by": ended_by(self.cfg.budget, self.update, self.ledger), **self.ledger.summary()}
        if summary["ended_by"].endswith(")"):
            log.warning("replaylab: %s ended at budget.max_updates=%d %s: it is not matched on that budget with runs "
                        "that reached it; raise budget.max_updates", self.run_dir.name, self.update,
                        summary["ended_by"].split(" ", 1)[1])
        if self.branched_from:
            summary["branched_from"] = self.branched_from
        if self.shared is not None and any(self.shared.hits.values()):
            log.info("replaylab: %s read from the sweep's shared work instead of computing: %s", self.run_dir.name, self.shared.hits)
        if D.is_main():
            self.rows.verify()  # a run is marked done only if its rows are whole
            mark_done(self.run_dir, summary)
        return summary

    def evaluate_now(self) -> list:
        """The periodic evaluation; the initial policy's (update 0) is shared with the sweep's other runs."""
        if self.update == 0 and self.shared is not None:
            return self.shared.initial_evaluation(lambda: self.c.evaluate(0))
        return self.c.evaluate(self.update)

    def tail_due(self) -> bool:
        """A tail evaluation (eval.tail, eval.tail_every) falls in the updates since the last evaluation."""
        e, end = self.cfg.eval, self.cfg.budget.max_updates
        return any(self.last_eval < end - k * e.tail_every <= self.update for k in range(1, e.tail))

    def draw_probe(self) -> None:
        """The fixed initial-policy probe set (`replaylab.training.probe`), drawn before the first update; every
        rank draws the same one (same seed), outside the budget ledger."""
        size = self.cfg.eval.probe_size
        if not size:
            return
        self.c.generator.model_for_scoring()  # distributed: the weight gather is collective
        with self.ledger.timed("probe"):
            self.probe = ProbeSet.draw(self.c.stream.prompts, size, self.cfg.eval.probe_seed, self.c.generator, self.sampling())

    def run_iteration(self) -> dict[str, float]:
        t, ctx = self.cfg.trainer, self.context()
        start_version = self.update
        with self.ledger.timed("strategy"):
            plan = self.c.strategy.plan(ctx)
        fresh: list[Group] = []
        before = self.ledger.seconds.get("generate", 0.0)
        refill: dict[str, float] = {}  # dynamic sampling's counts, for the train row
        filtered: list[Group] = []  # the groups dynamic sampling dropped
        tokens_before = self.ledger.tokens_generated
        if plan.fresh:
            fresh, refill, filtered = self.generate_fresh(plan.fresh, plan.fresh_n, frozenset(plan.reasked))
        fresh = fresh + self.generate_continuations(self.c.strategy.continuations(fresh, plan, ctx))
        gen_seconds = D.all_reduce_max([self.ledger.seconds.get("generate", 0.0) - before])[0]  # the slowest rank's
        gen_tokens = self.ledger.tokens_generated - tokens_before  # every round of dynamic sampling
        initial = self.generate_initial(plan.initial, (t.seed, "initial", self.iteration)) if plan.initial else []
        with self.ledger.timed("strategy"):
            groups = self.c.strategy.compose(fresh, initial, plan, ctx)
        samples = [s for g in groups for s in g.samples]
        if not samples:
            raise RuntimeError(f"strategy {self.cfg.strategy.name!r} planned an empty batch at iteration {self.iteration}")
        self.score(samples)
        self.objective.prepare(groups)
        self.attach_proximal(samples, start_version)
        provenance = Provenance(start_version)
        norms, sketches, loss_metrics = self.train_on(samples, provenance)  # times its own phases
        self.ledger.record_trained(samples, start_version)
        self.ledger.reused_passes += t.resample_period - 1
        self.iteration += 1
        self.ledger.iterations = self.iteration
        stats = UpdateStats(self.iteration - 1, self.update, norms, sketches, loss_metrics)
        if self.stat_groups > 1:
            self.gradient_readings.append(GradientReading(stats.iteration, start_version, self.update, norms).as_list())
        with self.ledger.timed("strategy"):
            if filtered:
                self.c.strategy.observe_filtered(filtered, ctx)
            strategy_metrics = {**plan.metrics, **self.c.strategy.observe(groups, stats, ctx)}
        for s in samples:  # proximal log-probs are only valid for this iteration
            s.proximal_logprobs = None
        metrics = {**loss_metrics, **self.batch_metrics(groups, gen_tokens, gen_seconds, set(plan.reasked), filtered),
                   **provenance.metrics(), **refill}
        ledger = self.ledger.summary()
        self.rows.write("train", self.update, self.iteration, metrics, ledger)
        if strategy_metrics:
            self.rows.write("strategy", self.update, self.iteration, strategy_metrics, ledger)
        return metrics

    def batch_metrics(self, groups: list[Group], gen_tokens: int, gen_seconds: float, reasked: set[str] = frozenset(),
                      dropped: list[Group] = ()) -> dict[str, float]:
        samples = [s for g in groups for s in g.samples]
        out = {
            "response_tokens": sum(s.num_tokens for s in samples) / len(samples),
            "truncation_rate": sum(s.truncated for s in samples) / len(samples),
            # replayed samples, and fresh samples of re-asked prompts (prompt replay reuses the prompt)
            "replay_fraction": sum(s.source != "fresh" or s.prompt.uid in reasked for s in samples) / len(samples),
            # samples that continue a replayed prefix (their suffix is fresh; prefix replay)
            "prefixed_fraction": sum(s.prefix is not None for s in samples) / len(samples),
            "batch_samples": float(len(samples)),
        }
        if gen_seconds > 0 and gen_tokens:
            out["tokens_per_s"] = gen_tokens / gen_seconds
        out.update(self.objective.batch_metrics(groups, dropped))
        return out

    def run_eval(self) -> None:
        scoring_model = self.c.generator.model_for_scoring()  # distributed: a collective gather; then rank 0 alone
        with self.ledger.timed("eval"), self.diverged_if_non_finite():
            results = self.evaluate_now() if self.c.evaluate and D.is_main() else []
        D.barrier()
        ledger = self.ledger.summary()
        for benchmark, metrics, n in results:
            self.rows.write("eval", self.update, self.iteration, metrics, ledger, benchmark=benchmark, n=n)
        if results:
            log.info("%s", eval_line(self.update, results))
        if self.probe is not None and D.is_main():
            with self.ledger.timed("probe"):
                model = scoring_model
                teacher = self.c.teacher.distribution_model() if self.c.teacher is not None else None
                probe = self.probe.measure(model, teacher, self.pad_id, self.cfg.rollout.micro_batch)
            self.rows.write("probe", self.update, self.iteration, probe, ledger)
        self.last_eval = self.update
