"""Tasks: problems, prompts and answer checks.

``get_task(name)`` returns an object with ``load(limit, seed, path)``, ``prompt(problem)``
and ``check(problem, completion) -> (extracted answer, correct)``.
"""

from __future__ import annotations

from lrtune.errors import ConfigError
from lrtune.tasks.base import Problem

__all__ = ["Problem", "get_task", "same_outcome", "template_of", "TASKS"]

TASKS = ("gsm_symbolic", "gsm8k", "math500", "aime24", "humaneval", "custom")


def get_task(name: str):
    """The task object for ``name`` (see module docstring); ``A+B`` is a mix of tasks
    (:mod:`lrtune.tasks.mix`)."""
    if "+" in name:
        from lrtune.tasks.mix import Mix

        names = [n.strip() for n in name.split("+")]
        if len(set(names)) != len(names) or any("+" in n or not n for n in names):
            raise ConfigError(f"bad task mix {name!r}: write TASK+TASK, e.g. gsm_symbolic+humaneval")
        return Mix(name, tuple((n, get_task(n)) for n in names))
    if name == "gsm_symbolic":
        from lrtune.tasks import gsm_symbolic

        return gsm_symbolic
    if name == "humaneval":
        from lrtune.tasks import humaneval

        return humaneval
    if name in ("gsm8k", "math500", "aime24", "custom"):
        from lrtune.tasks import math_files

        return {
            "gsm8k": math_files.GSM8K,
            "math500": math_files.MATH500,
            "aime24": math_files.AIME24,
            "custom": math_files.CUSTOM,
        }[name]
    raise ConfigError(f"unknown task {name!r}; choose from {', '.join(TASKS)}, or a mix such as gsm_symbolic+humaneval")


def template_of(task: str, problem_id: str) -> str:
    """The group a problem belongs to for splits: problems of one template never go to two
    splits. gsm_symbolic: the generator template (~100 of them; many problems share one);
    every other task: the problem itself (a HumanEval task is its own template)."""
    if task == "gsm_symbolic" or task.startswith("gsm_symbolic+") or "+gsm_symbolic" in task:
        from lrtune.tasks import gsm_symbolic

        found = gsm_symbolic.template_of(problem_id)
        if found is not None:
            return found
    return f"{task}/{problem_id}"


def own_task(task, problem: Problem):
    """The task that checks ``problem``: ``task`` itself, or for a mix the part it came from."""
    return task.part(problem) if hasattr(task, "part") else task


def same_outcome(task, problem: Problem, completion_a: str, completion_b: str) -> tuple[bool, str | None, str | None]:
    """Whether two completions of ``problem`` end the same way by the task's own checker:
    code tasks (``task.KIND == "code"``) the same pass/fail; math the same final answer
    (:func:`lrtune.tasks.checker.math_equal`). Returns ``(same, outcome_a, outcome_b)``; a
    math completion without an answer is never the same as another, except an identical one
    (the same text ends the same way by construction)."""
    from lrtune.tasks.checker import math_equal

    task = own_task(task, problem)
    (a, ok_a), (b, ok_b) = task.check(problem, completion_a), task.check(problem, completion_b)
    if getattr(task, "KIND", "math") == "code":
        return (
            completion_a == completion_b or ok_a == ok_b,
            "passed" if ok_a else "failed",
            "passed" if ok_b else "failed",
        )
    a, b = (None if x is None else str(x) for x in (a, b))
    return completion_a == completion_b or (a is not None and b is not None and math_equal(a, b)), a, b
