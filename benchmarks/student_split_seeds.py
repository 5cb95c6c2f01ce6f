"""Do the features students' test figures hold on other splits, and what does the context
feature add?

Trains the ``features`` (logistic regression) and ``forest`` students with ``lrtune train
verifier`` (the real path: fit, export, reload, calibrate, test) on one collect dataset for
several split seeds (each seed draws other train/val/test templates), each with every
feature and without ``context_is_code``, and collects their test AUROC (with its bootstrap
interval over test problems), calibrated agreement and acceptance.

    python -m benchmarks.student_split_seeds --data results/rollout_labels --seeds 0,1,2,3,4,5 \\
        --work results/split_seeds --out benchmarks/distilled_verifiers/split_seeds.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

VARIANTS = (("features", ""), ("features", "context_is_code"), ("forest", ""), ("forest", "context_is_code"))


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a collect (or merged) directory with teacher labels")
    p.add_argument("--seeds", default="0,1,2,3,4,5", help="comma-separated split seeds")
    p.add_argument("--work", required=True, help="directory for the checkpoints (resumable: finished ones are reused)")
    p.add_argument("--out", required=True, help="JSON file to write")
    return p


def variant_name(student: str, drop: str) -> str:
    return student + (f"-no-{drop}" if drop else "")


def summarize(rows: list[dict]) -> dict:
    """Per variant: mean, min and max of test AUROC and agreement over the seeds."""
    out: dict = {}
    for name in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == name]
        out[name] = {
            k: {
                "mean": statistics.fmean(r[k] for r in mine),
                "min": min(r[k] for r in mine),
                "max": max(r[k] for r in mine),
            }
            for k in ("auroc", "accuracy", "acceptance")
        }
        out[name]["seeds"] = len(mine)
    return out


def main(args) -> int:
    from lrtune.train.verifier import TrainVerifierConfig, run

    rows = []
    for seed in (int(s) for s in args.seeds.split(",") if s.strip()):
        for student, drop in VARIANTS:
            name = variant_name(student, drop)
            cfg = TrainVerifierConfig.of(
                data=args.data,
                out=str(Path(args.work) / f"{name}-s{seed}"),
                student=student,
                seed=seed,
                drop_features=drop,
                progress=False,
                latency_pairs=4,
            )
            test = run(cfg)["metrics"]["test"]
            rows.append(
                {
                    "seed": seed,
                    "variant": name,
                    "auroc": test["auroc"],
                    "auroc_ci95": test["auroc_ci95"],
                    "accuracy": test["accuracy"],
                    "acceptance": test["acceptance"],
                    "teacher_acceptance": test["teacher_acceptance"],
                    "test_pairs": test["n"],
                }
            )
            r = rows[-1]
            print(
                f"seed {seed} {name:28s} AUROC {r['auroc']:.3f} [{r['auroc_ci95'][0]:.2f}, {r['auroc_ci95'][1]:.2f}] "
                f"agreement {r['accuracy']:.3f} acceptance {r['acceptance']:.2f} ({r['test_pairs']} test pairs)",
                flush=True,
            )
    summary = summarize(rows)
    for name, s in summary.items():
        print(
            f"{name:28s} AUROC mean {s['auroc']['mean']:.3f} (min {s['auroc']['min']:.3f}, max "
            f"{s['auroc']['max']:.3f}); agreement mean {s['accuracy']['mean']:.3f} over {s['seeds']} seeds"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"data": args.data, "runs": rows, "summary": summary}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(make_parser().parse_args()))
