"""The seed papers' claims as the tiny sweeps can test them (`replaylab claims`, `make tiny-claims`).

Effects of interest: 3 points of tiny8 mean accuracy (the MDE the testbed is asked to reach), 0.05
for fractions and mean |advantage|, 2 tokens of response length, one evaluation interval for
updates-to-level, any saving of rollouts
(the ledger counts them exactly). They say how small a difference would still
matter, so that "covers 0" can be read as "no effect that large" when the MDE is below it.
"""

from __future__ import annotations

from replaylab.results.claims import Check, Claim

ACC = 3.0  # points of the suite mean (tiny8; tinylong for the R-OPD and budget-axes sweeps)
FRACTION = 0.05
EVAL_INTERVAL = 50.0  # updates between evaluations of the tiny GRPO sweeps (trainer.eval_every there)
# The budget-axes cells (conf/axes): queries per iteration, samples per query, resampling period.
AXES = {name: {"prompts_per_iteration": q, "samples_per_prompt": n, "resample_period": k}
        for name, (q, n, k) in {"q64n1k1": (64, 1, 1), "q16n4k1": (16, 4, 1), "q256n1k4": (256, 1, 4),
                                "q64n4k4": (64, 4, 4)}.items()}


def _s(name: str) -> dict[str, str]:
    return {"strategy": name}


# Response budgets (short, long): the R-OPD table and the budget axes both run on the long-reasoning world.
ROPD_BUDGETS = ("tinylong_short", "tinylong_long")
AXES_BUDGETS = ROPD_BUDGETS


def _per_budget(label: str, arm: str, against: str, expect, effect: float = ACC, **kw) -> tuple[Check, ...]:
    return tuple(Check(f"{label} ({b})", _s(arm), _s(against), expect, effect, where={"budget": b}, **kw)
                 for b in ROPD_BUDGETS)


def _not_uniform(what: str, cells: tuple[tuple[str, str], ...]) -> Claim:
    """"`what` is not uniformly better": each (more, less) pair of budget-axes cells, per strategy and budget."""
    return Claim("R-OPD", f"{what} is not uniformly better at matched trajectories and updates", "tiny_budget_axes",
                 tuple(Check(f"{more} - {less}, {s} ({b})", {"strategy": s, **AXES[more]}, {"strategy": s, **AXES[less]},
                             "higher", ACC, where={"budget": b})
                       for more, less in cells for s in ("current", "initial") for b in AXES_BUDGETS),
                 combine="not_uniform")


ROPD = "tiny_ropd"
# Prompt Replay, RLEP, RePO and POPO are tested on one sweep with one shared current-policy arm
# (conf/sweep/tiny_grpo_replay.yaml); the per-paper sweeps add each paper's variants.
GRPO_REPLAY = "tiny_grpo_replay"
CLAIMS: tuple[Claim, ...] = (
    Claim("R-OPD", "R-OPD beats continued current-policy sampling at matched updates", ROPD,
          _per_budget("ropd - current, tinylong mean", "ropd", "current", "higher")),
    Claim("R-OPD", "R-OPD beats the fixed 40+20 schedule (80+40 at tiny scale)", ROPD,
          _per_budget("ropd - fixed_schedule, tinylong mean", "ropd", "fixed_schedule", "higher")),
    Claim("R-OPD", "replaying initial-policy rollouts after current-policy training helps; replaying fixed recent "
          "rollouts does not", ROPD,
          _per_budget("fixed_schedule - current", "fixed_schedule", "current", "higher")
          + _per_budget("recent - current", "recent", "current", "not_higher")),
    Claim("R-OPD", "current-policy rollouts beat initial-policy ones at the short budget; the ranking reverses at the "
          "long one", ROPD,
          (Check(f"current - initial ({ROPD_BUDGETS[0]})", _s("current"), _s("initial"), "higher", ACC,
                 where={"budget": ROPD_BUDGETS[0]}),
           Check(f"current - initial ({ROPD_BUDGETS[1]})", _s("current"), _s("initial"), "lower", ACC,
                 where={"budget": ROPD_BUDGETS[1]}))),
    Claim("R-OPD", "at the same cap R-OPD gives longer responses", ROPD,
          _per_budget("ropd - current, eval response tokens", "ropd", "current", "higher", 2.0,
                      metric="mean_response_tokens")),
    _not_uniform("more queries per iteration", (("q64n1k1", "q16n4k1"), ("q256n1k4", "q64n4k4"))),
    _not_uniform("more frequent resampling", (("q64n1k1", "q256n1k4"), ("q16n4k1", "q64n4k4"))),
    Claim("Prompt Replay", "fewer zero-variance prompts and a larger mean |advantage|", GRPO_REPLAY,
          (Check("zero-variance groups, prompt_replay - current", _s("prompt_replay"), _s("current"), "lower",
                 FRACTION, measure="train_mean", metric="zero_variance_groups"),
           Check("mean |advantage|, prompt_replay - current", _s("prompt_replay"), _s("current"), "higher",
                 FRACTION, measure="train_mean", metric="abs_advantage"))),
    Claim("Prompt Replay", "a faster initial gain, then convergence with the baseline", GRPO_REPLAY,
          (Check("first evaluation, prompt_replay - current", _s("prompt_replay"), _s("current"), "higher", ACC,
                 update="first"),
           Check("final evaluation, prompt_replay - current", _s("prompt_replay"), _s("current"), "same", ACC))),
    Claim("RePO", "more effective optimization steps (fewer zero-advantage groups) and higher accuracy than GRPO",
          GRPO_REPLAY,
          (Check("groups without gradient, repo - current", _s("repo"), _s("current"), "lower", FRACTION,
                 measure="train_mean", metric="inert_groups"),
           Check("final tiny8 mean, repo - current", _s("repo"), _s("current"), "higher", ACC)),
          note="the extra compute is reported by the training-FLOPs row of the RePO table (`replaylab table "
               "runs/tiny_grpo_replay`), not judged"),
    Claim("POPO", "the same accuracy as dynamic sampling with fewer rollouts", GRPO_REPLAY,
          (Check("final tiny8 mean, popo - dapo-dynamic", _s("popo"), _s("dapo-dynamic"), "same", ACC),
           Check("fresh rollouts, popo - dapo-dynamic", _s("popo"), _s("dapo-dynamic"), "lower", 0.0,
                 measure="ledger", metric="fresh_trajectories")),
          note="POPO spends exactly current GRPO's rollouts (it fills zero-variance groups from its buffer instead of "
               "sampling more), so the rollouts it saves are dynamic sampling's; popo - current accuracy is in the "
               "sweep's paired table"),
    Claim("RLEP", "the baseline's peak accuracy in fewer updates, and a higher final accuracy",
          GRPO_REPLAY,
          (Check("updates to current's final accuracy, rlep - current", _s("rlep"), _s("current"), "lower",
                 EVAL_INTERVAL, measure="updates_to_level"),
           Check("final tiny8 mean, rlep - current", _s("rlep"), _s("current"), "higher", ACC)),
          note="the baseline's peak is read as current's final accuracy averaged over the other data orders, a level "
               "fixed before a pair is compared (a pair's own peak favours the baseline: docs/testbed.md)"),
)

# The reference of each sweep's known-effect control (its own late learning must be detected).
CONTROLS: dict[str, str] = {
    "tiny_ropd": "current", GRPO_REPLAY: "current", "tiny_budget_axes": "current",
}
