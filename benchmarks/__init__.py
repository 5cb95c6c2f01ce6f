"""Benchmark scripts (each prints its figures and writes JSON next to its results).

Every script is ``main(args)`` + ``make_parser()``; :func:`parse` adds ``--config FILE``
(YAML, any of the script's options; the command line wins), as every lrtune command has.
"""

from __future__ import annotations

import argparse
import sys


def parse(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """The script's arguments, with defaults from ``--config`` (unknown keys: a one-line error)."""
    from lrtune.configs import load_config_file
    from lrtune.errors import ConfigError

    parser.add_argument("--config", help="YAML file with any of these options (the command line wins)")
    pre, _ = parser.parse_known_args(argv)
    try:
        values = load_config_file(pre.config)
    except ConfigError as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    known = {a.dest for a in parser._actions} - {"help", "config"}
    unknown = sorted(set(values) - known)
    if unknown:
        parser.exit(2, f"{parser.prog}: error: unknown option(s) in {pre.config}: {', '.join(unknown)}\n")
    parser.set_defaults(**values)
    return parser.parse_args(argv if argv is not None else sys.argv[1:])


STAGES = {"lrtune": "lrtune", "lrtune.data_gen": "data_gen", "lrtune.eval": "eval", "lrtune.policies": "policies"}
STAGES["lrtune.train"] = "train"


def extract_revision(rev: str, into):
    """The source tree of git revision ``rev`` (``git archive``), unpacked under ``into``/tree."""
    import subprocess
    import tarfile
    from pathlib import Path

    into = Path(into)
    blob = subprocess.run(["git", "archive", "--format=tar", rev], capture_output=True, check=True).stdout
    (into / "tree.tar").write_bytes(blob)
    with tarfile.open(into / "tree.tar") as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def tree_env(root) -> dict:
    """The environment of a child process that imports lrtune from the source tree at ``root``
    (another revision's ``git archive``): ``PYTHONPATH`` puts the tree first, and a
    ``sitecustomize`` beside it points the editable install's package map (``lrtune.train``,
    ``lrtune.eval``, ... live in top-level folders) at the tree's folders too."""
    import os
    from pathlib import Path

    shim = Path(root).parent / "shim"
    shim.mkdir(exist_ok=True)
    mapping = {k: str(Path(root) / v) for k, v in STAGES.items()}
    (shim / "sitecustomize.py").write_text(
        "try:\n"
        "    import __editable___lrtune_0_1_0_finder as _finder\n"
        f"    _finder.MAPPING.update({mapping!r})\n"
        "except ImportError:\n"
        "    pass\n"
    )
    return {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{shim}", "HF_HUB_OFFLINE": "1"}


def run_child(module: str, spec: dict, timeout: float | None = None):
    """Run ``python -m module --child JSON(spec)`` (a benchmark's one-row mode, which prints its
    result as a JSON line): (the finished process, the last JSON line parsed or None, the last
    line of its stderr)."""
    import json
    import os
    import subprocess

    cmd = [sys.executable, "-m", module, "--child", json.dumps(spec)]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=timeout
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if proc.returncode == 0 and lines else None
    return proc, result, (proc.stderr.strip().splitlines() or ["no output"])[-1]


def child_or_main(parser: argparse.ArgumentParser, main, child) -> None:
    """A script with a ``--child JSON`` mode: print ``child(spec)`` as one JSON line and end the
    process at once (vLLM's engines end with it), else ``main(args)``."""
    import json
    import os

    args = parse(parser)
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        os._exit(0)
    main(args)
