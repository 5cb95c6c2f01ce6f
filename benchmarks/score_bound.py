"""What step acceptance a score round needs to beat SD, from a measured profile (pure model).

For each α1 on a grid: the best score round over γ1 = 1..6 at γ2 = 4, h_score(γ1, 4; α1, c1,
P(γ1), α2, c2) with P(γ1) = (o + π·γ1·L)/L (o, π from the profile's prefill, L tokens per step),
divided by SD alone, g(4; α2, c2). Writes the table and the smallest α1 whose ratio is >= 1.10,
both for a score round that makes the scoring call and for one whose verifier reads no target
score (a draft-only router: no scoring call, P = 0; its accepted steps are prefilled inside the
target's step, whose cost the model's 1/g(γ2) already holds to within a prefill of J·L tokens).

    python -m benchmarks.score_bound --profile benchmarks/score_rounds/profile_int8.json --alpha2 0.92 \\
        --step-tokens 43 --out benchmarks/score_rounds/score_bound.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True, help="an lrtune profile JSON with c1, c2 and prefill")
    p.add_argument("--alpha2", type=float, required=True, help="token acceptance α2 (e.g. an evaluate run's sd row)")
    p.add_argument("--step-tokens", type=float, default=60.0, help="L: tokens per draft step")
    p.add_argument("--out", required=True, help="JSON file to write")
    return p


def main(args) -> int:
    from lrtune.errors import ConfigError
    from lrtune.inputs import read_json_object
    from lrtune.profiling import prefill_per_token
    from lrtune.speedup import g, h_score, score_prefill

    try:  # bad input: one line and exit 2, before anything is written
        prof = read_json_object(args.profile, "profile")
        if not {"c1", "c2"} <= set(prof) or not isinstance(prof.get("prefill"), dict):
            raise ConfigError(
                f"profile {args.profile} has no c1, c2 and prefill: run lrtune profile (--prefill-max > 0)"
            )
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    c1, c2, pre = prof["c1"], prof["c2"], prof["prefill"]
    pi = prefill_per_token(pre)
    sd = g(args.alpha2, c2, 4)
    rows = []
    for a1 in [x / 100 for x in range(50, 100, 2)]:
        best = max(
            (h_score(k, 4, a1, c1, score_prefill(k, pre["overhead_tokens"], pi, args.step_tokens), args.alpha2, c2), k)
            for k in range(1, 7)
        )
        free = max((h_score(k, 4, a1, c1, 0.0, args.alpha2, c2), k) for k in range(1, 7))
        rows.append(
            {
                "alpha1": a1,
                "best_gamma1": best[1],
                "score_speedup": best[0],
                "over_sd": best[0] / sd,
                "best_gamma1_no_prefill": free[1],
                "over_sd_no_prefill": free[0] / sd,
            }
        )
    need = next((r["alpha1"] for r in rows if r["over_sd"] >= 1.10), None)
    need_free = next((r["alpha1"] for r in rows if r["over_sd_no_prefill"] >= 1.10), None)
    out = {
        "profile": args.profile,
        "c1": c1,
        "c2": c2,
        "alpha2": args.alpha2,
        "sd_speedup": sd,
        "prefill_overhead_tokens": pre["overhead_tokens"],
        "prefill_per_token": pi,
        "step_tokens": args.step_tokens,
        "alpha1_for_1.10x_sd": need,
        "alpha1_for_1.10x_sd_no_prefill": need_free,
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"a score round beats SD by 10% from α1 = {need} (without the scoring call: {need_free}); wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(make_parser().parse_args()))
