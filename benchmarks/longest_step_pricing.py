"""Price an LR round's target batch by its longest step, on committed records.

A batched target call over γ1 + 1 steps ends when its longest step ends, but the speedup
model priced it as b(γ1 + 1) mean steps. This re-prices every LR row of an ``lrtune
evaluate`` run with b'(n) = b(n) · E[max of n step lengths] / E[step length]
(:func:`lrtune.speedup.longest_step_batch_cost`), the step lengths being the target's own
steps: each ``target`` record's text, tokenised with the target's tokenizer and split at the
delimiter (capped at ``max_step_tokens``, as the decoder caps them). It writes, per row,
the measured speedup, the prediction with b and with b', and measured/predicted for both;
α, c and b are the run's own (its ``summary.json``). A third prediction also replaces the
i.i.d. E[J + 1] = Σ_{j≤γ1} α1^j by the run's measured committed steps per round (verdicts
at successive positions are not independent): g·E[J + 1] / (c·g·γ1 + b'(γ1 + 1)), g = g(γ2)
(1 without SD). No model runs: only the tokenizer.

    python -m benchmarks.longest_step_pricing --eval benchmarks/decoding_methods/four_methods_fp32 \\
        --out benchmarks/adaptive_depths/longest_step_pricing.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from benchmarks import parse


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--eval", required=True, help="an lrtune evaluate output folder (records.jsonl, summary.json, config.json)"
    )
    p.add_argument("--tokenizer", default="default", help="the target's tokenizer: 'default' or a local model dir")
    p.add_argument("--out", default="benchmarks/adaptive_depths/longest_step_pricing.json", help="result JSON")
    return p


def target_step_lengths(records: list[dict], tokenizer, delimiter: str, max_step_tokens: int) -> list[int]:
    """Token lengths of the steps of every plain-target answer (as the decoder would cut them)."""
    from lrtune.steps import split_steps

    decode = lambda ids: tokenizer.decode(ids)  # noqa: E731
    lengths: list[int] = []
    for r in records:
        if r.get("kind") == "target" and r.get("text"):
            ids = tokenizer.encode(r["text"], add_special_tokens=False)
            lengths += [len(s) for s in split_steps(ids, decode, delimiter=delimiter, max_step_tokens=max_step_tokens)]
    return lengths


def main(args: argparse.Namespace) -> dict:
    from transformers import AutoTokenizer

    from lrtune.eval.metrics import predicted_speedup
    from lrtune.errors import ConfigError
    from lrtune.models import resolve_model
    from lrtune.speedup import expected_longest, g, longest_step_batch_cost

    folder = Path(args.eval)
    try:
        summary = json.loads((folder / "summary.json").read_text())
        config = json.loads((folder / "config.json").read_text())
        records = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        raise SystemExit(f"longest_step_pricing: {folder} is not an evaluate folder ({e})") from None
    decode_cfg = config.get("decode", config)
    delimiter, cap = decode_cfg.get("delimiter", "\n\n"), int(decode_cfg.get("max_step_tokens", 96))
    tok_path = resolve_model(args.tokenizer, "target", progress=False)
    tokenizer = AutoTokenizer.from_pretrained(tok_path)
    lengths = target_step_lengths(records, tokenizer, delimiter, cap)
    if not lengths:
        raise ConfigError(f"{folder}: no target records to take step lengths from")
    b = summary.get("batch_cost") or {}
    c = summary["c_measured"]
    rows = {}
    for label, m in summary["methods"].items():
        if m.get("kind") not in ("lr", "lr+sd") or m.get("control"):
            continue
        g1 = int(m["gamma1"])
        curve = [float(b.get(str(n), 1.0)) for n in range(1, g1 + 2)]
        old = predicted_speedup(m["kind"], g1, m["gamma2"], m["alpha1"], m["alpha2"], c, curve)
        priced = longest_step_batch_cost(curve, lengths)
        new = predicted_speedup(m["kind"], g1, m["gamma2"], m["alpha1"], m["alpha2"], c, priced)
        meas = m["speedup_total"]
        gg = g(m["alpha2"], c, int(m["gamma2"])) if m["kind"] == "lr+sd" else 1.0
        spr = m.get("mean_accepted_steps_per_round")
        both = gg * spr / (c * gg * g1 + priced(g1 + 1)) if spr else None
        rows[label] = {
            "kind": m["kind"],
            "gamma1": g1,
            "gamma2": m["gamma2"],
            "alpha1": m["alpha1"],
            "alpha2": m["alpha2"],
            "measured_speedup": meas,
            "b": curve[-1],
            "b_longest": priced(g1 + 1),
            "predicted_equal_rows": old,
            "predicted_longest_step": new,
            "measured_over_predicted_equal_rows": meas / old if old else None,
            "measured_over_predicted_longest_step": meas / new if new else None,
            "measured_steps_per_round": spr,
            "iid_steps_per_round": sum(m["alpha1"] ** j for j in range(g1 + 1)),
            "predicted_longest_step_measured_acceptance": both,
            "measured_over_predicted_longest_step_measured_acceptance": meas / both if both else None,
        }
    out = {
        "eval": str(folder),
        "tokenizer": str(tok_path),
        "delimiter": delimiter,
        "max_step_tokens": cap,
        "c": c,
        "steps": len(lengths),
        "step_tokens_mean": statistics.fmean(lengths),
        "step_tokens_median": statistics.median(lengths),
        "expected_longest_over_mean": {
            n: expected_longest(lengths, n) / expected_longest(lengths, 1) for n in range(1, 6)
        },
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(
        f"{len(lengths)} target steps: mean {out['step_tokens_mean']:.1f} tokens, median {out['step_tokens_median']}; "
        + ", ".join(f"E[max of {n}]/E = {v:.2f}" for n, v in out["expected_longest_over_mean"].items() if n > 1)
    )
    for label, r in rows.items():
        print(
            f"{label}: measured {r['measured_speedup']:.3f}x; predicted {r['predicted_equal_rows']:.3f}x "
            f"(meas/pred {r['measured_over_predicted_equal_rows']:.2f}) -> longest-step "
            f"{r['predicted_longest_step']:.3f}x "
            f"(meas/pred {r['measured_over_predicted_longest_step']:.2f}) -> with measured steps/round "
            f"{r['measured_steps_per_round']:.2f} (i.i.d. {r['iid_steps_per_round']:.2f}): "
            f"{r['predicted_longest_step_measured_acceptance']:.3f}x "
            f"(meas/pred {r['measured_over_predicted_longest_step_measured_acceptance']:.2f})"
        )
    return out


if __name__ == "__main__":
    main(parse(make_parser()))
