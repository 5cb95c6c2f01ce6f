"""Time split per LR round of an evaluate run, by method (issue 22: where a round's time goes,
and what early abort saves).

For every method with LR rounds: rounds, seconds per round (draft / target / verify), target
rows stopped by early abort, target step tokens per round, committed draft steps per round,
summed over the run's problems from ``records.jsonl``. Writes ``round_split.json`` beside it.

    python -m benchmarks.round_split benchmarks/results/eval_issue22_full
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

KEYS = ("rounds", "draft_s", "target_s", "verify_s", "wall_s", "aborted_target_rows", "target_step_tokens",
        "draft_step_tokens", "committed_draft_steps", "drafted_steps", "reused_target_tokens")


def split(records: list[dict]) -> dict[str, dict]:
    """Per method: the summed counters and the per-round means (seconds, rows, tokens)."""
    sums: dict[str, dict] = defaultdict(lambda: dict.fromkeys(KEYS, 0.0))
    problems: dict[str, int] = defaultdict(int)
    for r in records:
        st = r.get("stats") or {}
        if not st.get("rounds"):
            continue
        problems[r["method"]] += 1
        for k in KEYS:
            sums[r["method"]][k] += float(st.get(k) or 0.0)
    out = {}
    for m, s in sums.items():
        n = s["rounds"] or 1.0
        out[m] = {"problems": problems[m], **{k: round(v, 3) for k, v in s.items()},
                  "per_round": {k: round(s[k] / n, 3) for k in KEYS if k != "rounds"}}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="an evaluate output folder (holds records.jsonl)")
    args = p.parse_args(argv)
    run = Path(args.run)
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines() if line.strip()]
    res = split(records)
    (run / "round_split.json").write_text(json.dumps(res, indent=1) + "\n")
    for m, s in res.items():
        pr = s["per_round"]
        print(f"{m}: {s['problems']} problems, {s['rounds']:.0f} rounds; per round draft {pr['draft_s']:.2f} s, "
              f"target {pr['target_s']:.2f} s, verify {pr['verify_s']:.2f} s, wall {pr['wall_s']:.2f} s; "
              f"aborted rows {pr['aborted_target_rows']:.2f}, target step tokens {pr['target_step_tokens']:.1f}, "
              f"committed drafts {pr['committed_draft_steps']:.2f} of {pr['drafted_steps']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
