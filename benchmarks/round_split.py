"""Time split per LR round of an evaluate run, by method (where a round's time goes,
and what early abort saves).

For every method with LR rounds: rounds, seconds per round (draft / target / verify), target
rows stopped by early abort, target step tokens per round, committed draft steps per round,
summed over the run's problems from ``records.jsonl``. Writes ``round_split.json`` beside it.

Early abort and draft-prefix reuse change only the target's work: on each problem they draft
exactly what the plain row drafts (same rounds, same draft tokens, greedy). So beside the
wall-time ratio R = Σ wall_ref / Σ wall_m, ``vs_reference`` gives the ratio with the drafting
time of both rows set to the reference row's, R_eq = Σ wall_ref / Σ (wall_m − draft_m + draft_ref),
which removes the timing noise of identical draft work (both with 95% bootstrap intervals over
problems; only problems where the two rows drafted the same tokens in the same rounds).

``ratio_oracle_draft_stop`` bounds what stopping the *drafting* at the first rejection could add
to early abort (drafting is the part of a round abort cannot touch). A drafter that
stops on its own confidence sees a step's confidence only once it has written the step, so at
best it stops right after the step that will be rejected. With abort a round judges only the
positions up to its first rejection, so ``drafted_steps`` (positions judged) of an abort row
counts exactly the steps that drafter writes, and the verdicts (hence the output) are unchanged;
R_oracle = Σ wall_ref / Σ (wall_m − draft_m + draft_ref · judged_m / drafted_ref), the
draft seconds shared out per step (the steps' token lengths are not recorded per position).
For a row without abort it equals R_eq. The target rows a rejection stops are still paid for
up to the rejection, so this is the bound on the draft side only.

    python -m benchmarks.round_split benchmarks/adaptive_depths/eval_full_384
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

KEYS = (
    "rounds",
    "draft_s",
    "target_s",
    "verify_s",
    "wall_s",
    "aborted_target_rows",
    "target_step_tokens",
    "draft_step_tokens",
    "committed_draft_steps",
    "drafted_steps",
    "reused_target_tokens",
)


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
        out[m] = {
            "problems": problems[m],
            **{k: round(v, 3) for k, v in s.items()},
            "per_round": {k: round(s[k] / n, 3) for k in KEYS if k != "rounds"},
        }
    return out


def vs_reference(records: list[dict], reference: str = "lr+sd", n_boot: int = 2000) -> dict[str, dict]:
    """Per LR method: R and R_eq over the reference row (see the module docstring)."""
    from lrtune.eval.metrics import bootstrap_ci

    by = {(r["problem"], r["method"]): r for r in records}
    out = {}
    for m in dict.fromkeys(r["method"] for r in records if (r.get("stats") or {}).get("rounds")):
        if m == reference:
            continue
        pairs = []
        for (prob, meth), r in by.items():
            ref = by.get((prob, reference))
            if meth != m or ref is None:
                continue
            a, b = r["stats"], ref["stats"]
            if (a.get("rounds"), a.get("draft_step_tokens")) != (b.get("rounds"), b.get("draft_step_tokens")):
                continue  # not the same drafts: no equalising
            share = a.get("drafted_steps", 0) / b["drafted_steps"] if b.get("drafted_steps") else 1.0
            pairs.append(
                (
                    ref["wall_s"],
                    r["wall_s"],
                    r["wall_s"] - a["draft_s"] + b["draft_s"],
                    r["wall_s"] - a["draft_s"] + b["draft_s"] * share,
                )
            )
        if not pairs:
            continue
        raw = lambda ps: sum(p[0] for p in ps) / sum(p[1] for p in ps)  # noqa: E731
        eq = lambda ps: sum(p[0] for p in ps) / sum(p[2] for p in ps)  # noqa: E731
        oracle = lambda ps: sum(p[0] for p in ps) / sum(p[3] for p in ps)  # noqa: E731
        ci = lambda f: bootstrap_ci(pairs, f, n_boot=n_boot, seed=0) if len(pairs) > 1 else (f(pairs), f(pairs))  # noqa: E731
        out[m] = {
            "reference": reference,
            "problems": len(pairs),
            "ratio": raw(pairs),
            "ratio_ci95": ci(raw),
            "ratio_equal_drafts": eq(pairs),
            "ratio_equal_drafts_ci95": ci(eq),
            "ratio_oracle_draft_stop": oracle(pairs),
            "ratio_oracle_draft_stop_ci95": ci(oracle),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="an evaluate output folder (holds records.jsonl)")
    p.add_argument("--reference", default="lr+sd", help="the row the others are compared with (vs_reference)")
    args = p.parse_args(argv)
    run = Path(args.run)
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines() if line.strip()]
    res = split(records)
    ref = vs_reference(records, args.reference)
    if ref:
        res["vs_reference"] = ref
    (run / "round_split.json").write_text(json.dumps(res, indent=1) + "\n")
    for m, s in res.items():
        if m == "vs_reference":
            continue
        pr = s["per_round"]
        print(
            f"{m}: {s['problems']} problems, {s['rounds']:.0f} rounds; per round draft {pr['draft_s']:.2f} s, "
            f"target {pr['target_s']:.2f} s, verify {pr['verify_s']:.2f} s, wall {pr['wall_s']:.2f} s; "
            f"aborted rows {pr['aborted_target_rows']:.2f}, target step tokens {pr['target_step_tokens']:.1f}, "
            f"committed drafts {pr['committed_draft_steps']:.2f} of {pr['drafted_steps']:.2f}"
        )
    for m, v in ref.items():
        lo, hi = v["ratio_ci95"]
        elo, ehi = v["ratio_equal_drafts_ci95"]
        olo, ohi = v["ratio_oracle_draft_stop_ci95"]
        print(
            f"{m} over {v['reference']} ({v['problems']} problems): {v['ratio']:.3f} [{lo:.3f}, {hi:.3f}]; "
            f"drafting equalised {v['ratio_equal_drafts']:.3f} [{elo:.3f}, {ehi:.3f}]; "
            f"drafting stopped at the first rejection (oracle) {v['ratio_oracle_draft_stop']:.3f} "
            f"[{olo:.3f}, {ohi:.3f}]"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
