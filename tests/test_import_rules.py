"""Stage boundaries, checked by walking every import (module level and inside functions).

The stage folders ``data_gen``, ``train``, ``eval`` and ``policies`` install as ``lrtune.data_gen``,
``lrtune.train``, ``lrtune.eval`` and ``lrtune.policies``; an import of ``lrtune.train...`` counts
as one of the stage ``train``.

- The stages ``data_gen``, ``train`` and ``eval`` never import each other: they talk through
  files and the core (the step-pair dataset's schema, reader and card are ``lrtune.dataset``).
- ``policies`` (the controllers) imports only the core.
- The core ``lrtune`` imports a stage only in its faces: ``cli.py`` and ``pipeline.py`` (every
  stage) and ``api.py`` (``policies``, the controllers a decoder runs); ``doctor.py`` and
  ``doctor_checks.py`` none.
- Nothing imports a stage by its folder name (``import train``): installed, there is none.
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


def package_of(module: str) -> str:
    """The project package a module belongs to: ``lrtune.train.verifier`` -> ``train``; the
    bare folder name (``train.verifier``) -> ``bare:train`` (importable only from a checkout)."""
    parts = module.split(".")
    if parts[0] == "lrtune" and len(parts) > 1 and parts[1] in (*STAGES, "policies"):
        return parts[1]
    if parts[0] in (*STAGES, "policies"):
        return "bare:" + parts[0]
    return parts[0]


def imported_packages(path: Path) -> list[tuple[int, str]]:
    """``(line, project package)`` of every absolute import in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, package_of(a.name)) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "lrtune":  # from lrtune import train
                out += [(node.lineno, package_of(f"lrtune.{a.name}")) for a in node.names]
            else:
                out.append((node.lineno, package_of(node.module)))
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
                    if (imp in PACKAGES and imp not in ok) or imp.startswith("bare:")]
    return bad


def test_stages_talk_only_through_files_and_the_core():
    assert violations() == []


def test_tests_and_benchmarks_import_stages_by_their_installed_names():
    bad = [f"{p.relative_to(ROOT)}:{line}" for folder in ("tests", "benchmarks") for p in sorted((ROOT / folder).rglob("*.py"))
           for line, imp in imported_packages(p) if imp.startswith("bare:")]
    assert bad == []


def test_the_package_installs_no_generic_top_level_names():
    """``pip install`` adds ``lrtune`` only: the stage folders map into its namespace."""
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {p.split(".")[0] for p in cfg["packages"]} == {"lrtune"}
    assert cfg["package-dir"] == {f"lrtune.{s}": s for s in ("data_gen", "train", "eval", "policies")}


@pytest.mark.parametrize("package,rel,imp,ok", [
    ("train", "train/data.py", "data_gen", False), ("train", "train/data.py", "lrtune", True),
    ("lrtune", "lrtune/decoder.py", "eval", False), ("lrtune", "lrtune/cli.py", "eval", True),
    ("lrtune", "lrtune/api.py", "train", False), ("policies", "policies/learned.py", "train", False),
])
def test_the_rule_itself_refuses_what_it_should(package, rel, imp, ok):
    assert (imp in allowed(package, rel)) is ok
