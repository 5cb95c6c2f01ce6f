"""The CI run on a busy machine: a clean clone's ``.ci/run`` (install from the repo's own files,
then the README's test command) beside one CPU hog per core, started before it and stopped after.

Tests must hold under load (they wait for readiness markers, never for a fixed sleep); this is
the check. It writes the exit status, the suite's summary line and the wall times.

    python -m benchmarks.loaded_suite --out benchmarks/reliability/loaded_suite.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def hog() -> None:  # pragma: no cover - runs in a child process until terminated
    while True:
        pass


def cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return []
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return sorted(f for f in line.split() if f.startswith(("avx512", "avx2", "amx")))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rev", default="HEAD", help="git revision to clone and run")
    p.add_argument("--hogs", type=int, default=os.cpu_count() or 1, help="busy-loop processes beside it")
    p.add_argument("--out", required=True, help="JSON file to write")
    args = p.parse_args(argv)
    sha = subprocess.run(
        ["git", "rev-parse", "--short", args.rev], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="lrtune-loaded-") as tmp:
        clone = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "checkout", "-q", sha], cwd=clone, check=True)
        hogs = [multiprocessing.Process(target=hog, daemon=True) for _ in range(args.hogs)]
        for h in hogs:
            h.start()
        start = time.monotonic()
        try:
            run = subprocess.run([str(clone / ".ci" / "run")], cwd=clone, capture_output=True, text=True)
        finally:
            wall = time.monotonic() - start
            for h in hogs:
                h.terminate()
    out_text = run.stdout + run.stderr
    summary = [ln for ln in out_text.splitlines() if re.search(r"\d+ passed", ln)]
    secs = re.search(r" in ([\d.]+)s", summary[-1]) if summary else None
    result = {
        "revision": sha,
        "command": "python -m benchmarks.loaded_suite --out benchmarks/reliability/loaded_suite.json",
        "hogs": args.hogs,
        "cores": os.cpu_count(),
        "machine": {"processor": platform.processor() or platform.machine(), "cpu_flags": cpu_flags()},
        "exit_status": run.returncode,
        "suite_summary": summary[-1].strip("= ") if summary else None,
        "suite_seconds": float(secs.group(1)) if secs else None,
        "ci_wall_seconds": round(wall, 1),
        "failed": [ln.strip() for ln in out_text.splitlines() if ln.startswith(("FAILED", "ERROR"))],
        "tail": out_text[-1500:] if run.returncode else None,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "tail"}, indent=1))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0 if run.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
