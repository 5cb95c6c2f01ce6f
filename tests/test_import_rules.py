"""Stage boundaries, checked by walking every import (module level and inside functions).

The stage folders ``data_gen``, ``train``, ``eval`` and ``policies`` install as ``lrtune.data_gen``,
``lrtune.train``, ``lrtune.eval`` and ``lrtune.policies``; an import of ``lrtune.train...`` counts
as one of the stage ``train``.

- The stages ``data_gen``, ``train`` and ``eval`` never import each other: they talk through
  files and the core (the step-pair dataset's schema, reader and card are ``lrtune.dataset``).
- ``policies`` (the controllers) imports only the core.
- The core ``lrtune`` imports a stage only in its faces: ``cli.py`` and ``pipeline.py`` (every
  stage) and ``build.py`` (``policies``, the controllers a decoder runs); ``doctor.py`` and
  ``doctor_checks.py`` none.
- ``api.py`` is a face with no code of its own: nothing in the core or the stages imports it.
- Nothing imports a stage by its folder name (``import train``): installed, there is none.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("data_gen", "train", "eval")
PACKAGES = ("lrtune", "policies", *STAGES)
FACES = {
    "lrtune/cli.py": set(STAGES) | {"policies"},
    "lrtune/pipeline.py": set(STAGES) | {"policies"},
    "lrtune/build.py": {"policies"},
}


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
            bad += [
                f"{rel}:{line} imports {imp}"
                for line, imp in imported_packages(path)
                if (imp in PACKAGES and imp not in ok) or imp.startswith("bare:")
            ]
    return bad


def test_stages_talk_only_through_files_and_the_core():
    assert violations() == []


def test_tests_and_benchmarks_import_stages_by_their_installed_names():
    bad = [
        f"{p.relative_to(ROOT)}:{line}"
        for folder in ("tests", "benchmarks")
        for p in sorted((ROOT / folder).rglob("*.py"))
        for line, imp in imported_packages(p)
        if imp.startswith("bare:")
    ]
    assert bad == []


def test_the_package_installs_no_generic_top_level_names():
    """``pip install`` adds ``lrtune`` only: the stage folders map into its namespace."""
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {p.split(".")[0] for p in cfg["packages"]} == {"lrtune"}
    assert cfg["package-dir"] == {f"lrtune.{s}": s for s in ("data_gen", "train", "eval", "policies")}


@pytest.mark.parametrize(
    "package,rel,imp,ok",
    [
        ("train", "train/data.py", "data_gen", False),
        ("train", "train/data.py", "lrtune", True),
        ("lrtune", "lrtune/decoder.py", "eval", False),
        ("lrtune", "lrtune/cli.py", "eval", True),
        ("lrtune", "lrtune/api.py", "train", False),
        ("policies", "policies/learned.py", "train", False),
    ],
)
def test_the_rule_itself_refuses_what_it_should(package, rel, imp, ok):
    assert (imp in allowed(package, rel)) is ok


# ---- no import cycles among lrtune's modules (imports inside functions counted) -----------
INSTALLED = {"lrtune": "lrtune", **{p: f"lrtune.{p}" for p in (*STAGES, "policies")}}


def module_files() -> dict[str, Path]:
    """``{installed module name: file}`` of every module of the project."""
    out = {}
    for folder, name in INSTALLED.items():
        for f in (ROOT / folder).rglob("*.py"):
            parts = list(f.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([name, *parts])] = f
    return out


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere in its file (``from a import b``
    counts ``a.b`` when that is a module, else ``a``)."""

    def known(name: str) -> str | None:
        while name and name not in files:
            if "." not in name:
                return None
            name = name.rsplit(".", 1)[0]
        return name

    graph = {m: set() for m in files}
    for m, f in files.items():
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            graph[m] |= {t for t in map(known, names) if t is not None and t != m}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_module_of_lrtune_sits_in_an_import_cycle():
    assert cycles(import_graph(module_files())) == []


def test_nothing_in_the_core_or_the_stages_imports_the_python_api_face():
    graph = import_graph(module_files())
    assert sorted(m for m, targets in graph.items() if "lrtune.api" in targets) == []


def test_the_core_never_imports_the_command_line():
    graph = import_graph(module_files())
    faces = {"lrtune.cli", "lrtune.entry", "lrtune.clidoc", "lrtune.__main__"}
    assert sorted(m for m, targets in graph.items() if "lrtune.cli" in targets and m not in faces) == []


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
