"""How far one LR round travels through the code, and how long the library's functions are; two revisions.

For each revision (``git archive`` into a temporary folder; the measuring script runs on that
tree in a subprocess):

* **round**: the lrtune files and functions that run inside ``LookaheadDecoder.run_round``
  while the deterministic fake pair of the tests (``tests/fake_backend.py``) decodes two
  prompts with ``lr+sd`` (γ1 = 3, γ2 = 2, 48 tokens), under ``--schedule sync``, ``abort``,
  ``reuse`` and ``score``; their lines are the decode core.
* **routes**: the Python call stack, from ``decode_many`` down, at the moment γ2 reaches the
  target's engine call (``generate`` of the target backend) and at the moment the verifier's
  threshold is read (``checked_threshold``): frames, files, hops (consecutive frames in
  different files) and returns (a frame in a file the route had already left).
* **method to γ2**: mentions of ``uses_sd`` in library code outside ``DecodeConfig`` (each a
  place that turns a method's name into "SD or not" again).
* **import time**: seconds ``import`` of the entry points takes (``python -X importtime``), and
  the wall seconds of ``python -m lrtune --help`` (its parser imports every command's options):
  median of five, the two trees measured in turn.
* **functions**: library functions (``lrtune``, ``data_gen``, ``train``, ``eval``,
  ``policies``; nested ones and methods included) over 60 and over 80 lines, the longest ten,
  and import statements inside function bodies.

    python -m benchmarks.round_walk --before 31d4484 --after HEAD --out benchmarks/code_structure/round_walk.json
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import extract_revision, parse, tree_env

LIBRARY = ("lrtune", "data_gen", "train", "eval", "policies")
ENTRY_POINTS = ("lrtune.cli", "lrtune.decoding", "lrtune.pipeline", "lrtune.serve.app")

PROBE = r"""
import json, os, sys
root = sys.argv[1]
sys.path[:0] = [root, os.path.join(root, "tests")]
from fake_backend import FakeBackend, chain
from lrtune.decoder import DecodeConfig, LookaheadDecoder
from lrtune.verifiers import make_verifier

lib = os.path.join(root, "lrtune") + os.sep

def rel(code):
    return os.path.relpath(code.co_filename, root)

def name(code):
    return f"{rel(code)}:{getattr(code, 'co_qualname', code.co_name)}"

def route(frame):
    out = []
    while frame is not None:
        if frame.f_code.co_filename.startswith(lib):
            out.append(name(frame.f_code))
            if frame.f_code.co_name == "decode_many":
                break
        frame = frame.f_back
    return out[::-1]

table = chain(3)
other = chain(103)
result = {"round": {}, "routes": {}}
for schedule in ("sync", "abort", "reuse", "score"):
    target = FakeBackend(table, "target")
    draft = FakeBackend([o if i % 4 == 0 else t for i, (t, o) in enumerate(zip(table, other))], "draft")
    verifier = make_verifier("target_logprob" if schedule == "score" else "exact")
    cfg = DecodeConfig(method="lr+sd", gamma1=3, gamma2=2, max_new_tokens=48, max_step_tokens=6, schedule=schedule)
    dec = LookaheadDecoder(target, draft, verifier, cfg)
    seen, depth, routes = {}, [0], {}

    def prof(frame, event, arg):
        code = frame.f_code
        if event == "call":
            if code.co_name == "run_round" and code.co_filename.endswith(os.path.join("lrtune", "decoder.py")):
                depth[0] += 1
            if depth[0] and code.co_filename.startswith(lib):
                seen.setdefault(rel(code), set()).add(getattr(code, "co_qualname", code.co_name))
            if code.co_name == "generate" and frame.f_locals.get("self") is target and "gamma2" not in routes:
                routes["gamma2"] = route(frame.f_back)
            if code.co_name == "checked_threshold" and "threshold" not in routes:
                routes["threshold"] = route(frame)
        elif event == "return" and code.co_name == "run_round" and code.co_filename.endswith(
            os.path.join("lrtune", "decoder.py")
        ):
            depth[0] -= 1

    sys.setprofile(prof)
    dec.decode_many([[5, 7, 9], [11, 4]], cfg, max_concurrent=2)
    sys.setprofile(None)
    result["round"][schedule] = {f: sorted(fs) for f, fs in sorted(seen.items())}
    result["routes"][schedule] = routes
