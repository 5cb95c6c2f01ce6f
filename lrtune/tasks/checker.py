"""Math answer checking: numbers first (exact, as fractions), then math-verify (sympy).

``math_equal(pred, gold)`` is the one entry point. A prediction is the text a task
extracted from a completion (``\\boxed{}`` content, text after ``####``, or the last
number); gold is the dataset's answer. Two paths, in order:

1. **numeric**: both sides parse as one number after removing LaTeX noise and units
   (``$1,000``, ``-3.50``, ``7/2``, ``\\frac{7}{2}``, ``18 \\text{ dollars}``, ``25\\%``)
   and are equal as fractions;
2. **symbolic**: `math-verify <https://github.com/huggingface/Math-Verify>`_ parses both
   (as LaTeX, then as plain expressions) and compares them with sympy: ``\\sqrt{2}``,
   intervals, tuples, ``x^2+1 = 1+x^2``, ``\\text{(C)}`` vs ``C``.
"""

from __future__ import annotations

import logging
import re
import threading
from fractions import Fraction

from lrtune.tasks.base import last_boxed

_UNIT_WORDS = re.compile(r"\\(?:text|mbox|mathrm)\{[^{}]*\}")
_NOISE = (
    "\\!",
    "\\,",
    "\\;",
    "\\:",
    "\\ ",
    "\\$",
    "$",
    "\\left",
    "\\right",
    "^\\circ",
    "^{\\circ}",
    "\\%",
    "%",
    "\\displaystyle",
)
_ONE_NUMBER = re.compile(r"^-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?$")
_FRAC = re.compile(r"^(-?)\\[dt]?frac\{?(-?\d+)\}?\{?(\d+)\}?$")


def normalize_number(s: str) -> Fraction | None:
    """``s`` as one exact number, or None when it is not just a number (units allowed)."""
    t = _UNIT_WORDS.sub("", s)
    for n in _NOISE:
        t = t.replace(n, "")
    t = t.strip().rstrip(".")
    # trailing unit words ("18 dollars", "5 cm") and a leading currency/approx sign
    t = re.sub(r"\s*[A-Za-z][A-Za-z .]*$", "", t).strip()
    t = t.lstrip("~≈").strip()
    t = t.replace(" ", "")
    m = _FRAC.match(t)
    if m:
        if int(m[3]) == 0:
            return None
        v = Fraction(int(m[2]), int(m[3]))
        return -v if m[1] else v
    if not _ONE_NUMBER.match(t):
        return None
    try:
        return Fraction(t.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def _symbolic_equal(pred: str, gold: str) -> bool:
    try:
        from math_verify import parse, verify
    except ImportError:  # pragma: no cover - math-verify is a core dependency
        return pred.strip() == gold.strip()
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    # math-verify's timeouts use SIGALRM, which works only in the main thread.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        g = parse(f"${gold}$", parsing_timeout=timeout) or parse(gold, parsing_timeout=timeout)
        p = parse(f"${pred}$", parsing_timeout=timeout) or parse(pred, parsing_timeout=timeout)
        return bool(g and p and verify(g, p, timeout_seconds=timeout))
    except Exception:  # noqa: BLE001 - a checker never crashes an evaluation
        return False


def math_equal(pred: str | None, gold: str) -> bool:
    """True when ``pred`` and ``gold`` are the same answer (see module docstring)."""
    if pred is None or not str(pred).strip():
        return False
    pred, gold = str(pred).strip(), str(gold).strip()
    boxed = last_boxed(gold)
    if boxed is not None:
        gold = boxed
    a, b = normalize_number(pred), normalize_number(gold)
    if a is not None and b is not None:
        return a == b
    if pred == gold:
        return True
    return _symbolic_equal(pred, gold)
