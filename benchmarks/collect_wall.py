"""A collect run's wall time against the one-at-a-time run of the same collect.

    python -m benchmarks.collect_wall --data results/collect_batched \\
        --wall benchmarks/teacher_labels/llmjudge_50_batched/wall_time.json \\
        --out benchmarks/teacher_labels/llmjudge_50_batched/summary.json

Reads the dataset (pairs, judge seconds, per-problem decode seconds) and the job wall time the
script measured; writes both with the ratio to the committed baseline (8189 s of decode alone,
one problem at a time, 480 pairs judged at a median 4.25 s: collect_gsm_llmjudge/README.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from benchmarks import parse

BASELINE = {
    "source": "benchmarks/teacher_labels/llmjudge_50/README.md",
    "decode_wall_s": 8189.0,
    "pairs": 480,
    "judge_s_per_pair_median": 4.25,
    "max_concurrent": 1,
}


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="the collect output folder")
    p.add_argument("--wall", required=True, help="wall_time.json written by collect_batched.sh")
    p.add_argument("--out", required=True, help="summary JSON to write")
    return p


def main(args: argparse.Namespace) -> dict:
    from lrtune.dataset import load_tables

    pairs, probs = load_tables(Path(args.data))
    judge = [x for x in pairs.column("judge_s").to_pylist() if x is not None]
    wall = json.loads(Path(args.wall).read_text())
    rows = probs.to_pylist()
    out = {
        "problems": len(rows),
        "pairs": pairs.num_rows,
        "max_concurrent": wall["max_concurrent"],
        "job_wall_s": wall["collect_wall_s"],
        "judge_s_total": sum(judge),
        "judge_s_per_pair_median": statistics.median(judge) if judge else None,
        "per_problem_decode_s_summed": sum(r["wall_s"] or 0.0 for r in rows),
        "finished": sum(bool(r.get("finished")) for r in rows),
        "baseline": BASELINE,
    }
    out["baseline_decode_over_job_wall"] = BASELINE["decode_wall_s"] / out["job_wall_s"]
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(
        f"{out['problems']} problems, {out['pairs']} pairs with {out['max_concurrent']} in flight: job wall "
        f"{out['job_wall_s']:.0f} s (model loading and the teacher's {out['judge_s_total']:.0f} s included) vs "
        f"{BASELINE['decode_wall_s']:.0f} s of decoding alone one at a time: "
        f"{out['baseline_decode_over_job_wall']:.2f}x"
    )
    return out


if __name__ == "__main__":
    main(parse(make_parser()))
