"""Cross-fitted student agreement: every pair judged by a student that never saw its template.

The templates (gsm_symbolic) and tasks (HumanEval) of one collect dataset are shuffled with
``--seed`` and dealt into ``--folds`` folds. For fold k, the student (``lrtune train
verifier``'s fitter, exported and reloaded by the path decoding uses) trains on every other
fold but k+1, picks its hyper-parameters and threshold on fold k+1 (validation) and decides
fold k (test). Pooling the K test folds rates the student on every pair of the dataset, with
95% bootstrap intervals over problems, instead of on one 20% test split.

Thresholds, each chosen on the validation fold only:

- ``calibrated``: highest acceptance with validation FAR <= ``--max-false-accept`` (the
  checkpoint's own rule);
- ``val_best_accuracy``: the threshold with the best validation agreement;
- ``half``: 0.5, no tuning (the agreement-maximising cut when the student's scores are
  calibrated probabilities);
- ``test_oracle``: the best threshold on the test fold itself (an upper bound; peeks).

AUROC is reported per fold (mean) and pooled over the folds' scores. A one-sided verifier
(the router, ``target_logprob``) sees each pair as a score round does, with no target step.
A variant whose STUDENT is a verifier spec rather than a student kind (``target_logprob``)
is rated the same way without training: only its thresholds come from the validation fold.

    python -m benchmarks.student_crossfit --data results/rollout_labels --folds 5 \\
        --variants "forest;forest-no-check:forest:draft_arith_wrong,target_arith_wrong,num_precision" \\
        --work results/crossfit --out benchmarks/distilled_verifiers/crossfit_s0.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path

RULES = ("calibrated", "val_best_accuracy", "half", "test_oracle")


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a collect (or merged) directory with teacher labels")
    p.add_argument("--folds", type=int, default=5, help="folds of templates (>= 3: train, validation, test)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fold assignment and of the students")
    p.add_argument(
        "--variants",
        default="forest;features",
        help="';'-separated NAME[:STUDENT[:DROPPED,FEATURES]] (STUDENT defaults to NAME; a verifier spec "
        "that is not a student kind, e.g. target_logprob(min), is rated without training)",
    )
    p.add_argument("--max-false-accept", type=float, default=0.05, help="FAR cap of the calibrated rule")
    p.add_argument("--work", required=True, help="directory for the fold checkpoints")
    p.add_argument("--out", required=True, help="JSON file to write")
    return p


def parse_variants(spec: str) -> list[tuple[str, str, str]]:
    """``NAME[:STUDENT[:DROP]]`` items -> (name, student, dropped features)."""
    out = []
    for item in (s.strip() for s in spec.split(";") if s.strip()):
        parts = item.split(":")
        if len(parts) > 3:
            raise ValueError(f"bad variant {item!r}: write NAME[:STUDENT[:DROPPED,FEATURES]]")
        name = parts[0]
        out.append((name, parts[1] if len(parts) > 1 else name, parts[2] if len(parts) > 2 else ""))
    return out


def fold_of(groups, folds: int, seed: int) -> dict[str, int]:
    """Each split group's fold: sorted groups shuffled with ``seed``, dealt round-robin."""
    keys = sorted(set(groups))
    if len(keys) < folds or folds < 3:
        raise ValueError(f"need at least max(3, folds) groups for {folds} folds, got {len(keys)}")
    random.Random(seed).shuffle(keys)
    return {g: i % folds for i, g in enumerate(keys)}


def pooled(rows: list[dict], seed: int) -> dict:
    """Agreement of the pooled test decisions (each fold at its own threshold) with bootstrap
    intervals over problems, FAR and acceptance; ``rows``: {margin, label, problem}, where
    margin = score - the fold's threshold (accept when >= 0). ``by_task``: the same per task
    (the part of the problem id before its first "/")."""
    from lrtune.pairstats import agreement_intervals
    from lrtune.train.calibrate import agreement

    m = [r["margin"] for r in rows]
    y = [r["label"] for r in rows]
    a = agreement(m, y, 0.0)
    ci = agreement_intervals(m, y, 0.0, [r["problem"] for r in rows], seed=seed)
    by_task = {}
    for task in sorted({r["problem"].split("/")[0] for r in rows}):
        t = agreement(
            [x for x, r in zip(m, rows) if r["problem"].split("/")[0] == task],
            [r["label"] for r in rows if r["problem"].split("/")[0] == task],
            0.0,
        )
        by_task[task] = {
            "agreement": t["accuracy"],
            "false_accept_rate": t["false_accept_rate"],
            "acceptance": t["acceptance"],
            "teacher_acceptance": t["teacher_acceptance"],
            "n": t["n"],
        }
    return {
        "agreement": a["accuracy"],
        "agreement_ci95": list(ci["accuracy"]),
        "false_accept_rate": a["false_accept_rate"],
        "acceptance": a["acceptance"],
        "teacher_acceptance": a["teacher_acceptance"],
        "n": a["n"],
        "by_task": by_task,
    }


