"""Benchmark: SIGKILL ``lrtune collect`` at random moments mid-write, restart, count rows.

On the tiny built model pair (no hub): an uninterrupted reference collect of ``--problems``
problems, then one output directory that is killed ``--kills`` times, each time as soon as
a random number (1..6) of new files (temp, staged or final parts, manifest temp files) has
appeared, and finally resumed to the end. Records, per kill, whether a reader of
``pairs/*.parquet`` saw only committed problems, and at the end the rows lost and
duplicated against the reference (a multiset comparison). Writes JSON.

    python -m benchmarks.kill_trial --out benchmarks/reliability/kill_trial.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

KEY = ("problem_id", "round", "position", "branch")


def rows_multiset(out: Path) -> Counter:
    """Every pair row's key, counted (duplicates show as counts > 1)."""
    from lrtune.dataset import load_tables

    pairs, _ = load_tables(out)
    return Counter(tuple(r[k] for k in KEY) for r in pairs.to_pylist())


def visible_parts_are_committed(out: Path) -> bool:
    """What a reader of ``pairs/*.parquet`` sees belongs to problems a manifest lists."""
    listed = {
        e["pairs"]["file"] for m in out.glob("manifest-*.json") for e in json.loads(m.read_text())["finished"].values()
    }
    return {f"pairs/{f.name}" for f in (out / "pairs").glob("*.parquet")} <= listed


def _files(out: Path) -> int:
    if not out.is_dir():
        return 0
    return sum(len(os.listdir(out / d)) for d in ("pairs", "problems") if (out / d).is_dir()) + sum(
        1 for _ in out.glob(".manifest*")
    )


def kill_after_files(args: list[str], out: Path, n_new: int, timeout: float = 300.0) -> bool:
    """Run ``lrtune collect ARGS`` and SIGKILL it as soon as ``n_new`` more files have
    appeared under ``out``; False when it finished first."""
    seen = _files(out)
    proc = subprocess.Popen(
        [sys.executable, "-m", "lrtune", "collect", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    t0 = time.time()
    while proc.poll() is None and time.time() - t0 < timeout:
        if _files(out) - seen >= n_new:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.002)
    proc.wait()
    return False


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", type=int, default=12)
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default="results/kill_trial", help="scratch directory (datasets)")
    p.add_argument("--out", default="benchmarks/reliability/kill_trial.json")
    return p


def main(args: argparse.Namespace) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tiny_models import get_tiny_pair, sample_questions

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    data = work / "problems.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "question": q, "answer": str(i)}) + "\n"
            for i, q in enumerate(sample_questions(args.problems, seed=99))
        )
    )
    pair = get_tiny_pair()

    def cli(out: Path) -> list[str]:
        return [
            "--task",
            "custom",
            "--data",
            str(data),
            "--limit",
            str(args.problems),
            "--out",
            str(out),
            "--teacher",
            "exact",
            "--backend",
            "transformers",
            "--target",
            str(pair.target),
            "--draft",
            str(pair.draft),
            "--gamma1",
            "2",
            "--max-new-tokens",
            "48",
            "--max-step-tokens",
            "12",
            "--max-model-len",
            "512",
            "--no-embedding-feature",
            "--no-progress",
            "--max-concurrent",
            "1",
        ]

    import shutil

    for d in ("reference", "killed"):
        shutil.rmtree(work / d, ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "lrtune", "collect", *cli(work / "reference")], check=True, capture_output=True
    )
    want = rows_multiset(work / "reference")
    rng = random.Random(args.seed)
    out = work / "killed"
    kills = []
    while len(kills) < args.kills:
        n = rng.randint(1, 6)
        if not kill_after_files(cli(out), out, n):
            break  # it finished before the kill point
        kills.append(
            {
                "after_new_files": n,
                "visible_parts_committed": visible_parts_are_committed(out),
                "finished_problems": sum(
                    len(json.loads(m.read_text())["finished"]) for m in out.glob("manifest-*.json")
                ),
            }
        )
    subprocess.run([sys.executable, "-m", "lrtune", "collect", *cli(out)], check=True, capture_output=True)
    got = rows_multiset(out)
    res = {
        "problems": args.problems,
        "reference_rows": sum(want.values()),
        "kills": kills,
        "rows_after_resume": sum(got.values()),
        "rows_lost": sum((want - got).values()),
        "rows_duplicated": sum((got - want).values()),
        "leftover_hidden_files": sorted(
            f.name for d in ("pairs", "problems") for f in (out / d).iterdir() if f.name.startswith(".")
        )
        + sorted(f.name for f in out.glob(".manifest*")),
    }
    print(json.dumps(res, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    from benchmarks import parse

    main(parse(make_parser()))
