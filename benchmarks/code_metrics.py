"""Lines per package and the longest functions, at two revisions.

    python -m benchmarks.code_metrics --before 9510b2b --after HEAD --out benchmarks/code_structure/code_metrics.json

Lines: every line of the package's ``.py`` files. Function length: ``end_lineno - lineno + 1``
of every ``def`` outside ``tests/`` (nested and methods included). Optionally records the
default suite's wall time at each revision (``--suite-before``/``--suite-after``, seconds,
as printed by ``pytest -q``; the script does not run the suite).
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import subprocess
import tarfile
from pathlib import Path

from benchmarks import parse

PACKAGES = ("lrtune", "data_gen", "train", "eval", "policies", "benchmarks", "tests")


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="git revision before")
    p.add_argument("--after", default="HEAD", help="git revision after")
    p.add_argument("--top", type=int, default=10, help="how many of the longest functions")
    p.add_argument("--suite-before", type=float, default=None, help="default suite seconds at --before")
    p.add_argument("--suite-after", type=float, default=None, help="default suite seconds at --after")
    p.add_argument("--out", default="benchmarks/code_structure/code_metrics.json")
    return p


def python_files(rev: str) -> dict[str, str]:
    """{path: source} of the tracked ``.py`` files of ``rev``."""
    blob = subprocess.run(["git", "archive", "--format=tar", rev], capture_output=True, check=True).stdout
    out = {}
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        for m in tar.getmembers():
            if m.isfile() and m.name.endswith(".py") and m.name.split("/", 1)[0] in PACKAGES:
                out[m.name] = tar.extractfile(m).read().decode("utf-8")
    return out


def metrics(files: dict[str, str], top: int) -> dict:
    lines = {p: 0 for p in PACKAGES}
    funcs = []
    for path, src in files.items():
        pkg = path.split("/", 1)[0]
        lines[pkg] += src.count("\n")
        if pkg == "tests":
            continue
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.append({"function": f"{path}:{node.name}", "lines": node.end_lineno - node.lineno + 1})
    funcs.sort(key=lambda f: (-f["lines"], f["function"]))
    return {"lines": lines, "longest_functions": funcs[:top]}


def main(args: argparse.Namespace) -> dict:
    out = {}
    for key, rev, suite in (("before", args.before, args.suite_before), ("after", args.after, args.suite_after)):
        sha = subprocess.run(
            ["git", "rev-parse", "--short", rev], capture_output=True, text=True, check=True
        ).stdout.strip()
        out[key] = {"revision": sha, **metrics(python_files(rev), args.top), "suite_s": suite}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    for key in ("before", "after"):
        m = out[key]
        print(
            f"{key} {m['revision']}: "
            + ", ".join(f"{p} {n}" for p, n in m["lines"].items())
            + (f"; suite {m['suite_s']:.0f} s" if m["suite_s"] else "")
        )
        for f in m["longest_functions"]:
            print(f"  {f['lines']:4d}  {f['function']}")
    return out


if __name__ == "__main__":
    main(parse(make_parser()))
