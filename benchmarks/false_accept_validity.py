"""Does the false-accept bound hold on real pairs? Random calibration/test splits by template.

For each verifier (training-free specs scored as decoding scores them, or a checkpoint trained
on other data) and each of ``--splits`` random splits of a labelled collect dataset's templates
(``--unit pair``: of its single pairs) into a calibration half and a test half: the threshold of ``--threshold-rule bound``
(:func:`lrtune.train.calibrate.risk_controlled_threshold`, ε = ``--max-false-accept``,
1 − δ = ``--confidence``) and of the empirical rule ``far`` are set on the calibration half and
the test half's false-accept rate is measured. The bound promises test FAR > ε in at most δ of
the splits (up to the split's own sampling noise of the test half); the empirical rule promises
nothing. Also reported: how often the bound certified a threshold, and the acceptance and the
teacher's acceptance it leaves on the test half.

    python -m benchmarks.false_accept_validity --data results/rollout_labels \\
        --verifiers "embedding;target_logprob;target_logprob(min)" --splits 200 \\
        --out benchmarks/calibration/validity.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a collect directory (or comma list) with teacher labels")
    p.add_argument("--verifiers", default="embedding;target_logprob",
                   help="';'-separated verifier specs or checkpoint directories (trained on other data)")
    p.add_argument("--splits", type=int, default=200, help="random calibration/test splits (>= 100)")
    p.add_argument("--max-false-accept", type=float, default=0.05, help="ε")
    p.add_argument("--confidence", type=float, default=0.9, help="1 - δ")
    p.add_argument("--seed", type=int, default=0, help="seed of the splits")
    p.add_argument("--unit", choices=("template", "pair"), default="template",
                   help="what a split deals out: whole templates (pairs of one template stay together, as in "
                        "training) or single pairs (exchangeable by construction: isolates the effect of clustering)")
    p.add_argument("--out", required=True, help="JSON file to write")
    return p


def split_once(groups: list[str], rng: random.Random) -> set[str]:
    """The calibration half of the templates (the rest is the test half)."""
    keys = sorted(set(groups))
    rng.shuffle(keys)
    return set(keys[:len(keys) // 2])


def rate(scores, labels, groups, args) -> dict:
    """The bound's and the empirical rule's test FAR over ``args.splits`` template splits."""
    from lrtune.train.calibrate import agreement, calibrate_threshold, risk_controlled_threshold

    rng = random.Random(args.seed)
    rows = {"bound": [], "far": []}
    certified = 0
    for _ in range(args.splits):
        cal = split_once(groups, rng)
        ci = [i for i, g in enumerate(groups) if g in cal]
        ti = [i for i, g in enumerate(groups) if g not in cal]
        cs, cl = [scores[i] for i in ci], [labels[i] for i in ci]
        ts, tl = [scores[i] for i in ti], [labels[i] for i in ti]
        bound = risk_controlled_threshold(cs, cl, args.max_false_accept, args.confidence)
        certified += bound["certified"]
        for rule, t in (("bound", bound["threshold"]), ("far", calibrate_threshold(cs, cl, args.max_false_accept)["threshold"])):
            a = agreement(ts, tl, t)
            rows[rule].append({"threshold": t, "far": a["false_accept_rate"], "acceptance": a["acceptance"],
                               "teacher_acceptance": a["teacher_acceptance"], "rejected": a["fp"] + a["tn"]})
    out = {}
    for rule, rs in rows.items():
        fars = [r["far"] for r in rs if r["far"] is not None]
        out[rule] = {"splits": len(rs), "share_far_over_eps": sum(f > args.max_false_accept for f in fars) / len(fars),
                     "test_far_mean": statistics.fmean(fars), "test_far_p90": sorted(fars)[int(0.9 * (len(fars) - 1))],
                     "test_acceptance_mean": statistics.fmean(r["acceptance"] for r in rs),
                     "teacher_acceptance_mean": statistics.fmean(r["teacher_acceptance"] for r in rs),
                     "threshold_median": statistics.median(r["threshold"] for r in rs),
                     "test_rejected_mean": statistics.fmean(r["rejected"] for r in rs)}
    out["bound"]["certified_share"] = certified / args.splits
    return out


def main(argv=None) -> int:
    args = make_parser().parse_args(argv)
    from lrtune.train.data import load_pairs
    from lrtune.train.students import score_pairs
    from lrtune.verifiers import make_verifier

    if args.splits < 1 or not 0 < args.max_false_accept < 1 or not 0 < args.confidence < 1:
        print("false_accept_validity: --splits >= 1, --max-false-accept and --confidence in (0, 1)", file=sys.stderr)
        return 2
    examples, teacher = load_pairs([d.strip() for d in args.data.split(",")])
    labels = [e.label for e in examples]
    groups = [e.split_group for e in examples] if args.unit == "template" else [str(i) for i in range(len(examples))]
    result = {"data": args.data, "teacher": teacher, "pairs": len(examples), "templates": len(set(groups)),
              "teacher_acceptance": sum(labels) / len(labels), "rejected": labels.count(False),
              "max_false_accept": args.max_false_accept, "confidence": args.confidence, "splits": args.splits,
              "seed": args.seed, "unit": args.unit, "verifiers": {}}
    for spec in [s.strip() for s in args.verifiers.split(";") if s.strip()]:
        v = make_verifier(spec)
        scores = score_pairs(v, [e.pair for e in examples])
        result["verifiers"][spec] = rate(scores, labels, groups, args)
        b, f = result["verifiers"][spec]["bound"], result["verifiers"][spec]["far"]
        print(f"{spec}: test FAR > {args.max_false_accept:g} in {b['share_far_over_eps']:.3f} of splits with the bound "
              f"(certified {b['certified_share']:.2f}, acceptance {b['test_acceptance_mean']:.3f}), "
              f"{f['share_far_over_eps']:.3f} with the empirical rule (acceptance {f['test_acceptance_mean']:.3f})")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
