"""Does the false-accept bound hold on real pairs? Random calibration/test splits by template.

For each verifier (training-free specs scored as decoding scores them, or a checkpoint trained
on other data) and each of ``--splits`` random splits of a labelled collect dataset's templates
(``--unit pair``: of its single pairs) into a calibration half and a test half: the threshold of
``--threshold-rule bound``
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
    p.add_argument(
        "--verifiers",
        default="embedding;target_logprob",
        help="';'-separated verifier specs or checkpoint directories (trained on other data)",
    )
    p.add_argument("--splits", type=int, default=200, help="random calibration/test splits (>= 100)")
    p.add_argument("--max-false-accept", type=float, default=0.05, help="ε")
    p.add_argument("--confidence", type=float, default=0.9, help="1 - δ")
    p.add_argument("--seed", type=int, default=0, help="seed of the splits")
    p.add_argument(
        "--unit",
        choices=("template", "pair"),
        default="template",
        help="what a split deals out: whole templates (pairs of one template stay together, as in "
        "training) or single pairs (exchangeable by construction: isolates the effect of clustering)",
    )
    p.add_argument(
        "--bound-unit",
        choices=("template", "pair"),
        default="template",
        help="the bound's unit of evidence (train verifier's --calibration-unit): template "
        "(Hoeffding-Bentkus over templates) or pair (exact binomial over pairs)",
    )
    p.add_argument(
        "--calibration-share",
        type=float,
        default=0.5,
        help="share of the units dealt to the calibration half (the rest is the test half)",
    )
    p.add_argument("--out", required=True, help="JSON file to write")
    return p


def split_once(groups: list[str], rng: random.Random, share: float = 0.5) -> set[str]:
    """The calibration part of the units (``share`` of them; the rest is the test part)."""
    keys = sorted(set(groups))
    rng.shuffle(keys)
    return set(keys[: int(len(keys) * share)])


def template_far(scores, labels, templates, t: float) -> float | None:
    """The mean over templates with a rejected pair of the share of them that ``t`` lets through
    (the risk the template bound controls)."""
    by: dict[str, list[float]] = {}
    for s, y, g in zip(scores, labels, templates):
        if not y:
            by.setdefault(g, []).append(s)
    return statistics.fmean(sum(s >= t for s in v) / len(v) for v in by.values()) if by else None


def rate(scores, labels, groups, templates, args) -> dict:
    """The bound's and the empirical rule's test FAR over ``args.splits`` splits of ``groups``
    (pooled over pairs, and averaged over ``templates``)."""
    from lrtune.train.calibrate import Budget, agreement, bound_threshold, calibrate_threshold

    budget = Budget(
        max_false_accept=args.max_false_accept, confidence=args.confidence, calibration_unit=args.bound_unit
    )
    rng = random.Random(args.seed)
    rows = {"bound": [], "far": []}
    certified = 0
    for _ in range(args.splits):
        cal = split_once(groups, rng, args.calibration_share)
        ci = [i for i, g in enumerate(groups) if g in cal]
        ti = [i for i, g in enumerate(groups) if g not in cal]
        cs, cl, cg = [scores[i] for i in ci], [labels[i] for i in ci], [templates[i] for i in ci]
        ts, tl, tg = [scores[i] for i in ti], [labels[i] for i in ti], [templates[i] for i in ti]
        bound = bound_threshold(cs, cl, cg, budget)
        certified += bound["certified"]
        for rule, t in (
            ("bound", bound["threshold"]),
            ("far", calibrate_threshold(cs, cl, args.max_false_accept)["threshold"]),
        ):
            a = agreement(ts, tl, t)
            rows[rule].append(
                {
                    "threshold": t,
                    "far": a["false_accept_rate"],
                    "far_templates": template_far(ts, tl, tg, t),
                    "acceptance": a["acceptance"],
                    "teacher_acceptance": a["teacher_acceptance"],
                    "rejected": a["fp"] + a["tn"],
                }
            )
    out = {}
    for rule, rs in rows.items():
        fars = [r["far"] for r in rs if r["far"] is not None]
        by_t = [r["far_templates"] for r in rs if r["far_templates"] is not None]
        out[rule] = {
            "splits": len(rs),
            "share_far_over_eps": sum(f > args.max_false_accept for f in fars) / len(fars),
            "share_template_far_over_eps": sum(f > args.max_false_accept for f in by_t) / len(by_t),
            "test_far_mean": statistics.fmean(fars),
            "test_far_p90": sorted(fars)[int(0.9 * (len(fars) - 1))],
            "test_acceptance_mean": statistics.fmean(r["acceptance"] for r in rs),
            "teacher_acceptance_mean": statistics.fmean(r["teacher_acceptance"] for r in rs),
            "threshold_median": statistics.median(r["threshold"] for r in rs),
            "test_rejected_mean": statistics.fmean(r["rejected"] for r in rs),
        }
    out["bound"]["certified_share"] = certified / args.splits
    return out


def main(argv=None) -> int:
    args = make_parser().parse_args(argv)
    from lrtune.train.data import load_pairs
    from lrtune.train.students import score_pairs
    from lrtune.verifiers import make_verifier

    if (
        args.splits < 1
        or not 0 < args.max_false_accept < 1
        or not 0 < args.confidence < 1
        or not 0 < args.calibration_share < 1
    ):
        print(
            "false_accept_validity: --splits >= 1, --max-false-accept, --confidence and --calibration-share in (0, 1)",
            file=sys.stderr,
        )
        return 2
    examples, teacher = load_pairs([d.strip() for d in args.data.split(",")])
    labels = [e.label for e in examples]
    templates = [e.split_group for e in examples]
    groups = templates if args.unit == "template" else [str(i) for i in range(len(examples))]
    result = {
        "data": args.data,
        "teacher": teacher,
        "pairs": len(examples),
        "templates": len(set(templates)),
        "bound_unit": args.bound_unit,
        "calibration_share": args.calibration_share,
        "teacher_acceptance": sum(labels) / len(labels),
        "rejected": labels.count(False),
        "max_false_accept": args.max_false_accept,
        "confidence": args.confidence,
        "splits": args.splits,
        "seed": args.seed,
        "unit": args.unit,
        "verifiers": {},
    }
    for spec in [s.strip() for s in args.verifiers.split(";") if s.strip()]:
        v = make_verifier(spec)
        scores = score_pairs(v, [e.pair for e in examples])
        result["verifiers"][spec] = rate(scores, labels, groups, templates, args)
        b, f = result["verifiers"][spec]["bound"], result["verifiers"][spec]["far"]
        print(
            f"{spec}: test FAR > {args.max_false_accept:g} in {b['share_far_over_eps']:.3f} of splits "
            f"(template-averaged {b['share_template_far_over_eps']:.3f}) with the {args.bound_unit} bound "
            f"(certified {b['certified_share']:.2f}, acceptance {b['test_acceptance_mean']:.3f}), "
            f"{f['share_far_over_eps']:.3f} with the empirical rule (acceptance {f['test_acceptance_mean']:.3f})"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
