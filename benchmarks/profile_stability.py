"""Is a profile repeatable? b(n) of several `lrtune profile` runs made in a row on one machine.

For every batch size n the script takes the b(n) of each profile, their median m(n), and the
largest relative deviation max_i |b_i(n) − m(n)| / m(n); a size passes when that is at most
``--tolerance`` (0.10). It also reports each profile's t_T (seconds per target token), c1, its
own checks and the machine's load average, so a drifting machine shows beside the curve.

    python -m benchmarks.profile_stability benchmarks/profile_stability/profile_{1,2,3,4,5}.json \\
        --out benchmarks/profile_stability/stability.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from lrtune.batchcost import read_profile_json


def stability(profiles: list[dict], tolerance: float = 0.10) -> dict:
    """Per n: the b(n) of each profile, median, largest relative deviation and pass/fail."""
    sizes = min(len(p["batch_cost"]) for p in profiles)
    rows = []
    for i in range(1, sizes):  # b(1) = 1 by definition
        values = [p["batch_cost"][i] for p in profiles]
        med = statistics.median(values)
        dev = max(abs(v - med) / med for v in values)
        rows.append({"n": i + 1, "values": values, "median": med, "max_deviation": dev, "within": dev <= tolerance})
    return {
        "profiles": len(profiles),
        "tolerance": tolerance,
        "sizes": rows,
        "all_within": all(r["within"] for r in rows),
        "largest_deviation": max(r["max_deviation"] for r in rows),
        "below_one": [r["n"] for r in rows if r["median"] < 1.0],
        "runs": [
            {
                "target_s_per_token": p["target_s_per_token"],
                "c1": p["c1"],
                "checks_failed": (p.get("checks") or {}).get("failed"),
                "remeasured": (p.get("checks") or {}).get("remeasured"),
                "load_avg": p.get("load_avg"),
                "measured_at": p.get("measured_at"),
            }
            for p in profiles
        ],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profiles", nargs="+", help="lrtune profile JSON files, in the order they were made")
    ap.add_argument("--tolerance", type=float, default=0.10, help="largest relative deviation from the median")
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args(argv)
    if len(args.profiles) < 2:
        ap.error("give at least two profiles")
    if Path(args.out).resolve() in {Path(p).resolve() for p in args.profiles}:
        ap.error("--out is one of the profiles")
    profiles = [read_profile_json(p) for p in args.profiles]
    out = {
        "command": "python -m benchmarks.profile_stability " + " ".join(sys.argv[1:]),
        **stability(profiles, args.tolerance),
    }
    out["machine"] = profiles[0].get("machine")
    for r in out["sizes"]:
        vals = " ".join(f"{v:.3f}" for v in r["values"])
        verdict = "ok" if r["within"] else "FAIL"
        print(f"b({r['n']}): {vals}  median {r['median']:.3f}  max dev {r['max_deviation']:.1%}  {verdict}")
    print(f"all within ±{args.tolerance:.0%}: {out['all_within']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
