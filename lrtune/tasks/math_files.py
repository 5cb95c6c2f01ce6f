"""Math tasks read from files (or the hub): gsm8k, math500, aime24 and custom JSONL.

Each row needs a question and an answer; the field names below cover the common
releases (GSM8K ``question``/``answer`` with ``#### 42``; MATH-500 ``problem``/``answer``;
AIME ``Problem``/``Answer``). Answers are checked by :func:`lrtune.tasks.checker.math_equal`.
"""

from __future__ import annotations

from dataclasses import dataclass

from lrtune.errors import ConfigError
from lrtune.tasks.base import Problem, extract_answer, math_prompt
from lrtune.tasks.checker import math_equal
from lrtune.tasks.files import pick, read_rows

QUESTION_KEYS = ("question", "problem", "Problem", "Question", "prompt")
ANSWER_KEYS = ("answer", "Answer", "final_answer", "solution")
ID_KEYS = ("id", "unique_id", "ID", "idx")


def check_unique_ids(problems: list[Problem], source: str) -> None:
    """ConfigError when two problems share an id (results are keyed by id: one would be lost)."""
    seen: dict[str, int] = {}
    for i, p in enumerate(problems):
        if p.id in seen:
            raise ConfigError(
                f"{source}: problem id {p.id!r} appears twice (rows {seen[p.id] + 1} and {i + 1}); "
                "give every row a distinct 'id'"
            )
        seen[p.id] = i


@dataclass(frozen=True)
class MathFileTask:
    """A math task whose problems come from a file or a hub dataset."""

    name: str
    hub_name: str | None = None  # used when no path is given (needs a reachable hub)
    hub_split: str = "test"

    def load(self, limit: int | None = None, seed: int = 0, path: str | None = None) -> list[Problem]:
        """Problems in file order (``seed`` is unused: files are fixed); first ``limit``."""
        source = path or self.hub_name
        if not source:
            raise ConfigError(f"task {self.name!r} needs --data PATH (a JSONL/JSON/parquet file)")
        rows = read_rows(source, split=self.hub_split)
        problems = []
        for i, row in enumerate(rows):
            where = f"{source}:{row.get('_line', i + 1)}"
            q = pick(row, QUESTION_KEYS, "question", where)
            a = gold_answer(pick(row, ANSWER_KEYS, "answer", where))
            has_id = any(row.get(k) is not None for k in ID_KEYS)
            pid = pick(row, ID_KEYS, "id", where) if has_id else f"{self.name}-{i}"
            problems.append(Problem(id=pid, question=q, answer=a))
        check_unique_ids(problems, source)
        if limit is not None:
            problems = problems[:limit]
        return problems

    def prompt(self, problem: Problem) -> str:
        return math_prompt(problem.question)

    def check(self, problem: Problem, completion: str) -> tuple[str | None, bool]:
        pred = extract_answer(completion)
        return pred, math_equal(pred, problem.answer)


def gold_answer(raw: str) -> str:
    """The final answer inside a gold solution: after ``####`` (GSM8K) or the last ``\\boxed{}``."""
    if "####" in raw:
        return raw.rsplit("####", 1)[1].strip()
    ans = extract_answer(raw) if "\\boxed" in raw else None
    return ans if ans is not None else raw.strip()


GSM8K = MathFileTask("gsm8k", hub_name="openai/gsm8k", hub_split="test")
MATH500 = MathFileTask("math500", hub_name="HuggingFaceH4/MATH-500", hub_split="test")
AIME24 = MathFileTask("aime24", hub_name="HuggingFaceH4/aime_2024", hub_split="train")
CUSTOM = MathFileTask("custom")
