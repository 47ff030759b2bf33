"""math-verify calls for one prepared pair. Runs inside a grading worker process.

Only workers import this module (and hence sympy/antlr/math-verify), so creating a Grader in a
trainer stays cheap. Tests may call it directly, but only from a MAIN thread: math-verify's
timeouts use signal.alarm, which raises in any other thread. Importing it applies the
latex2sympy compatibility patch (_compat.py) to the importing process.

How math-verify is called (following math-verify's documented usage):
- the gold is wrapped in `\\boxed{}` so the parser does not rewrite it, with a `$...$` retry when
  the boxed form yields no sympy expression; LaTeX then plain-expression extraction;
- a boxed prediction is parsed as `\\boxed{answer}` with LaTeX extraction only;
- an unboxed prediction (its tail) is parsed with anchored patterns only ("final answer is",
  "answer:"), so a stray number in the reasoning is never taken as the answer;
- `verify(gold, pred)` is called per (gold, pred) candidate pair with raise_on_error=True, which
  reproduces math-verify's own any-pair semantics while telling timeouts apart from plain "no".
"""

from __future__ import annotations

import logging
from functools import lru_cache

from replaylab.grading._compat import patch_latex2sympy

patch_latex2sympy()

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify  # noqa: E402
from math_verify.errors import TimeoutException  # noqa: E402
from sympy import Basic, MatrixBase  # noqa: E402

from replaylab.grading.result import ERROR, NO_ANSWER, OK, TIMEOUT, UNPARSEABLE_GOLD  # noqa: E402
from replaylab.grading.result import MODE_BOXED, MODE_NONE, MODE_TAIL  # noqa: E402

# math-verify logs every timeout and parse failure at WARNING; the grader counts them instead.
logging.getLogger("math_verify").setLevel(logging.CRITICAL)
logging.getLogger("latex2sympy2_extended").setLevel(logging.CRITICAL)

_GOLD_CONFIG = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())
_BOXED_CONFIG = (LatexExtractionConfig(boxed_match_priority=0),)
# Box matching is off here: the caller already found no complete box, and math-verify's own
# `\\boxed{.+}` pattern would grade a truncated `\\boxed{12` as 12.
_ANCHORED_CONFIG = (
    LatexExtractionConfig(try_extract_without_anchor=False, boxed_match_priority=-1),
    ExprExtractionConfig(try_extract_without_anchor=False),
)


class _GoldTimeout(Exception):
    """The gold took longer than parsing_timeout to parse (lru_cache must not store this)."""


def _has_expression(parsed: list) -> bool:
    return any(isinstance(p, (Basic, MatrixBase)) for p in parsed)


@lru_cache(maxsize=4096)
def _parse_gold(gold: str, parsing_timeout: int) -> tuple:
    """Parsed gold candidates; () when unparseable. Cached: a GRPO group shares one gold."""
    try:
        parsed = parse(
            "\\boxed{" + gold + "}", list(_GOLD_CONFIG),
            parsing_timeout=parsing_timeout, raise_on_error=True,
        )
        if not _has_expression(parsed):
            dollar = parse(
                "$" + gold + "$", list(_GOLD_CONFIG),
                parsing_timeout=parsing_timeout, raise_on_error=True,
            )
            if _has_expression(dollar):
                parsed = dollar
    except TimeoutException as e:
        raise _GoldTimeout(str(e)) from None
    return tuple(parsed)


def _parse_pred(mode: str, text: str, parsing_timeout: int) -> list:
    if mode == MODE_BOXED:
        return parse(
            "\\boxed{" + text + "}", list(_BOXED_CONFIG),
            parsing_timeout=parsing_timeout, raise_on_error=True,
        )
    return parse(
        text, list(_ANCHORED_CONFIG), extraction_mode="first_match",
        parsing_timeout=parsing_timeout, raise_on_error=True,
    )


def grade_prepared(
    mode: str, text: str, gold: str, parsing_timeout: int = 2, timeout_seconds: int = 2
) -> tuple[bool, str, str]:
    """Grade one prepared pair: returns (correct, status, message).

    `gold` and a boxed `text` are already normalised (extract.normalize_answer). The gold is
    checked first, so an unparseable gold is reported as such whatever the response holds.
    """
    try:
        gold_parsed = _parse_gold(gold, parsing_timeout)
    except _GoldTimeout:  # a slow machine, not a bad gold: a timeout (scored 0, counted, not cached)
        return False, TIMEOUT, f"gold parse timed out after {parsing_timeout}s"
    except Exception as e:  # noqa: BLE001 - math-verify's own contract: a failed parse is "no parse"
        return False, UNPARSEABLE_GOLD, f"gold parse raised {type(e).__name__}"
    if not gold_parsed:
        return False, UNPARSEABLE_GOLD, "math-verify extracted nothing from the gold"
    if mode == MODE_NONE or not text.strip():
        return False, NO_ANSWER, ""

    try:
        pred_parsed = _parse_pred(mode, text, parsing_timeout)
    except TimeoutException:
        return False, TIMEOUT, f"prediction parse timed out after {parsing_timeout}s"
    except Exception as e:  # noqa: BLE001
        return False, ERROR, f"prediction parse raised {type(e).__name__}"
    if not pred_parsed:
        return False, (NO_ANSWER if mode == MODE_TAIL else OK), ""

    timed_out = False
    for g in gold_parsed:
        for p in pred_parsed:
            try:
                if verify([g], [p], timeout_seconds=timeout_seconds, raise_on_error=True):
                    return True, OK, ""
            except TimeoutException:
                timed_out = True
            except Exception:  # noqa: BLE001 - math-verify counts a failed comparison as "no"
                pass
    if timed_out:
        return False, TIMEOUT, f"verify timed out after {timeout_seconds}s"
    return False, OK, ""
