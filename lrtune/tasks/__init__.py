"""Tasks: problems, prompts and answer checks.

``get_task(name)`` returns an object with ``load(limit, seed, path)``, ``prompt(problem)``
and ``check(problem, completion) -> (extracted answer, correct)``.
"""

from __future__ import annotations

from lrtune.errors import ConfigError
from lrtune.tasks.base import Problem

__all__ = ["Problem", "get_task", "TASKS"]

TASKS = ("gsm_symbolic", "gsm8k", "math500", "aime24", "humaneval", "custom")


def get_task(name: str):
    """The task object for ``name`` (see module docstring)."""
    if name == "gsm_symbolic":
        from lrtune.tasks import gsm_symbolic

        return gsm_symbolic
    if name == "humaneval":
        from lrtune.tasks import humaneval

        return humaneval
    if name in ("gsm8k", "math500", "aime24", "custom"):
        from lrtune.tasks import math_files

        return {"gsm8k": math_files.GSM8K, "math500": math_files.MATH500, "aime24": math_files.AIME24,
                "custom": math_files.CUSTOM}[name]
    raise ConfigError(f"unknown task {name!r}; choose from {', '.join(TASKS)}")
