"""Summary of an outcome-labelled step-pair dataset and the judge probe on it.

Reads a collect directory (``--teacher rollout``; merged or not) and, when given, the JSON of
``lrtune labels judge-probe`` run on it; writes one JSON and one Markdown table with: problems,
finish rate and accuracy per task, pairs and label balance (overall, per task, per position),
the agreement matrix of every decider (rollout teacher, exact, embedding@0.95, each probed
judge at its threshold), each decider's acceptance of identical pairs, AUROC of every scored
decider against the rollout labels with a 95% bootstrap interval over problems, teacher
seconds per pair, and each scored decider's threshold calibrated on the rollout labels by the
students' rule (highest acceptance with false-accept rate <= ``--max-false-accept``), fitted on
all pairs and judged cross-fitted (2 folds by template: each fold decided at the threshold fitted
on the other).

    python -m benchmarks.summarize_labels --data results/rollout_labels \\
        --probe benchmarks/teacher_labels/rollout_32/judge_probe.json --out benchmarks/teacher_labels/rollout_32
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a collect output directory (rollout teacher)")
    p.add_argument("--probe", default=None, help="judge_probe JSON scored on the same dataset (same row order)")
    p.add_argument("--out", default="benchmarks/teacher_labels/rollout_32", help="folder for summary.json / summary.md")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (over problems) for intervals")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--max-false-accept",
        type=float,
        default=0.05,
        help="calibration: highest false-accept rate vs the rollout labels (the students' default)",
    )
    return p


def bootstrap_auroc(
    scores: list[float], labels: list[bool], groups: list[str], reps: int, seed: int
) -> tuple[float | None, float | None, float | None]:
    """AUROC (scikit-learn) and its 95% percentile interval, resampling whole problems."""
    from lrtune.pairstats import auroc, bootstrap_interval

    point = auroc(scores, labels)
    if point is None:
        return None, None, None
    lo, hi = bootstrap_interval(
        lambda rows: auroc([scores[i] for i in rows], [labels[i] for i in rows]), groups, reps, seed
    )
    return point, lo, hi


def summarize(data: str, probe: str | None, reps: int = 1000, seed: int = 0, max_false_accept: float = 0.05) -> dict:
    from lrtune import pairstats
    from lrtune.tasks import template_of
    from lrtune.train.calibrate import cross_fitted
    from lrtune.dataset import load_tables
    from lrtune.verifiers.base import same_step

    pairs_t, probs_t = load_tables(Path(data))
    rows, probs = pairs_t.to_pylist(), probs_t.to_pylist()
    labels = [bool(r["label"]) for r in rows]
    groups = [f"{r['task']}/{r['problem_id']}" for r in rows]
    same = [same_step(r["draft_step"], r["target_step"]) for r in rows]
    out: dict = {
        "data": data,
        "teacher": rows[0]["teacher"] if rows else None,
        "problems": len(probs),
        "pairs": len(rows),
        "accepted": sum(labels),
        "label_balance": sum(labels) / len(rows) if rows else None,
        "identical_pairs": sum(same),
        "rollout_reused": sum(bool(r.get("rollout_reused")) for r in rows),
        "rollout_finished": sum(bool(r.get("rollout_finished")) for r in rows),
    }
    tasks = sorted({p["task"] for p in probs})
    out["per_task"] = {
        t: {
            "problems": sum(p["task"] == t for p in probs),
            "finish_rate": statistics.mean(bool(p["finished"]) for p in probs if p["task"] == t),
            "accuracy": statistics.mean(bool(p["correct"]) for p in probs if p["task"] == t),
            "tokens_mean": statistics.mean(p["tokens"] for p in probs if p["task"] == t),
            "pairs": sum(r["task"] == t for r in rows),
            "label_balance": statistics.mean(bool(r["label"]) for r in rows if r["task"] == t)
            if any(r["task"] == t for r in rows)
            else None,
        }
        for t in tasks
    }
    out["finish_rate"] = statistics.mean(bool(p["finished"]) for p in probs) if probs else None
    out["label_balance_by_position"] = pairstats.acceptance_by_position([r["position"] for r in rows], labels)
    out["pairs_by_position"] = [
        sum(r["position"] == k for r in rows) for k in range(max((r["position"] for r in rows), default=-1) + 1)
    ]
    teacher_s = [r["judge_s"] for r in rows if r.get("judge_s") is not None]
    out["teacher_s_per_pair"] = {
        "mean": statistics.mean(teacher_s) if teacher_s else None,
        "median": statistics.median(teacher_s) if teacher_s else None,
    }
    decide: dict[str, list] = {"rollout": labels, "exact": [bool(r["exact_match"]) for r in rows]}
    scored: dict[str, list[float]] = {"exact": [float(bool(r["exact_match"])) for r in rows]}
    if any(r.get("embedding_cosine") is not None for r in rows):
        cos = [r.get("embedding_cosine") for r in rows]
        decide["embedding@0.95"] = [None if c is None else c >= 0.95 for c in cos]
        scored["embedding"] = [float("nan") if c is None else c for c in cos]
    from lrtune.dataset import target_logprob_scores

    likely = target_logprob_scores([r.get("draft_target_mean_logprob") for r in rows], same)
    if likely is not None:  # the target's own likelihood of the draft step (recorded by collect, no model call)
        decide["target_logprob@0.5"] = [x >= 0.5 for x in likely]
        scored["target_logprob"] = likely
    if probe:
        res = json.loads(Path(probe).read_text())
        index = res.get("row_index") or list(range(res.get("pairs") or 0))
        if res.get("dataset_pairs", res.get("pairs")) != len(rows) or len(index) != res.get("pairs"):
            raise SystemExit(
                f"{probe} was scored on a dataset of {res.get('dataset_pairs', res.get('pairs'))} pairs, "
                f"this one has {len(rows)}"
            )
        out["probe"] = {"judge": res.get("judge"), "pairs": len(index)}
        for spec, r in res["specs"].items():
            full: list[float] = [float("nan")] * len(rows)  # pairs the probe did not score: NaN / undecided
            for i, x in zip(index, r["scores"]):
                full[i] = x
            decide[f"{spec}@{r['threshold']:g}"] = [None if x != x else x >= r["threshold"] for x in full]
            scored[spec] = full
            out["probe"][spec] = {"seconds_per_pair": r["seconds_per_pair"], "threshold": r["threshold"]}
    out["agreement_matrix"] = pairstats.agreement_matrix(decide)
    out["identical_acceptance"] = pairstats.acceptance_on(same, decide)
    out["accept_rate"] = {
        k: (sum(bool(x) for x in v if x is not None) / max(1, sum(x is not None for x in v))) for k, v in decide.items()
    }
    out["auroc_vs_rollout"] = {}
    keep = [i for i, x in enumerate(same) if not x]  # identical pairs score 1 by rule: rank the others too
    out["non_identical_pairs"] = len(keep)
    out["non_identical_label_balance"] = sum(labels[i] for i in keep) / len(keep) if keep else None
    for name, s in scored.items():
        point, lo, hi = bootstrap_auroc(s, labels, groups, reps, seed)
        npoint, nlo, nhi = bootstrap_auroc(
            [s[i] for i in keep], [labels[i] for i in keep], [groups[i] for i in keep], reps, seed
        )
        out["auroc_vs_rollout"][name] = {
            "auroc": point,
            "ci95": [lo, hi],
            "auroc_non_identical": npoint,
            "ci95_non_identical": [nlo, nhi],
        }

    def kept(sc):  # the (score, label) pairs a decider scored (the probe may score a sample)
        return [(x, y) for x, y in zip(sc, labels) if x == x]

    out["threshold_sweep"] = {
        name: {
            f"{t:g}": {
                "accept_rate": sum(x >= t for x, _ in kept(sc)) / len(kept(sc)),
                "agreement": sum((x >= t) == y for x, y in kept(sc)) / len(kept(sc)),
            }
            for t in (0.5, 0.7, 0.85, 0.9, 0.95)
        }
        for name, sc in scored.items()
        if name.startswith(("llm_judge", "target_")) and kept(sc)
    }
    templates = [template_of(r["task"], r["problem_id"]) for r in rows]
    out["calibrated"] = {}
    for name, sc in scored.items():
        idx = [i for i, x in enumerate(sc) if x is not None and x == x]
        if name != "exact" and len({templates[i] for i in idx}) >= 2:
            out["calibrated"][name] = cross_fitted(
                [float(sc[i]) for i in idx],
                [labels[i] for i in idx],
                [templates[i] for i in idx],
                max_false_accept,
                folds=2,
                seed=seed,
            )
            out["calibrated"][name]["pairs"] = len(idx)
    # consensus(rollout, judge): the pairs both teachers agree on, at the judge's probed and calibrated thresholds
    out["consensus"] = {}
    for name, sc in scored.items():
        if not name.startswith("llm_judge"):
            continue
        cuts = [("probed", out["probe"][name]["threshold"])]
        if name in out["calibrated"]:
            cuts.append(("calibrated", out["calibrated"][name]["threshold"]))
        for how, t in cuts:
            both = kept(sc)
            agree = [y for x, y in both if (x >= t) == y]
            out["consensus"][f"{name}@{t:.4g}"] = {
                "threshold": how,
                "pairs": len(both),
                "kept": len(agree),
                "disagreement_rate": 1 - len(agree) / len(both) if both else None,
                "kept_accept_rate": sum(agree) / len(agree) if agree else None,
            }
    out["agreement_non_identical"] = {
        k: (
            sum(bool(v[i]) == labels[i] for i in keep if v[i] is not None) / max(1, sum(v[i] is not None for i in keep))
        )
        for k, v in decide.items()
    }
    return out


def markdown(s: dict) -> str:
    f = lambda v, d=3: "—" if v is None else f"{v:.{d}f}"  # noqa: E731
    lines = [
        f"# Rollout labels: {s['problems']} problems, {s['pairs']} pairs",
        "",
        f"Teacher `{s['teacher']}`; accept rate {f(s['label_balance'])}; identical pairs {s['identical_pairs']}; "
        f"answers finished within the budget {f(s['finish_rate'])}; rollouts reused from the answer "
        f"{s['rollout_reused']} of {s['pairs']}; teacher seconds per pair: mean "
        f"{f(s['teacher_s_per_pair']['mean'], 2)}, median {f(s['teacher_s_per_pair']['median'], 2)}.",
        "",
        "| task | problems | finished | accuracy | mean tokens | pairs | accept rate |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {t} | {v['problems']} | {f(v['finish_rate'], 2)} | {f(v['accuracy'], 2)} | {v['tokens_mean']:.0f} | "
            f"{v['pairs']} | {f(v['label_balance'], 2)} |"
            for t, v in s["per_task"].items()
        ),
        "",
        "Accept rate by position: "
        + ", ".join(
            f"{k}: {f(a, 2)} (n={n})"
            for k, (a, n) in enumerate(zip(s["label_balance_by_position"], s["pairs_by_position"]))
        ),
        *(
            [
                "",
                f"The probed judges scored a seeded uniform sample of {s['probe']['pairs']} of the {s['pairs']} "
                "pairs; their rows below are on that sample.",
            ]
            if s.get("probe") and s["probe"].get("pairs", s["pairs"]) < s["pairs"]
            else []
        ),
        "",
        f"AUROC and agreement on all pairs, and on the {s['non_identical_pairs']} pairs whose steps differ "
        f"(accept rate there {f(s['non_identical_label_balance'], 2)}); 95% intervals by bootstrap over problems.",
        "",
        "| decider | AUROC, all pairs | AUROC, steps differ | accept rate | agrees with rollout | agrees, steps "
        "differ | accepts identical |",
        "|---|---|---|---|---|---|---|",
    ]
    m, ident = s["agreement_matrix"], s["identical_acceptance"]
    for name in m:
        base = name.rsplit("@", 1)[0]
        a = s["auroc_vs_rollout"].get(base) or s["auroc_vs_rollout"].get(name.split("@")[0]) or {}
        ci, nci = a.get("ci95") or [None, None], a.get("ci95_non_identical") or [None, None]
        lines.append(
            f"| {name} | {f(a.get('auroc'))} [{f(ci[0])}, {f(ci[1])}] | {f(a.get('auroc_non_identical'))} "
            f"[{f(nci[0])}, {f(nci[1])}] | {f(s['accept_rate'][name], 2)} | {f(m[name]['rollout'], 2)} | "
            f"{f(s['agreement_non_identical'][name], 2)} | {f(ident.get(name), 2)} |"
        )
    for name, sweep in s.get("threshold_sweep", {}).items():
        lines += [
            "",
            f"{name} by threshold (all pairs): "
            + "; ".join(
                f"{t}: accepts {f(v['accept_rate'], 2)}, agrees {f(v['agreement'], 2)}" for t, v in sweep.items()
            ),
        ]
    if s.get("calibrated"):
        c0 = next(iter(s["calibrated"].values()))
        lines += [
            "",
            f"Thresholds calibrated on the rollout labels (highest acceptance with false-accept rate <= "
            f"{c0['max_false_accept']:g}; held out: {c0['folds']} folds by template, each decided at the "
            "threshold fitted on the other):",
            "",
            "| decider | threshold (all pairs) | fold thresholds | held-out FAR | held-out accept rate | "
            "held-out agreement |",
            "|---|---|---|---|---|---|",
            *(
                f"| {k} | {c['threshold']:.4g} | {', '.join(f'{t:.4g}' for t in c['fold_thresholds'])} | "
                f"{f(c['heldout_false_accept_rate'], 2)} | {f(c['heldout_acceptance'], 2)} | "
                f"{f(c['heldout_agreement'], 2)} |"
                for k, c in s["calibrated"].items()
            ),
        ]
    if s.get("consensus"):
        lines += [
            "",
            "consensus(rollout, judge): "
            + "; ".join(
                f"{k} ({c['threshold']}): keeps {c['kept']} pairs, disagreement {f(c['disagreement_rate'], 2)}, "
                f"accept rate of the kept {f(c['kept_accept_rate'], 2)}"
                for k, c in s["consensus"].items()
            ),
        ]
    lines += [
        "",
        "Agreement matrix (share of pairs on which two deciders agree):",
        "",
        "| | " + " | ".join(m) + " |",
        "|---" * (len(m) + 1) + "|",
        *(f"| {a} | " + " | ".join(f(m[a][b], 2) for b in m) + " |" for a in m),
    ]
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> dict:
    s = summarize(args.data, args.probe, args.bootstrap, args.seed, args.max_false_accept)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(s, indent=1))
    (out / "summary.md").write_text(markdown(s))
    print(markdown(s))
    return s


if __name__ == "__main__":
    from benchmarks import parse

    main(parse(make_parser()))
