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


@lru_cache(maxsize=None)
def tiny8_set(name: str) -> tuple[Problem, ...]:
    if name not in TINY8_SETS:
        raise KeyError(f"unknown tiny8 set {name!r}; allowed: {list(TINY8_SETS)}")
    seed = TINY8_SEED + TINY8_SETS.index(name)
    return tuple(generate([name], TINY8_SIZE, seed, prefix=f"tiny8-{name}"))


@lru_cache(maxsize=1)
def held_out_questions() -> frozenset[str]:
    return frozenset(p.question for name in TINY8_SETS for p in tiny8_set(name))


def training_problems(n: int, seed: int, kinds: tuple[str, ...] = TRAIN_KINDS) -> list[Problem]:
    """The RL training prompt set of the tiny world: `n` distinct problems, none held out."""
    return generate(list(kinds), n, seed, prefix=f"arith-s{seed}", exclude=held_out_questions())
