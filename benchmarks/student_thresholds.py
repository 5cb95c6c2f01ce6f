"""Is a student's agreement gap its ranking or its threshold?

Re-scores a trained student checkpoint on the validation and test splits it was trained with
(same data, split fractions and seed, read from its ``train_config.json``), and rates it on
test at three thresholds:

- ``calibrated``: the checkpoint's own (max acceptance s.t. validation FAR <= its cap);
- ``val_best_accuracy``: the threshold that maximises agreement on validation (no FAR cap);
- ``test_oracle``: the best agreement any threshold reaches on test (an upper bound, peeks
  at test; never a deployable choice).

It also sweeps the validation FAR cap and prints test agreement, FAR and acceptance at each.
Agreement = fraction of test pairs where the student's accept/reject equals the teacher label.

    python -m benchmarks.student_thresholds --student results/students_rollout_headtail/features \\
        --out benchmarks/distilled_verifiers/rollout_headtail/features_thresholds.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--student", required=True, help="a `lrtune train verifier` output directory")
    p.add_argument("--caps", default="0.02,0.05,0.10,0.15,0.20,0.30", help="validation FAR caps to sweep")
    p.add_argument("--out", required=True, help="JSON file to write")
    return p


def best_accuracy_threshold(scores, labels) -> float:
    """:func:`lrtune.train.calibrate.best_agreement_threshold` (the highest-agreement threshold; ties
    go to the highest)."""
    from lrtune.train.calibrate import best_agreement_threshold

    return best_agreement_threshold(scores, labels)


def main(args) -> int:
    from lrtune import verifiers
    from lrtune.train import students
    from lrtune.train.calibrate import agreement, calibrate_threshold
    from lrtune.train.data import load_pairs, split_examples

    ckpt = Path(args.student)
    opts = json.loads((ckpt / "train_config.json").read_text())["options"]
    examples, teacher = load_pairs([d for d in opts["data"].split(",") if d])
    splits = split_examples(examples, opts["val_fraction"], opts["test_fraction"], opts["seed"])
    v = verifiers.load(str(ckpt))
    scored = {
        s: (students.score_pairs(v, [e.pair for e in splits[s]]), [e.label for e in splits[s]]) for s in ("val", "test")
    }
    (vs, vl), (ts, tl) = scored["val"], scored["test"]

    def keep(m: dict) -> dict:
        keys = ("threshold", "accuracy", "false_accept_rate", "acceptance", "teacher_acceptance", "auroc")
        return {k: m[k] for k in keys}

    rows = {
        "calibrated": keep(agreement(ts, tl, v.threshold)),
        "val_best_accuracy": keep(agreement(ts, tl, best_accuracy_threshold(vs, vl))),
        "test_oracle": keep(agreement(ts, tl, best_accuracy_threshold(ts, tl))),
    }
    sweep = []
    for cap in (float(c) for c in args.caps.split(",")):
        t = calibrate_threshold(vs, vl, cap)["threshold"]
        sweep.append({"val_far_cap": cap, **keep(agreement(ts, tl, t))})
    out = {
        "student": str(ckpt),
        "teacher": teacher,
        "data": opts["data"],
        "test_pairs": len(ts),
        "val_pairs": len(vs),
        "thresholds": rows,
        "far_cap_sweep": sweep,
    }
    Path(args.out).write_text(json.dumps(out, indent=1))
    for name, m in rows.items():
        print(
            f"{name:18s} t={m['threshold']:.3f} agreement {m['accuracy']:.3f} FAR {m['false_accept_rate']:.3f} "
            f"acceptance {m['acceptance']:.3f} (teacher {m['teacher_acceptance']:.3f})"
        )
    for m in sweep:
        print(
            f"val FAR cap {m['val_far_cap']:.2f}: t={m['threshold']:.3f} agreement {m['accuracy']:.3f} "
            f"FAR {m['false_accept_rate']:.3f} acceptance {m['acceptance']:.3f}"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(make_parser().parse_args()))