def run_variant(examples, teacher: str, folds: dict, name: str, student: str, drop: str, args) -> dict:
    from lrtune.pairstats import agreement_intervals, auroc
    from lrtune.train import students
    from lrtune.train.calibrate import best_agreement_threshold, calibrate_threshold
    from lrtune.train.verifier import TrainVerifierConfig, fit_and_load, one_sided_view
    from lrtune.verifiers import make_verifier

    k_all = args.folds
    decided: dict[str, list[dict]] = {r: [] for r in RULES}
    scores, labels, problems, fold_auroc, per_fold = [], [], [], [], []
    for k in range(k_all):
        val_k = (k + 1) % k_all
        split = {"train": [], "val": [], "test": []}
        for e in examples:
            f = folds[e.split_group]
            split["test" if f == k else "val" if f == val_k else "train"].append(e)
        out = Path(args.work) / f"{name}-f{k}"
        out.mkdir(parents=True, exist_ok=True)
        cfg = TrainVerifierConfig.of(
            data=args.data,
            out=str(out),
            student=student if student in students.FITTERS else "features",
            seed=args.seed,
            drop_features=drop,
            progress=False,
            max_false_accept=args.max_false_accept,
        )
        if student in students.FITTERS:
            v, _, _ = fit_and_load(cfg, out, split["train"], split["val"], teacher)
        else:  # a training-free verifier spec: only its threshold is chosen on the validation fold
            v = make_verifier(student)
        view = one_sided_view if getattr(v, "one_sided", False) else (lambda p: p)  # score rounds show no target step
        vs = students.score_pairs(v, [view(e.pair) for e in split["val"]])
        vl = [e.label for e in split["val"]]
        ts = students.score_pairs(v, [view(e.pair) for e in split["test"]])
        tl = [e.label for e in split["test"]]
        thresholds = {
            "calibrated": calibrate_threshold(vs, vl, args.max_false_accept)["threshold"],
            "val_best_accuracy": best_agreement_threshold(vs, vl),
            "half": 0.5,
            "test_oracle": best_agreement_threshold(ts, tl),
        }
        for rule, t in thresholds.items():
            decided[rule] += [
                {"margin": s - t, "label": y, "problem": e.problem_id} for s, y, e in zip(ts, tl, split["test"])
            ]
        a = auroc(ts, tl)
        fold_auroc.append(a)
        scores += ts
        labels += tl
        problems += [e.problem_id for e in split["test"]]
        per_fold.append(
            {
                "fold": k,
                "train_pairs": len(split["train"]),
                "val_pairs": len(vs),
                "test_pairs": len(ts),
                "test_auroc": a,
                "thresholds": thresholds,
                "test_scores": [round(x, 6) for x in ts],
                "test_labels": tl,
                "test_problems": [e.problem_id for e in split["test"]],
            }
        )
        print(
            f"{name} fold {k}: train {len(split['train'])}, val {len(vs)}, test {len(ts)} pairs; test AUROC "
            f"{a:.3f}; thresholds " + ", ".join(f"{r} {t:.3f}" for r, t in thresholds.items()),
            flush=True,
        )
    ci = agreement_intervals(scores, labels, 0.5, problems, seed=args.seed)
    return {
        "variant": name,
        "student": student,
        "dropped": drop,
        "folds": per_fold,
        "auroc_fold_mean": statistics.fmean(a for a in fold_auroc if a is not None),
        "auroc_pooled": auroc(scores, labels),
        "auroc_pooled_ci95": list(ci["auroc"]),
        **{rule: pooled(rows, args.seed) for rule, rows in decided.items()},
    }


def main(args) -> int:
    from lrtune.train.data import load_pairs

    examples, teacher = load_pairs([d for d in args.data.split(",") if d])
    folds = fold_of([e.split_group for e in examples], args.folds, args.seed)
    results = []
    for name, student, drop in parse_variants(args.variants):
        r = run_variant(examples, teacher, folds, name, student, drop, args)
        results.append(r)
        print(
            f"{name}: AUROC pooled {r['auroc_pooled']:.3f} [{r['auroc_pooled_ci95'][0]:.3f}, "
            f"{r['auroc_pooled_ci95'][1]:.3f}], fold mean {r['auroc_fold_mean']:.3f}; "
            + "; ".join(
                f"{rule} agreement {r[rule]['agreement']:.3f} [{r[rule]['agreement_ci95'][0]:.3f}, "
                f"{r[rule]['agreement_ci95'][1]:.3f}] FAR {r[rule]['false_accept_rate']:.2f} "
                f"acceptance {r[rule]['acceptance']:.2f}"
                for rule in RULES
            ),
            flush=True,
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {
                "data": args.data,
                "teacher": teacher,
                "pairs": len(examples),
                "folds": args.folds,
                "seed": args.seed,
                "max_false_accept": args.max_false_accept,
                "groups": len(folds),
                "results": results,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(make_parser().parse_args()))
