"""`tiny8`: the tiny world's eight held-out test sets, one per problem kind.

Two of them are harder than anything in training (four terms; three-digit operands), the rest
span the training kinds' difficulty levels. Each has a fixed seed and size, so every run, table
and checkpoint is scored on exactly the same questions; their question texts are excluded from
every training stream (SFT and RL).
"""

from __future__ import annotations

from functools import lru_cache

from replaylab.tasks.arithmetic import Problem, generate

# Problems per set. 300 (2 400 in all): the suite mean of one evaluation has a standard error of about
# 1 point at 30-50% accuracy (5 points per set at 100 made a 2-point strategy difference invisible).
TINY8_SIZE = 300
TINY8_SEED = 12345
TINY8_SETS: tuple[str, ...] = ("add2", "sub2", "mul", "add3", "addmul", "mulsub", "add4", "add3d")
# Kinds the RL training prompts draw from. add4 and add3d (level 4) stay out: they are harder than
# anything the student is trained on with RL and measure transfer. The SFT stream that builds the
# teacher covers all eight kinds (SFT_KINDS), so the teacher can solve and score them.
TRAIN_KINDS: tuple[str, ...] = ("add2", "sub2", "mul", "add3", "addmul", "mulsub")
SFT_KINDS: tuple[str, ...] = TINY8_SETS


# The long-reasoning variant (`tinylong`): running sums of 6 to 14 two-digit terms, responses of about
# 70-170 tokens, for a response-budget axis that binds (tiny8's answers take ~30 tokens, so 32 vs 64
# tokens barely differ). Its world is built on TINYLONG_SFT_KINDS (`tiny.kinds`), RL draws from
# TINYLONG_TRAIN_KINDS (`data=tiny_long`), and add14, longer than anything RL trains on, measures transfer.
TINYLONG_SIZE = 200
TINYLONG_SEED = 23456
TINYLONG_SETS: tuple[str, ...] = ("add6", "add8", "add10", "add12", "add14")
TINYLONG_TRAIN_KINDS: tuple[str, ...] = ("add6", "add8", "add10", "add12")
TINYLONG_SFT_KINDS: tuple[str, ...] = ("add2", "add3", "add4", *TINYLONG_SETS)
# suite -> (its sets, problems per set, seed of its first set)
SUITES: dict[str, tuple[tuple[str, ...], int, int]] = {
    "tiny8": (TINY8_SETS, TINY8_SIZE, TINY8_SEED),
    "tinylong": (TINYLONG_SETS, TINYLONG_SIZE, TINYLONG_SEED),
}


@lru_cache(maxsize=None)
def eval_set(suite: str, name: str) -> tuple[Problem, ...]:
    """The held-out problems of set `name` (a problem kind) of tiny suite `suite`."""
    if suite not in SUITES:
        raise KeyError(f"unknown tiny suite {suite!r}; allowed: {sorted(SUITES)}")
    sets, size, seed = SUITES[suite]
    if name not in sets:
        raise KeyError(f"unknown {suite} set {name!r}; allowed: {list(sets)}")
    return tuple(generate([name], size, seed + sets.index(name), prefix=f"{suite}-{name}"))


def tiny8_set(name: str) -> tuple[Problem, ...]:
    return eval_set("tiny8", name)


@lru_cache(maxsize=None)
def held_out_questions(kinds: tuple[str, ...] | None = None) -> frozenset[str]:
    """The questions of every held-out set whose kind is in `kinds` (None: every kind): what a
    training stream over `kinds` must leave out. A stream can only draw questions of its own kinds,
    so the sets of other kinds need not be named (and a world's cache key stays as it was when a
    suite of new kinds is added)."""
    return frozenset(p.question for suite, (sets, _, _) in SUITES.items() for name in sets
                     if kinds is None or name in kinds for p in eval_set(suite, name))


def training_problems(n: int, seed: int, kinds: tuple[str, ...] = TRAIN_KINDS) -> list[Problem]:
    """The RL training prompt set of the tiny world: `n` distinct problems, none held out."""
    return generate(list(kinds), n, seed, prefix=f"arith-s{seed}", exclude=held_out_questions(tuple(kinds)))
