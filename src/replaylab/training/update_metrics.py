"""One update's train metrics, combined over its slices (gradient groups x micro-batches) and ranks.

An update's loss is taken in slices (`trainer.stat_groups`, `trainer.micro_batch`, one shard per rank),
and each slice's loss reports its metrics over its own rows. How they combine depends on what a metric
is, so that a row reads the same whatever the split:

- loss terms (`loss`, `pg_loss`, `kl_loss`): weighted by the slice's share of the minibatch's loss
  normaliser (`Objective.share`), the weights the gradients were summed with;
- counts (`num_tokens`, `num_seqs`): summed;
- extremes (`*_max`, `*_min`): the largest / smallest over the slices;
- per-sequence means (f-OPD's freshness): weighted by the slice's sequences;
- every other metric is a mean over valid tokens (the losses' ratio, clip, advantage, KL and entropy
  means, "over valid tokens of the whole batch"): weighted by the slice's tokens. A slice may say how
  many tokens its means were measured on (`measured_tokens`: GRPO measures on the rows with a
  gradient only); otherwise its `num_tokens`; a loss that reports no counts, its share.

Before 2026-12-07 every metric was share-weighted: counts came out as an average slice's, extremes as an
average of the slices' extremes, and token means under sequence-share aggregation off by the slices'
lengths, so an R-OPD run (four gradient groups) logged other `num_tokens` than current at the same
update though it trained identically.
"""

from __future__ import annotations

import math

from replaylab import parallel as D
from replaylab.objectives.base import MEASURED_TOKENS as MEASURED

LOSS_TERMS = frozenset({"loss", "pg_loss", "kl_loss"})
COUNTS = frozenset({"num_tokens", "num_seqs"})
PER_SEQUENCE = frozenset({"freshness_mean", "freshness_cut_frac", "policy_drift_mean"})


def kind(key: str) -> str:
    if key in LOSS_TERMS:
        return "share"
    if key in COUNTS:
        return "sum"
    if key.endswith("_max"):
        return "max"
    if key.endswith("_min"):
        return "min"
    return "seqs" if key in PER_SEQUENCE else "tokens"


class UpdateMetrics:
    """Accumulates the slices' metrics of one update; `result()` combines them (over ranks too)."""

    def __init__(self) -> None:
        self.num: dict[str, float] = {}
        self.den: dict[str, float] = {}
        self.only: dict[str, float | None] = {}  # the value when exactly one slice reported it (kept exact)

    def add(self, metrics: dict[str, float], share: float, live: bool = True) -> None:
        """One slice's metrics. `live=False`: a rank's dummy slice (no rows), which joins the collectives
        with the same keys but counts for nothing."""
        # an objective that reports no counts (a new one, say) has its means weighted by share, as its loss
        tokens = metrics.get(MEASURED, metrics.get("num_tokens", share))
        seqs = metrics.get("num_seqs", share)
        for key, value in metrics.items():
            if key == MEASURED:
                continue
            k = kind(key)
            if k in ("max", "min"):
                worst = -math.inf if k == "max" else math.inf
                pick = max if k == "max" else min
                self.num[key] = pick(self.num.get(key, worst), value if live else worst)
                self.den[key] = self.den.get(key, 0.0) + live
                continue
            weight = {"share": share, "sum": 1.0, "seqs": seqs, "tokens": tokens}[k]
            weight = float(weight) if live else 0.0
            self.num[key] = self.num.get(key, 0.0) + weight * value
            self.den[key] = self.den.get(key, 0.0) + weight
            if live and weight:
                self.only[key] = value if key not in self.only else None

    def result(self) -> dict[str, float]:
        keys = sorted(self.num)
        if D.world_size() > 1:
            # A rank whose slices lacked some rows reports fewer metrics (every row masked, no replayed row to
            # weight): reduce over the names any rank has, this rank's missing ones neutral (no weight, no peak),
            # else the ranks' collectives would not match (a gloo abort or a deadlock).
            keys = sorted(set(D.all_gather_objects(keys)))
            for k in keys:
                if k not in self.num:
                    self.num[k] = {"max": -math.inf, "min": math.inf}.get(kind(k), 0.0)
                    self.den[k] = 0.0
            sums = [k for k in keys if kind(k) not in ("max", "min")]
            reduced = D.all_reduce_sum([self.num[k] for k in sums] + [self.den[k] for k in keys])
            self.num.update(zip(sums, reduced[: len(sums)]))
            self.den.update(zip(keys, reduced[len(sums):]))
            extremes = [k for k in keys if kind(k) in ("max", "min")]
            signs = [1.0 if kind(k) == "max" else -1.0 for k in extremes]  # a min is the max of the negatives
            if extremes:  # one collective for all of them
                peaks = D.all_reduce_max([s * self.num[k] for s, k in zip(signs, extremes)])
                self.num.update({k: s * v for s, k, v in zip(signs, extremes, peaks)})
            self.only = {}  # several ranks reported: no single slice's value to keep
        # A slice without a loss term (GRPO: every row inert, no forward) leaves it out of that term's
        # share-weighted mean instead of counting as 0; the shares of all slices sum to 1.
        total_share = max((self.den[k] for k in keys if kind(k) == "share"), default=0.0)
        out = {}
        for k in keys:
            num, den, kd = self.num[k], self.den[k], kind(k)
            if self.only.get(k) is not None and kd != "sum":
                out[k] = self.only[k]
            elif kd == "sum":
                out[k] = num
            elif kd in ("max", "min"):
                out[k] = num if den else 0.0
            elif kd == "share":
                out[k] = num * total_share / den if 0 < den < total_share else num
            else:
                out[k] = num / den if den else 0.0
        return out
