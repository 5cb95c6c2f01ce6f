"""Tasks: problems, prompts and answer checks. ``get_task(name)`` returns the task module."""

from __future__ import annotations

from types import ModuleType

from lrtune.errors import ConfigError
from lrtune.tasks.base import Problem

__all__ = ["Problem", "get_task", "TASKS"]

TASKS = ("gsm_symbolic",)


def get_task(name: str) -> ModuleType:
    """The task module (``load``, ``prompt``, ``check``) for ``name``."""
    if name == "gsm_symbolic":
        from lrtune.tasks import gsm_symbolic

        return gsm_symbolic
    raise ConfigError(f"unknown task {name!r}; choose from {', '.join(TASKS)}")
