"""Task protocol pieces: a problem, its prompt, and numeric answer extraction/checking."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
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
        if i != -1 and text[start + len("\\boxed") : i].strip() == "":
            depth = 0
            for k in range(i, len(text)):
                if text[k] == "{":
                    depth += 1
                elif text[k] == "}":
                    depth -= 1
                    if depth == 0:
                        return text[i + 1 : k]
        start = text.rfind("\\boxed", 0, start)
    return None


_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


def extract_answer(text: str) -> str | None:
    """The final answer of a solution: last ``\\boxed{}``, else text after ``####``, else the last number."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    if "####" in text:
        tail = text.rsplit("####", 1)[1].strip()
        return tail.splitlines()[0].strip() if tail else None
    nums = _NUM.findall(text)
    return nums[-1] if nums else None
