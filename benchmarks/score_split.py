"""Where a score round's time goes, and which of the speedup model's terms the measurement misses.

For every method of an evaluate run whose rounds are all score rounds (``score``/``score+sd``
rows), summed over the run's problems from ``records.jsonl``: rounds, and per round the draft,
prefill (the scoring call), bonus-step (the target's own step with SD) and verify seconds,
drafted and committed steps and tokens. Beside them, each term of
:func:`lrtune.speedup.h_score` as the summary predicted it and as measured, in units of
T = L·t0 (L: mean tokens per drafted step of the row, t0: target-only seconds per token):

    output per round:  model E[J + 1] = Σ_{j≤γ1} α1^j    measured tokens per round / L
    draft:             model c1·γ1                       measured draft s / T
    prefill:           model P = prefill ratio / g(γ2)   measured prefill s / T
    bonus step:        model 1/g(γ2)                     measured bonus s / T

so measured/predicted = (output ratio) / (cost ratio), and the factors say which assumption
(independent acceptance per position, every chain γ1 steps long, a bonus step every round,
accepted steps as long as drafted ones) the run broke. Writes ``score_split.json`` beside the
records and prints one line per row.

    python -m benchmarks.score_split benchmarks/score_rounds/heldout_16_512_int8
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def split(summary: dict, records: list[dict]) -> dict:
    """The per-round split and model terms of every all-score row (see module docstring)."""
    from lrtune.speedup import g

    problems = {r["problem"] for r in records if r["method"] == "target"}
    recs = [r for r in records if r["problem"] in problems]
    base = [r for r in recs if r["method"] == "target"]
    t0 = sum(r["wall_s"] for r in base) / sum(r["tokens"] for r in base)
    c = summary["c_measured"]
    out = {}
    for label, row in summary["methods"].items():
        rs = [r for r in recs if r["method"] == label]

        def total(key: str, rs=rs) -> float:
            return float(sum(r["stats"].get(key) or 0 for r in rs))

        rounds = total("score_rounds")
        if not rs or rounds == 0 or total("sd_rounds") or total("lr_rounds") or row.get("predicted_speedup") is None:
            continue
        tokens = float(sum(r["tokens"] for r in rs))
        drafted_tokens, drafted_steps = total("draft_step_tokens"), total("drafted_steps")
        L = drafted_tokens / drafted_steps
        T = L * t0
        bonus_s = total("target_s") - total("prefill_s")
        a1, a2, g1, g2 = row["alpha1"], row["alpha2"], row["gamma1"], row["gamma2"]
        gg = g(a2, c, g2) if g2 and a2 is not None else 1.0
        model = {
            "output_steps": sum(a1**j for j in range(g1 + 1)),
            "draft": c * g1,
            "prefill": (row["prefill_ratio"] or 0.0) / gg,
            "bonus": 1.0 / gg,
        }
        measured = {
            "output_steps": tokens / rounds / L,
            "draft": total("draft_s") / rounds / T,
            "prefill": total("prefill_s") / rounds / T,
            "bonus": bonus_s / rounds / T,
        }
        cost = {
            k: sum(v for kk, v in d.items() if kk != "output_steps")
            for k, d in (("model", model), ("measured", measured))
        }
        out[label] = {
            "rounds": int(rounds),
            "per_round_s": {
                "draft": total("draft_s") / rounds,
                "prefill": total("prefill_s") / rounds,
                "bonus_step": bonus_s / rounds,
                "verify": total("verify_s") / rounds,
            },
            "per_round": {
                "drafted_steps": drafted_steps / rounds,
                "drafted_tokens": drafted_tokens / rounds,
                "committed_draft_steps": total("committed_draft_steps") / rounds,
                "committed_draft_tokens": (tokens - total("target_step_tokens")) / rounds,
                "bonus_steps": total("committed_target_steps") / rounds,
                "bonus_tokens": total("target_step_tokens") / rounds,
            },
            "step_tokens_L": L,
            "t0_s_per_token": t0,
            "model_T": model,
            "measured_T": measured,
            "output_ratio": measured["output_steps"] / model["output_steps"],
            "cost_ratio": cost["measured"] / cost["model"],
            "speedup_total": row["speedup_total"],
            "predicted_speedup": row["predicted_speedup"],
            "measured_over_predicted": row["measured_over_predicted"],
        }
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="an lrtune evaluate output directory (summary.json, records.jsonl)")
    args = p.parse_args(argv)
    from lrtune.errors import ConfigError
    from lrtune.inputs import read_json_object

    run = Path(args.run)
    try:  # bad input: one line and exit 2, before anything is written
        summary = read_json_object(run / "summary.json", "evaluate summary")
        if not (run / "records.jsonl").is_file() or "methods" not in summary:
            raise ConfigError(
                f"{run} is not an lrtune evaluate output directory (summary.json with methods, records.jsonl)"
            )
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines() if line.strip()]
    rows = split(summary, records)
    for label, r in rows.items():
        s, m, x = r["per_round_s"], r["model_T"], r["measured_T"]
        print(
            f"{label}: {r['rounds']} rounds; per round draft {s['draft']:.2f} s, prefill {s['prefill']:.2f} s, "
            f"bonus step {s['bonus_step']:.2f} s, verify {s['verify']:.3f} s; output {x['output_steps']:.2f} steps "
            f"(model {m['output_steps']:.2f}), cost {sum(v for k, v in x.items() if k != 'output_steps'):.2f} T "
            f"(model {sum(v for k, v in m.items() if k != 'output_steps'):.2f}); measured/predicted "
            f"{r['measured_over_predicted']:.2f} = {r['output_ratio']:.2f} / {r['cost_ratio']:.2f}"
        )
    out = run / "score_split.json"
    out.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
