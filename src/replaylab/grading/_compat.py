"""A one-line compatibility fix for latex2sympy2_extended under antlr4 4.9.3.

replaylab pins antlr4-python3-runtime==4.9.3 because omegaconf/hydra need it. latex2sympy2_extended
ships a parser generated for each antlr version, but its 4.9.3 parser's AtomContext has no
`FUNC_GAMMA()` accessor, while `convert_atom` calls it before it reaches the PERCENT_NUMBER branch.
Every percentage (`5\\%`, `12.5%`) therefore raises AttributeError, math-verify swallows it, and
`\\boxed{5\\%}` vs gold `5\\%` is graded False (and a `5\\%` gold is only string-comparable).

The 4.9.3 grammar never produces a FUNC_GAMMA atom, so the missing accessor returning None is
exactly what a correctly generated parser would return. Patching is idempotent and a no-op on the
parsers generated for antlr 4.11/4.13, which have the accessor.
"""

from __future__ import annotations


def patch_latex2sympy() -> bool:
    """Add the missing accessor if needed; returns whether a patch was applied."""
    from latex2sympy2_extended.antlr_parser import PSParser

    atom = PSParser.AtomContext
    if hasattr(atom, "FUNC_GAMMA"):
        return False
    atom.FUNC_GAMMA = lambda self: None
    return True
