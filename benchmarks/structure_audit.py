"""How a revision's code is put together: import cycles, controller pricing, the API face; before and after.

For each revision (``git archive`` into a temporary folder, nothing run): the modules that sit
in an import cycle (imports inside functions counted), the longest modules, the places that
change a controller after it is built (an assignment to a controller's pricing or bounds
outside its own class), the ``hasattr``/``getattr`` probes of a controller's pricing, the
call sites that price a score round (calls of ``speedup``'s ``h_score``/``score_prefill``
outside ``speedup.py``),
the modules of the core and stages that import ``lrtune.api``, the ``price_*`` functions,
lines over 120 characters, ruff's findings with the revision's own configuration, the files
``ruff format`` (120 columns) would change, and the shape of ``ModelConfig`` (its own fields and
its sub-configs by concern).

    python -m benchmarks.structure_audit --before 0ea6bd6 --after HEAD \\
        --out benchmarks/code_structure/structure_audit.json
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.test_import_rules import cycles, import_graph  # the test's rule, applied to any revision's tree

PACKAGES = {
    "lrtune": "lrtune",
    "data_gen": "lrtune.data_gen",
    "train": "lrtune.train",
    "eval": "lrtune.eval",
    "policies": "lrtune.policies",
}
PRICING = ("prefill", "engine_drafts", "round_kinds", "c1", "c2", "batch_cost")
CONTROLLER_NAMES = ("ctl", "controller", "c", "out", "own", "run_ctl")


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of lrtune and its stages."""
    out = {}
    for folder, dotted in PACKAGES.items():
        for f in sorted((root / folder).rglob("*.py")):
            rel = f.relative_to(root / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([dotted, *parts])] = f
    return out


def _is_controller(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in CONTROLLER_NAMES


def controller_sites(files: dict[str, Path], root: Path) -> dict[str, list[str]]:
    """Where a controller's pricing or bounds are assigned from outside it, where it is probed
    for its pricing with hasattr/getattr, and where a score round is priced."""
    mutations, probes, priced = [], [], []
    for mod, f in files.items():
        rel = str(f.relative_to(root))
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and _is_controller(t.value) and t.attr in (*PRICING, "bounds"):
                        mutations.append(f"{rel}:{node.lineno} {t.value.id}.{t.attr}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                fn = node.func.id
                if (
                    fn in ("hasattr", "getattr")
                    and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in PRICING
                ):
                    probes.append(f"{rel}:{node.lineno} {fn}(…, {node.args[1].value!r})")
                if fn in ("h_score", "score_prefill") and not rel.endswith("speedup.py"):
                    priced.append(f"{rel}:{node.lineno} {fn}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("h_score", "score_prefill")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "speedup"
            ):  # speedup.h_score(...); a plan's own method delegates
                priced.append(f"{rel}:{node.lineno} {node.func.attr}")
    return {"post_build_mutations": mutations, "pricing_probes": probes, "score_round_priced_at": priced}


def model_config_shape(files: dict[str, Path]) -> dict:
    """The fields of ``ModelConfig`` wherever it is defined: its own options and its sub-configs
    (a field whose type is another ``...Config`` class), each with its own option count."""
    classes = {}
    for f in files.values():
        for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(n, ast.ClassDef):
                fields = [x for x in n.body if isinstance(x, ast.AnnAssign) and isinstance(x.target, ast.Name)]
                classes[n.name] = [(x.target.id, ast.unparse(x.annotation)) for x in fields]

    def options(name: str) -> int:
        return sum(options(t) if t in classes and t.endswith("Config") else 1 for _, t in classes.get(name, []))

    own = classes.get("ModelConfig", [])
    subs = {t: options(t) for _, t in own if t in classes and t.endswith("Config")}
    return {"own_fields": len(own) - len(subs), "sub_configs": subs, "options": options("ModelConfig")}


def audit(root: Path) -> dict:
    files = module_files(root)
    graph = import_graph(files)
    comps = cycles(graph)
    lines = {str(f.relative_to(root)): len(f.read_text(encoding="utf-8").splitlines()) for f in files.values()}
    long_lines = sum(
        1 for f in files.values() for line in f.read_text(encoding="utf-8").splitlines() if len(line) > 120
    )
    api_users = sorted(m for m, ts in graph.items() if "lrtune.api" in ts and m != "lrtune")
    price_fns = sorted(
        f"{m}.{n.name}"
        for m, f in files.items()
        for n in ast.walk(ast.parse(f.read_text(encoding="utf-8")))
        if isinstance(n, ast.FunctionDef) and n.name.startswith("price_")
    )
    ruff = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--statistics", "--exit-zero", "."],
        cwd=root,
        capture_output=True,
        text=True,
    )
    findings = sum(
        int(line.split()[0]) for line in ruff.stdout.splitlines() if line.split() and line.split()[0].isdigit()
    )
    fmt = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--line-length", "120", "."],
        cwd=root,
        capture_output=True,
        text=True,
    )
    summary = [ln.split()[0] for ln in fmt.stdout.splitlines() if "would be reformatted" in ln]
    unformatted = int(summary[-1]) if summary else 0  # "N files would be reformatted, M files already formatted"
    return {
        "modules": len(files),
        "modules_in_cycles": sum(len(c) for c in comps),
        "cycles": comps,
        "modules_over_600_lines": {k: v for k, v in lines.items() if v > 600},
        "largest_modules": sorted(lines.items(), key=lambda kv: -kv[1])[:5],
        **controller_sites(files, root),
        "price_functions": price_fns,
        "core_and_stage_modules_importing_lrtune_api": api_users,
        "lines_over_120_chars": long_lines,
        "ruff_findings": findings,
        "files_ruff_format_would_change": unformatted,
        "model_config": model_config_shape(files),
    }


def at_revision(rev: str) -> dict:
    """:func:`audit` of ``rev``, with ``counts``: how many of each listed finding."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", rev], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        sha = subprocess.run(
            ["git", "rev-parse", "--short", rev], capture_output=True, text=True, check=True
        ).stdout.strip()
        found = audit(Path(tmp))
        counts = {k: len(v) for k, v in found.items() if isinstance(v, list) and k not in ("cycles", "largest_modules")}
        return {"revision": sha, **found, "counts": counts}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="git revision before the change")
    p.add_argument("--after", default="HEAD", help="git revision after the change")
    p.add_argument("--out", required=True, help="JSON file to write")
    args = p.parse_args(argv)
    result = {
        "before": at_revision(args.before),
        "after": at_revision(args.after),
        "command": "python -m benchmarks.structure_audit (git archive of each revision; nothing run)",
    }
    for key in (
        "modules_in_cycles",
        "post_build_mutations",
        "pricing_probes",
        "score_round_priced_at",
        "price_functions",
        "core_and_stage_modules_importing_lrtune_api",
        "lines_over_120_chars",
        "ruff_findings",
        "files_ruff_format_would_change",
    ):
        b, a = result["before"][key], result["after"][key]
        print(f"{key}: {len(b) if isinstance(b, list) else b} -> {len(a) if isinstance(a, list) else a}")
    print(f"model_config: {result['before']['model_config']} -> {result['after']['model_config']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
