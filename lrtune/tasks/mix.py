"""A mix of tasks, ``NAME1+NAME2[+...]``: problems of each task interleaved, each checked by
its own task (math answers or sandboxed tests), e.g. ``gsm_symbolic+humaneval`` (the default
pair is a Coder pair: its home task belongs beside math).

``load(limit)`` takes ⌈limit / k⌉ problems of each of the k tasks (the first ones of each;
``seed`` goes to every generated task) and interleaves them, ``limit`` in all. Every
problem's ``meta["task"]`` names its task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lrtune.errors import ConfigError
from lrtune.tasks.base import Problem


def interleave(lists: list[list]) -> list:
    """The first items of every list, then the second ones, ...: [a0, b0, a1, b1, a2, ...]."""
    return [lst[i] for i in range(max(map(len, lists), default=0)) for lst in lists if i < len(lst)]


@dataclass(frozen=True)
class Mix:
    name: str
    parts: tuple  # (name, task module/object) per part

    @property
    def KIND(self) -> str:  # noqa: N802 - the task attribute the sandbox check reads
        """``code`` when any part runs code (then the sandbox must be there), else ``math``."""
        return "code" if any(getattr(t, "KIND", "math") == "code" for _, t in self.parts) else "math"

    def part(self, problem: Problem):
        """The task that owns ``problem``."""
        name = problem.meta.get("task")
        for n, t in self.parts:
            if n == name:
                return t
        raise ConfigError(f"problem {problem.id} belongs to no task of {self.name}")

    def load(self, limit: int | None = None, seed: int = 0, path: str | None = None) -> list[Problem]:
        if path is not None:
            raise ConfigError(f"the task mix {self.name} takes no --data file")
        each = None if limit is None else math.ceil(limit / len(self.parts))
        lists = []
        for name, t in self.parts:
            probs = t.load(limit=each, seed=seed, path=None)
            lists.append([Problem(p.id, p.question, p.answer, {**p.meta, "task": name}) for p in probs])
        out = interleave(lists)
        return out[:limit] if limit is not None else out

    def balanced(self, problems: list[Problem]) -> list[Problem]:
        """``problems`` (of this mix) regrouped by task and interleaved, each task's in its
        given order: any prefix then holds the tasks in equal shares, as far as each has problems."""
        return interleave([[p for p in problems if p.meta.get("task") == n] for n, _ in self.parts])

    def prompt(self, problem: Problem) -> str:
        return self.part(problem).prompt(problem)

    def check(self, problem: Problem, completion: str):
        return self.part(problem).check(problem, completion)