print(json.dumps(result))
"""


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="git revision before")
    p.add_argument("--after", default="HEAD", help="git revision after")
    p.add_argument("--out", default="benchmarks/code_structure/round_walk.json")
    return p


def route_shape(frames: list[str]) -> dict:
    """Frames, distinct files, hops (consecutive frames in different files) and returns (a
    frame in a file the route had left before) of a call stack, outermost first."""
    files = [f.split(":", 1)[0] for f in frames]
    hops = sum(a != b for a, b in zip(files, files[1:]))
    left: set[str] = set()
    returns = 0
    for a, b in zip(files, files[1:]):
        if a != b:
            left.add(a)
            returns += b in left
    return {"frames": len(frames), "files": len(set(files)), "hops": hops, "returns": returns, "stack": frames}


def functions(root: Path) -> dict:
    """Library functions over 60 and 80 lines, the ten longest, and local imports (per module too)."""
    lengths, local = [], {}
    for pkg in LIBRARY:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = str(path.relative_to(root))
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lengths.append((node.end_lineno - node.lineno + 1, f"{rel}:{node.name}"))
                    n = sum(isinstance(x, (ast.Import, ast.ImportFrom)) for x in ast.walk(node))
                    if n:
                        local[rel] = local.get(rel, 0) + n
    lengths.sort(key=lambda x: (-x[0], x[1]))
    return {
        "over_60": sum(n > 60 for n, _ in lengths),
        "over_80": sum(n > 80 for n, _ in lengths),
        "longest": [{"function": f, "lines": n} for n, f in lengths[:10]],
        "local_imports": sum(local.values()),
        "modules_with_local_imports": len(local),
    }


def _sites(root: Path, word: str) -> int:
    """Lines of library code outside ``lrtune/decodeconfig.py`` that mention ``word``."""
    return sum(
        line.count(word)
        for pkg in LIBRARY
        for path in (root / pkg).rglob("*.py")
        if path.relative_to(root) != Path("lrtune/decodeconfig.py")
        for line in path.read_text().splitlines()
    )


def import_seconds(root: Path, module: str) -> float:
    """Cumulative seconds ``import module`` takes from the tree at ``root`` (python -X importtime)."""
    env = tree_env(root)
    got = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, env=env
    )
    line = next(ln for ln in got.stderr.splitlines() if ln.rstrip().endswith(f"| {module}"))
    return int(line.split("|")[1]) / 1e6


def help_seconds(root: Path) -> float:
    """Wall seconds of ``python -m lrtune --help`` from the tree at ``root`` (the parser imports every command)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "lrtune", "--help"], capture_output=True, env=tree_env(root), cwd=root)
    return time.perf_counter() - t0


def import_times(roots: dict[str, Path], tries: int = 5) -> dict[str, dict[str, float]]:
    """Median import seconds of each entry point per tree, the trees measured in turn."""
    seen: dict[str, dict[str, list[float]]] = {k: {m: [] for m in (*ENTRY_POINTS, "lrtune --help")} for k in roots}
    for _ in range(tries):
        for key, root in roots.items():
            for m in ENTRY_POINTS:
                seen[key][m].append(import_seconds(root, m))
            seen[key]["lrtune --help"].append(help_seconds(root))
    return {k: {m: round(statistics.median(v), 3) for m, v in per.items()} for k, per in seen.items()}


def at_revision(rev: str, root: Path) -> dict:
    """The round's files, routes and functions of the tree of ``rev`` at ``root``."""
    sha = subprocess.run(["git", "rev-parse", "--short", rev], capture_output=True, text=True, check=True)
    got = subprocess.run(
        [sys.executable, "-c", PROBE, str(root)],
        capture_output=True,
        text=True,
        check=True,
        cwd=root.parent,
        env=tree_env(root),
    )
    probe = json.loads(got.stdout.strip().splitlines()[-1])
    files = sorted({f for sched in probe["round"].values() for f in sched})
    core = {f: (root / f).read_text().count("\n") for f in files}
    return {
        "revision": sha.stdout.strip(),
        "round_files": {s: len(fs) for s, fs in probe["round"].items()},
        "round_functions": {
            s: sum(1 for v in fs.values() for q in v if ".<" not in q) for s, fs in probe["round"].items()
        },
        "decode_core_files": core,
        "decode_core_lines": sum(core.values()),
        "method_to_gamma2_sites": _sites(root, "uses_sd"),
        "routes": {s: {k: route_shape(v) for k, v in r.items()} for s, r in probe["routes"].items()},
        "round": probe["round"],
        **functions(root),
    }


def main(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        roots = {}
        for key, rev in (("before", args.before), ("after", args.after)):
            (Path(tmp) / key).mkdir()
            roots[key] = extract_revision(rev, Path(tmp) / key)
        out = {key: at_revision(rev, roots[key]) for key, rev in (("before", args.before), ("after", args.after))}
        for key, times in import_times(roots).items():
            out[key]["import_s"] = times
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    for key, m in out.items():
        sync = m["routes"]["sync"]
        print(
            f"{key} {m['revision']}: round files {m['round_files']}, decode core {m['decode_core_lines']} lines; "
            f"γ2 route {sync['gamma2']['frames']} frames / {sync['gamma2']['files']} files / "
            f"{sync['gamma2']['returns']} returns; threshold route {sync['threshold']['frames']} frames / "
            f"{sync['threshold']['files']} files / {sync['threshold']['returns']} returns; functions over 60 lines "
            f"{m['over_60']}, over 80 {m['over_80']}; local imports {m['local_imports']}"
        )
    return out


if __name__ == "__main__":
    main(parse(make_parser()))
