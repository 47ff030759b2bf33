"""`repo`: RePO, replay-enhanced policy optimisation (Li et al., arXiv 2506.09340).

Each prompt keeps a FIFO buffer of its past completions (with their rewards and behaviour
log-probs). When a prompt comes back and its buffer holds at least `min_cache_to_replay` entries,
up to `num_replays` of them are added to its fresh group as off-policy rows, chosen
*before* this iteration's completions enter the buffer, so a step never replays itself.

Off-policy treatment: replayed rows are copies (`Sample.replayed`) whose PPO ratio is
taken against their *stored behaviour* log-probs (`OffPolicy(ratio_base='behaviour')`), clipped
like the online rows; they keep their original `policy_version`. `is_cap` is set to None on them
so a trainer-wide `trainer.is_cap` never adds a second (decoupled) correction on top. The stored
log-probs are the generator's (the paper recomputes them with the training model right after
generation): the same numbers with the HF generator, equal up to engine numerics with vLLM.

Normalisation: `split` (paper default) z-scores online and replayed rewards separately through
`Group.baseline_labels` ("online" / "replay"); `mixed` uses one baseline for the merged group.

Loss (`loss_terms`): `separate` (the paper's) is L = L_on + lambda_off * L_off: the replayed rows are
their own loss term (`OffPolicy.own_term`), aggregated by `trainer.aggregation` over their own rows
of the minibatch, and the KL term (`trainer.kl_coef`, paper beta = 0) covers the online rows only.
`joint` aggregates the merged rows once (an ablation: replayed rows then weigh by their share of
the minibatch's tokens or sequences). `lambda_off` is the replayed rows' `OffPolicy.loss_weight`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from replaylab.config_fields import check, check_choice, defaults_of, knob
from replaylab.replay.base import Plan, ReplayStrategy, StepContext, StrategyConfig, UpdateStats, register_strategy
from replaylab.replay.buffer import PromptBuffer
from replaylab.types import Group, OffPolicy, Sample

SELECTIONS = ("all", "random", "recent", "highest", "max_variance")


@dataclass
class RePOConfig(StrategyConfig):
    name: str = knob("repo", "RePO: fresh groups plus off-policy rows from a per-prompt buffer (Li et al., arXiv 2506.09340)")
    max_cache_size: int = knob(16, "paper launcher: completions kept per prompt (FIFO)")
    min_cache_to_replay: int = knob(16, "paper launcher: replay a prompt only once its buffer holds this many "
                                        "(16 with 8 fresh per visit = from the 3rd visit on, ours)")
    num_replays: int = knob(8, "paper launcher: replayed rows per prompt, k = min(buffer, num_replays)")
    selection: str = knob("highest", "paper launcher for Qwen3 (recent for Qwen2.5-Math): all (whole "
                                     "buffer; num_replays unused) | random | recent | highest (reward) | max_variance")
    normalization: str = knob("split", "paper default: split (online / replay baselines) | mixed")
    lambda_off: float = knob(1.0, "paper default: weight of the replayed rows' loss term")
    loss_terms: str = knob("separate", "paper: separate (L_on + lambda_off L_off, each aggregated over its own rows; KL on "
                                       "online rows only) | joint (one aggregation over the merged rows; an ablation)")
    max_variance_exhaustive: int = knob(20000, "our choice: max_variance searches all k-subsets (the paper's method) "
                                               "up to this many (C(16, 8) = 12870 at the defaults); above, an "
                                               "exact-in-value O(n log n + k^2) search (best_variance_subset)")

    def __post_init__(self) -> None:
        p = "strategy."
        check_choice(self.selection, p + "selection", SELECTIONS)
        check_choice(self.normalization, p + "normalization", ["split", "mixed"])
        check_choice(self.loss_terms, p + "loss_terms", ["separate", "joint"])
        for key in ("max_cache_size", "min_cache_to_replay", "num_replays", "max_variance_exhaustive"):
            check(getattr(self, key) >= 1, p + key, f"must be >= 1, got {getattr(self, key)}")
        check(self.min_cache_to_replay <= self.max_cache_size, p + "min_cache_to_replay",
              f"{self.min_cache_to_replay} > max_cache_size={self.max_cache_size}: the buffer could never replay")
        check(self.num_replays <= self.max_cache_size, p + "num_replays",
              f"{self.num_replays} > max_cache_size={self.max_cache_size}: k = min(buffer, num_replays) never exceeds "
              "the buffer, so every value above it runs the same")
        # settings only one selection reads (a sweep over them under another would compare equal runs)
        default = defaults_of(self)
        check(self.selection != "all" or self.num_replays == default["num_replays"], p + "num_replays",
              f"{self.num_replays} has no effect with strategy.selection=all (the whole buffer is replayed)")
        check(self.selection == "max_variance" or self.max_variance_exhaustive == default["max_variance_exhaustive"],
              p + "max_variance_exhaustive", f"{self.max_variance_exhaustive} has no effect with "
              f"strategy.selection={self.selection} (only max_variance searches subsets)")


def best_variance_subset(rewards: list[float], k: int, exhaustive_limit: int) -> list[int]:
    """Indices of a k-subset with maximal reward variance, ties to the larger reward sum.

    Up to `exhaustive_limit` subsets: the paper's exhaustive search in `itertools.combinations`
    order, first strict improvement wins (so among equal-reward entries the oldest are picked).
    Above: every maximal-variance subset has the reward multiset of "the a smallest plus the k - a
    largest" for some a (swapping a member strictly inside two non-members for the farther one
    raises the variance), so scanning a = 0..k is exact in (variance, sum); only which of several
    equal-reward entries are taken may differ from the exhaustive order.
    """

    def key(idx) -> tuple[float, float]:
        vals = sorted(rewards[i] for i in idx)  # sorted: float sums independent of order
        mean = sum(vals) / len(vals)
        return (sum((v - mean) ** 2 for v in vals) / len(vals), sum(vals))

    n = len(rewards)
    if math.comb(n, k) <= exhaustive_limit:
        candidates = itertools.combinations(range(n), k)
    else:
        order = sorted(range(n), key=lambda i: (rewards[i], i))
        candidates = (order[:a] + order[n - (k - a):] for a in range(k + 1))
    best, best_key = None, None
    for idx in candidates:
        kv = key(idx)
        if best is None or kv > best_key:
            best, best_key = list(idx), kv
    return sorted(best)


@register_strategy
class RePO(ReplayStrategy):
    name = "repo"
    Config = RePOConfig
    trainers = ("grpo",)
    takes_trainer_cap = False  # its replayed rows carry their own ratio treatment

    @classmethod
    def ratio_at_behaviour(cls, strategy_cfg) -> bool:
        return True  # replayed rows: the ratio to their stored behaviour log-probs (the paper's off-policy term)

    def __init__(self, cfg: RePOConfig):
        super().__init__(cfg)
        self.buffer = PromptBuffer(max_per_prompt=cfg.max_cache_size)

    def select(self, stored: list[Sample], ctx: StepContext) -> list[Sample]:
        """The paper's retrieval strategies over one prompt's buffer (oldest first)."""
        cfg = self.cfg
        if len(stored) < cfg.min_cache_to_replay:
            return []
        k = min(len(stored), cfg.num_replays)
        if cfg.selection == "all":
            return list(stored)
        if cfg.selection == "random":
            return ctx.rng.sample(stored, k)
        if cfg.selection == "recent":
            return stored[len(stored) - k:]
        if cfg.selection == "highest":  # stable sort: among equal rewards the oldest first, as in the paper
            return sorted(stored, key=lambda s: -(s.reward or 0.0))[:k]
        idx = best_variance_subset([s.reward or 0.0 for s in stored], k, cfg.max_variance_exhaustive)
        return [stored[i] for i in idx]

    def compose(self, fresh: list[Group], initial: list[Group], plan: Plan, ctx: StepContext) -> list[Group]:
        # Retrieval for every group first, then the buffer update (the paper's steps 2-3).
        chosen = [self.select(self.buffer.items(g.prompt.uid), ctx) for g in fresh]
        for g in fresh:  # stored as copies: the trainer writes advantages into the fresh samples' extras
            self.buffer.extend(g.prompt.uid, [s.replayed(source=s.source) for s in g.samples], ctx.iteration)
        out = []
        for g, stored in zip(fresh, chosen):
            rows = []
            for s in stored:
                r = s.replayed()
                r.off_policy = OffPolicy(ratio_base="behaviour", is_cap=None, cap_from_trainer=False,
                                         loss_weight=self.cfg.lambda_off, own_term=self.cfg.loss_terms == "separate")
                rows.append(r)
            labels = None
            if rows and self.cfg.normalization == "split":
                labels = ["online"] * len(g.samples) + ["replay"] * len(rows)
            out.append(Group(g.prompt, g.samples + rows, labels))
        return out + plan.reuse + initial

    def observe(self, groups: list[Group], stats: UpdateStats, ctx: StepContext) -> dict[str, float]:
        on = [s for g in groups for s in g.samples if s.source == "fresh"]
        off = [s for g in groups for s in g.samples if s.source == "replay"]
        ages = [ctx.update - s.policy_version for s in off]  # updates since the row was generated

        def mean(xs):
            return sum(xs) / len(xs) if xs else None

        return {
            "repo_replayed_rows": float(len(off)),
            "repo_replayed_prompts": float(sum(any(s.source == "replay" for s in g.samples) for g in groups)),
            "repo_effective_samples": float(len(on) + len(off)),
            "repo_online_reward": mean([s.reward or 0.0 for s in on]),
            "repo_offline_reward": mean([s.reward or 0.0 for s in off]),
            "repo_offpolicy_age_mean": mean(ages),
            "repo_offpolicy_age_max": float(max(ages)) if ages else None,
            "repo_buffer_size": float(len(self.buffer)),
        }

    def state_dict(self) -> dict:
        return {"buffer": self.buffer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.buffer.load_state_dict(state["buffer"])
