"""The design page's "Local imports" table, from the code: every module whose functions import
locally, how many import statements, and what they load.

A local import is kept where the import loads a library that costs start-up time (torch,
transformers, vLLM, scikit-learn, numpy, ...) or a module of lrtune that loads one when imported
(shown as ``lrtune.x (numpy)``), and in the few modules named in ``SPECIAL``. Prints Markdown;
``tests/test_import_rules.py`` holds the page's counts to the code.

    python -m benchmarks.local_imports_table
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"lrtune": "lrtune", "data_gen": "lrtune.data_gen", "train": "lrtune.train", "eval": "lrtune.eval"}
FOLDERS["policies"] = "lrtune.policies"
SPECIAL = {
    "lrtune/cli.py": "start-up: `lrtune --help` and each command load only the command they run",
    "lrtune/entry.py": "start-up: the entry point re-runs the process under its heap tunables before anything loads",
    "lrtune/peakmem.py": "`resource` exists on POSIX only",
    "lrtune/verifiers/__init__.py": "the package's face: `lrtune.verifiers.distilled` imports the package",
}


def modules() -> dict[str, Path]:
    """``{installed module name: file}``."""
    out = {}
    for folder, name in FOLDERS.items():
        for f in sorted((ROOT / folder).rglob("*.py")):
            parts = list(f.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([name, *parts])] = f
    return out


MODS = modules()


def home(name: str) -> str | None:
    """The project module a dotted name lives in (longest known prefix)."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in MODS:
            return ".".join(parts[:k])
    return None


def top_level_imports(f: Path) -> set[str]:
    """Names imported at module level (``from a import b``: ``a`` and ``a.b``)."""
    out = set()
    for node in ast.parse(f.read_text(encoding="utf-8")).body:
        for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(sub, ast.Import):
                out |= {a.name for a in sub.names}
            elif isinstance(sub, ast.ImportFrom) and sub.level == 0 and sub.module:
                out |= {sub.module, *(f"{sub.module}.{a.name}" for a in sub.names)}
    return out


_LOADS: dict[str, set[str]] = {}


def loads(mod: str) -> set[str]:
    """Third-party libraries importing project module ``mod`` loads (module level, transitively)."""
    if mod not in _LOADS:
        _LOADS[mod] = set()
        out = set()
        for name in top_level_imports(MODS[mod]):
            h = home(name)
            if h is not None:
                if h != mod:
                    out |= loads(h)
            elif name.split(".")[0] not in sys.stdlib_module_names and name.split(".")[0] not in (
                "lrtune",
                "__future__",
            ):
                out.add(name.split(".")[0])
        _LOADS[mod] = out
    return _LOADS[mod]


def local_imports(f: Path) -> list[ast.Import | ast.ImportFrom]:
    """Import statements inside function bodies, each once."""
    seen: dict[int, ast.AST] = {}
    for fn in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            seen.update({id(n): n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))})
    return list(seen.values())


def what(node) -> str:
    name = node.names[0].name if isinstance(node, ast.Import) else node.module
    if name == "lrtune" and isinstance(node, ast.ImportFrom):  # from lrtune import pricing
        name = f"lrtune.{node.names[0].name}"
    h = home(name)
    if h is None:
        return name.split(".")[0]
    light = {"pydantic", "annotated_types", "yaml", "filelock", "typing_extensions", "pydantic_core"}
    heavy = sorted(loads(h) - light)
    return f"`{h}` ({', '.join(heavy)})" if heavy else f"`{h}`"


def table() -> str:
    rows = []
    for f in sorted(MODS.values()):
        nodes = local_imports(f)
        if nodes:
            rel = str(f.relative_to(ROOT))
            why = SPECIAL.get(rel) or "loads " + ", ".join(sorted({what(n) for n in nodes}))
            rows.append(f"| `{rel}` | {len(nodes)} | {why} |")
    return "\n".join(["| module | local imports | what they load |", "|---|---|---|", *rows])


if __name__ == "__main__":
    print(table())
