"""What ``lrtune train verifier`` reports about a checkpoint: its metrics table (agreement, AUROC,
accept and false-accept rates with their intervals, beside the cheap baselines), the story of
how its threshold was chosen (the false-accept bound, its unit and evidence), and the model card."""

from __future__ import annotations

import json

from lrtune.train.calibrate import (
    evidence_words,
    needed_words,
)


def _fmt(x, spec=".3f") -> str:
    return "—" if x is None else format(x, spec)


def _ci(ci) -> str:
    return f" [{_fmt(ci[0], '.2f')}, {_fmt(ci[1], '.2f')}]" if ci and ci[0] is not None else ""


def metrics_rows(meta: dict) -> list[tuple[str, dict]]:
    m = meta["metrics"]
    rows = [(f"student ({meta['kind']})", m["test"])]
    rows += [(name, a) for name, a in m.get("baselines_test", {}).items()]
    return rows


def threshold_story(calib: dict) -> str:
    """How the threshold was chosen, in one clause (the card's and the CLI's words)."""
    if "max_accuracy_loss" in calib:  # lrtune calibrate --max-accuracy-loss
        from lrtune.train.accuracy_budget import budget_story

        return budget_story(calib)
    if "false_accept_bound" in calib:  # rule bound
        head = (
            f"false-accept rate <= {calib['max_false_accept']:g} with probability {calib['confidence']:g}, "
            f"{calib['method']}, on {calib['calibration_pairs']} calibration pairs of templates the verifier never "
            f"trained on ({evidence_words(calib)}, {calib['false_accepts']} of them accepted)"
        )
        if not calib["certified"]:
            return (
                head + f": NOT certified, {needed_words(calib)} are needed; 1.0 accepts "
                "only steps identical to the target's"
            )
        return head + (f": bound {calib['false_accept_bound']:.3f}, acceptance left {calib['val_acceptance']:.2f}")
    return (
        calib["method"]
        + (f", max FAR {calib['max_false_accept']}" if calib.get("max_false_accept") is not None else "")
        + ", on validation"
    )


def model_card(meta: dict) -> str:
    """The checkpoint's README: what it is, how it was trained, how well it agrees."""
    lat, d = meta["metrics"]["latency"], meta["data"]
    lines = [
        f"# lrtune distilled verifier ({meta['kind']})",
        "",
        f"Distilled from the `{meta['teacher']}` teacher with `lrtune train verifier`. Load it with "
        "`lrtune.verifiers.load(path)` or pass the directory as `--verifier PATH`.",
        "",
        f"- base model: `{meta.get('base_model') or meta.get('encoder')}`",
        f"- threshold: {meta['threshold']:.4f} ({threshold_story(meta['calibration'])})",
        f"- data: `{d['dirs']}` (sha256 {d['fingerprint'][:16]}…), split by template (no template in two splits): "
        + ", ".join(f"{s} {c['pairs']} pairs / {c['problems']} problems" for s, c in d["splits"].items()),
        f"- training: {meta['metrics']['train_seconds']:.0f} s",
        f"- Brier score of the student's test scores vs the teacher's labels: "
        f"{_fmt(meta['metrics']['test'].get('brier'))}",
        "",
        "## Agreement with the teacher (test split)",
        "",
        "Brackets: 95% bootstrap intervals, resampling whole test problems.",
        "",
        "| verifier | accuracy | F1 | AUROC | false accept | false reject | acceptance (teacher) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, a in metrics_rows(meta):
        lines.append(
            f"| {name} | {_fmt(a['accuracy'])}{_ci(a.get('accuracy_ci95'))} | {_fmt(a['f1'])} | "
            f"{_fmt(a['auroc'])}{_ci(a.get('auroc_ci95'))} | "
            f"{_fmt(a['false_accept_rate'])} | {_fmt(a['false_reject_rate'])} | "
            f"{_fmt(a['acceptance'])} ({_fmt(a['teacher_acceptance'])}) |"
        )
    lines += [
        "",
        "## Latency per pair (this machine)",
        "",
        f"- student: {_fmt(lat['batch1_s_per_pair'], '.4f')} s at batch 1, "
        f"{_fmt(lat['batched_s_per_pair'], '.4f')} s batched",
        f"- teacher: {_fmt(lat['teacher_s_per_pair'], '.4f')} s ({lat['teacher_note']})",
    ]
    if lat.get("cost_ratio_batched") is not None:
        lines.append(f"- student/teacher cost: {lat['cost_ratio_batched']:.4f} (1/{1 / lat['cost_ratio_batched']:.0f})")
    hist = meta.get("history") or []
    if hist:
        lines += ["", "## Training history", "", "```", *(json.dumps(h) for h in hist), "```"]
    return "\n".join(lines) + "\n"


def print_metrics(meta: dict) -> None:
    from rich.table import Table

    from lrtune.runfiles import console

    t = Table(title=f"verifier vs teacher {meta['teacher']!r} (test split)")
    for col in ("verifier", "accuracy", "F1", "AUROC", "FAR", "FRR", "accept", "teacher accept"):
        t.add_column(col)
    for name, a in metrics_rows(meta):
        t.add_row(
            name,
            *(
                _fmt(a[k])
                for k in (
                    "accuracy",
                    "f1",
                    "auroc",
                    "false_accept_rate",
                    "false_reject_rate",
                    "acceptance",
                    "teacher_acceptance",
                )
            ),
        )
    console().print(t)
    lat = meta["metrics"]["latency"]
    print(
        f"latency s/pair: student batch-1 {_fmt(lat['batch1_s_per_pair'], '.4f')}, batched "
        f"{_fmt(lat['batched_s_per_pair'], '.4f')}; teacher {_fmt(lat['teacher_s_per_pair'], '.4f')}"
        + (f" (ratio {lat['cost_ratio_batched']:.4f})" if lat.get("cost_ratio_batched") else "")
    )
    print(f"threshold {meta['threshold']:.4f}; checkpoint written")
