"""Stage boundaries, checked by walking every import (module level and inside functions).

- The stages ``data_gen``, ``train`` and ``eval`` never import each other: they talk through
  files and the core (the step-pair dataset's schema, reader and card are ``lrtune.dataset``).
- ``policies`` (the controllers) imports only the core.
- The core ``lrtune`` imports a stage only in its faces: ``cli.py`` and ``pipeline.py`` (every
  stage) and ``api.py`` (``policies``, the controllers a decoder runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("data_gen", "train", "eval")
PACKAGES = ("lrtune", "policies", *STAGES)
FACES = {"lrtune/cli.py": set(STAGES) | {"policies"}, "lrtune/pipeline.py": set(STAGES) | {"policies"},
         "lrtune/api.py": {"policies"}}


def imported_packages(path: Path) -> list[tuple[int, str]]:
    """``(line, top-level package)`` of every absolute import in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module.split(".")[0]))
    return out


def allowed(package: str, rel: str) -> set[str]:
    """The packages of this project that module ``rel`` (in ``package``) may import."""
    if package == "lrtune":
        return {"lrtune"} | FACES.get(rel, set())
    if package == "policies":
        return {"lrtune", "policies"}
    return {"lrtune", "policies", package}


def violations() -> list[str]:
    bad = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            ok = allowed(package, rel)
            bad += [f"{rel}:{line} imports {imp}" for line, imp in imported_packages(path)
                    if imp in PACKAGES and imp not in ok]
    return bad


def test_stages_talk_only_through_files_and_the_core():
    assert violations() == []


@pytest.mark.parametrize("package,rel,imp,ok", [
    ("train", "train/data.py", "data_gen", False), ("train", "train/data.py", "lrtune", True),
    ("lrtune", "lrtune/decoder.py", "eval", False), ("lrtune", "lrtune/cli.py", "eval", True),
    ("lrtune", "lrtune/api.py", "train", False), ("policies", "policies/learned.py", "train", False),
])
def test_the_rule_itself_refuses_what_it_should(package, rel, imp, ok):
    assert (imp in allowed(package, rel)) is ok
