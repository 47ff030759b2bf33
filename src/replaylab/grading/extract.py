"""Pull the final answer out of a model response, and normalise answer strings.

Everything here runs in the trainer's process on every response, so it must be linear-time and
safe on hostile input: 100k-character strings, thousands of nested braces, binary garbage,
truncated boxes. Brace matching is one pass over the brace and backslash tokens found by a C
regex scan; there is no recursion anywhere.

`normalize_answer` is applied to BOTH the extracted prediction and the gold before anything else
(the numeric fast path and the math-verify workers), so the two paths see identical strings.
Each rule fixes a false negative that math-verify 0.9.0 gives on an otherwise correct answer; see
tests/data/grading_golden.jsonl for the cases.
"""

from __future__ import annotations

import re

# \boxed{...} and \fbox{...}; whitespace between the command and its brace is legal TeX.
_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
# `\boxed 5` (no braces) is also legal TeX for a one-token argument.
_BOX_BARE = re.compile(r"\\boxed +([^\s${}\\]+)")
# The only tokens that matter for brace matching: escapes (\{ \} \\ ...) and bare braces.
_BRACE_TOKENS = re.compile(r"\\.|[{}]", re.DOTALL)


def extract_answer(response: str) -> str | None:
    """Return the content of the last complete `\\boxed{...}` / `\\fbox{...}` in `response`.

    "Last" is the box that opens last among those whose braces balance, so a response truncated
    inside a final `\\boxed{` still yields its earlier complete box, and `\\boxed{\\boxed{5}}`
    yields `5`. Escaped braces (`\\{1,2\\}`) do not count. Returns None when there is no complete
    box and `""` for an empty one (the caller grades that as no answer).
    """
    if "\\boxed" not in response and "\\fbox" not in response:
        return None
    opens = {m.end() - 1: m.end() for m in _BOX_OPEN.finditer(response)}
    best_start, best_end = -1, -1
    if opens:
        stack: list[int] = []
        for tok in _BRACE_TOKENS.finditer(response):
            ch = tok.group()
            if ch == "{":
                stack.append(tok.start())
            elif ch == "}" and stack:
                start = stack.pop()
                if start in opens and opens[start] > best_start:
                    best_start, best_end = opens[start], tok.start()
    bare = None
    for bare in _BOX_BARE.finditer(response):
        pass  # keep the last one
    if bare is not None and bare.start() > best_start:
        return bare.group(1)
    if best_start < 0:
        return None
    return response[best_start:best_end]


# --- normalisation -------------------------------------------------------------------------------

# `1\,000` (LaTeX thin space as thousands separator) parses as 1*0 in latex2sympy; `1{,}000` and
# `1\!000` are the other spellings seen in MATH solutions.
_THIN_THOUSANDS = re.compile(r"(?<=\d)(?:\\,|\\!|\{,\})(?=\d{3}(?!\d))")
# `4.5e33`: latex2sympy reads a lowercase e as Euler's number (4.5*e*33).
_SCI = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*[eE]\s*([+-]?\d+)")
# `**42**` (markdown bold) is extracted as `42**` by math-verify (Math-Verify #76).
_BOLD = re.compile(r"^\*\*(.*)\*\*$", re.DOTALL)
# Chat models often write Unicode math; latex2sympy only reads TeX (it does know π). `√12` means
# sqrt(12), whereas TeX's `\sqrt 12` is sqrt(1)*2, so a radical's argument gets explicit braces.
_SQRT_RUN = re.compile(r"√\s*(\d+(?:\.\d+)?|[A-Za-z])")
_SQRT_PAREN = re.compile(r"√\s*\(([^()]*)\)")
_UNICODE = str.maketrans({
    "√": "\\sqrt", "∞": "\\infty ", "×": "\\times ", "·": "\\cdot ", "⋅": "\\cdot ",
    "≤": "\\le ", "⩽": "\\le ", "≥": "\\ge ", "⩾": "\\ge ", "≠": "\\ne ", "°": "^\\circ ",
    "\u2212": "-", "½": "\\frac{1}{2}", "⅓": "\\frac{1}{3}", "⅔": "\\frac{2}{3}", "¼": "\\frac{1}{4}",
    "¾": "\\frac{3}{4}", "⅕": "\\frac{1}{5}", "⅙": "\\frac{1}{6}", "⅛": "\\frac{1}{8}",
})


def _unicode_to_tex(s: str) -> str:
    if s.isascii():
        return s
    s = _SQRT_PAREN.sub(r"\\sqrt{\1}", _SQRT_RUN.sub(r"\\sqrt{\1}", s))
    return s.translate(_UNICODE)


def normalize_answer(answer: str) -> str:
    """Rewrite an answer string into a form math-verify reads correctly (see module doc)."""
    s = _unicode_to_tex(answer).strip()
    bold = _BOLD.match(s)
    if bold:
        s = bold.group(1).strip()
    # A sentence-final period inside the box (`\boxed{5.}`) makes the whole answer unparseable.
    if s.endswith(".") and not s.endswith(".."):
        s = s[:-1].rstrip()
    s = _THIN_THOUSANDS.sub("", s)
    sci = _SCI.fullmatch(s)
    if sci:
        s = f"{sci.group(1)}\\times 10^{{{sci.group(2)}}}"
    return s


def response_tail(response: str, max_chars: int) -> str:
    """The last `max_chars` characters, with markdown bold markers removed.

    Used when a response has no box: math-verify then looks for an anchored answer
    ("final answer is 42", "Answer: $x$") in the tail only, which bounds its regex work.
    """
    return response[-max_chars:].replace("**", "")
