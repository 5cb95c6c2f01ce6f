"""Task protocol pieces: a problem, its prompt, and numeric answer extraction/checking."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any


@dataclass(frozen=True)
class Problem:
    id: str
    question: str
    answer: str
    meta: dict[str, Any] = field(default_factory=dict, compare=False)


MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def math_prompt(question: str) -> str:
    """The user message for a math word problem (paper-style instruction)."""
    return f"{question.strip()}\n\n{MATH_INSTRUCTION}"


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (nested braces allowed), or None."""
    start = text.rfind("\\boxed")
    while start != -1:
        i = text.find("{", start)
        if i != -1 and text[start + len("\\boxed"):i].strip() == "":
            depth = 0
            for k in range(i, len(text)):
                if text[k] == "{":
                    depth += 1
                elif text[k] == "}":
                    depth -= 1
                    if depth == 0:
                        return text[i + 1:k]
        start = text.rfind("\\boxed", 0, start)
    return None


_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


def parse_number(s: str) -> Fraction | None:
    """Parse a number like ``1,000``, ``-3.5``, ``7/2``, ``\\frac{7}{2}``, ``$42``; None if absent."""
    s = s.replace("\\!", "").replace("\\,", "").replace("$", "").strip()
    m = re.fullmatch(r"\\d?frac\{(-?\d+)\}\{(\d+)\}", s)
    if m:
        return Fraction(int(m[1]), int(m[2]))
    found = _NUM.findall(s)
    if not found:
        return None
    tok = found[-1].replace(",", "")
    try:
        return Fraction(tok)
    except (ValueError, ZeroDivisionError):
        return None


def extract_answer(text: str) -> str | None:
    """The final answer of a solution: last ``\\boxed{}``, else text after ``####``, else the last number."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    if "####" in text:
        return text.rsplit("####", 1)[1].strip()
    nums = _NUM.findall(text)
    return nums[-1] if nums else None


def numeric_match(pred: str | None, gold: str) -> bool:
    """True when both parse as numbers and are equal (exactly, as fractions)."""
    if pred is None:
        return False
    a, b = parse_number(pred), parse_number(gold)
    return a is not None and b is not None and a == b
