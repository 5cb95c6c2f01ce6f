"""Rendering an evaluation summary: Markdown report, terminal table, PNG plots."""

from __future__ import annotations

from pathlib import Path

FLAG_GAP = 0.10  # flag methods whose measured/predicted speedup differs by more than this


def _f(v, spec=".2f") -> str:
    return "—" if v is None else format(v, spec)


def _ci(ci, spec=".2f") -> str:
    return "" if not ci or None in ci else f" [{format(ci[0], spec)}, {format(ci[1], spec)}]"


def _row(cells) -> str:
    """One Markdown table row."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(header, rows) -> list[str]:
    """A Markdown table: the header cells, the separator, one line per row of cells."""
    return [_row(header), "|" + "---|" * len(header), *(_row(r) for r in rows)]


def _section(title: str, intro: str, header, rows) -> list[str]:
    """A ``## title`` section: an intro paragraph, then the table."""
    return ["", f"## {title}", "", intro, "", *_table(header, rows)]


def _split(row: dict) -> str:
    ts = row["time_split_s"]
    total = sum(ts.values()) or 1.0
    return " / ".join(f"{100 * ts[k] / total:.0f}" for k in ("draft", "target", "verify", "other"))


def _kind_share(k: dict) -> str:
    return f"{100 * k['share']:.0f}% ({_f(None if k['time_share'] is None else 100 * k['time_share'], '.0f')}% of time)"


def _exploration(row: dict) -> str:
    secs, share = row.get("exploration_s"), row.get("exploration_share")
    if secs is None:
        return "—"
    return f"{secs:.1f} ({_f(None if share is None else 100 * share, '.0f')}%)"


def _split4(row: dict) -> str:
    """draft / prefill / target steps / verify, in % of their sum."""
    ts, tg = row["time_split_s"], row.get("target_split_s") or {"prefill": 0.0, "steps": row["time_split_s"]["target"]}
    parts = [ts["draft"], tg["prefill"], tg["steps"], ts["verify"]]
    total = sum(parts) or 1.0
    return " / ".join(f"{100 * x / total:.0f}" for x in parts)


def _tp_n(data: dict):
    return next((t["max_concurrent"] for t in (data.get("throughput") or {}).values()), "N")


def _budget_cell(b: dict | None) -> str:
    """``≤ Δ at 1-δ / rate [CI] (held)`` of a row's accuracy budget, or —."""
    if not b or not b.get("measured"):
        return "—"
    m = b["measured"]
    return (
        f"≤ {b['max_accuracy_loss']:g} at {b['confidence']:g} / {m['rate']:.2f}{_ci(m['ci95'])} "
        f"({'held' if b['held'] else '**not held**'})"
    )


def _changed_cell(c: dict | None) -> str:
    """``k of n (rate [CI])`` of a row's answers that differ from target-only, or —."""
    return "—" if not c else f"{c['changed']} of {c['problems']} ({_f(c['rate'])}{_ci(c['ci95'])})"


def _floor_sentence(rows: list[dict]) -> str:
    """The most answers any lossless row changed (the floor), or nothing without a lossless row."""
    floors = [r["changed"] for r in rows if r.get("lossless") and r.get("changed")]
    if not floors:
        return ""
    worst = max(floors, key=lambda c: c["rate"])
    return f" Floor in this run: {worst['changed']} of {worst['problems']} answers."


def render_markdown(data: dict) -> str:
    """The human-readable report (one table per concern)."""
    lines = [*_md_intro(data), *_md_methods_table(data)]
    for section in (
        _md_throughput,
        _md_paired,
        _md_accuracy_vs_target,
        _md_by_task,
        _md_alpha1_by_position,
        _md_verifier_parity,
        _md_round_kinds,
        _md_rate_guard,
        _md_model_check,
        _md_run,
        _md_plots,
    ):
        lines += section(data)
    return "\n".join(lines) + "\n"


def _md_intro(data: dict) -> list[str]:
    """The title, what the run compared and how, and the machine it ran on."""
    m = data["machine"]
    return [
        f"# lrtune evaluate — {data['task']}",
        "",
        f"{data['decoded_problems']} of {data['problems']} problems decoded; every method on the same problems, "
        + (
            "interleaved, in one process. Speedup = target-only wall time / method wall time on the same problem."
            if data.get("mode", "latency") == "latency"
            else f"in one process, method after method, each with up to {_tp_n(data)} problems in flight (throughput "
            "mode). Speedup = target-only latency / method latency on the same problem under that load. "
            "Finished = answers that ended within the token budget."
        ),
        "",
        f"Machine: {m.get('cpu', '?')}, {m.get('cpus', '?')} CPUs; torch {m.get('torch', '?')}, "
        f"vLLM {m.get('vllm', '—')}. Generated {data['generated_at']}."
        + (" Draft: the W8A8 (int8) copy." if (data.get("draft") or {}).get("quantization") == "int8" else ""),
        "",
    ]


def _md_methods_table(data: dict) -> list[str]:
    """The main table: one row per method (accuracy, speedups, prediction, α, time split)."""
    return _table(
        [
            "method",
            "accuracy [95% CI]",
            "finished",
            "speedup (total)",
            "mean speedup [95% CI]",
            "median",
            "predicted",
            "meas/pred",
            "α1",
            "α2",
            "steps/round",
            "tok/s",
            "time % draft/target/verify/other",
        ],
        [
            [
                label,
                f"{_f(r['accuracy'])}{_ci(r['accuracy_ci95'])}",
                f"{r['finished']}/{r['n']}" if r.get("finished") is not None else "—",
                _f(r["speedup_total"]),
                f"{_f(r['speedup_mean'])}{_ci(r['speedup_mean_ci95'])}",
                _f(r["speedup_median"]),
                _f(r["predicted_speedup"]),
                _f(r["measured_over_predicted"]),
                _f(r["alpha1"]),
                _f(r["alpha2"]),
                _f(r["mean_accepted_steps_per_round"]),
                _f(r["tokens_per_s"]),
                _split(r),
            ]
            for label, r in data["methods"].items()
        ],
    )


def _md_throughput(data: dict) -> list[str]:
    """The throughput section (throughput mode only)."""
    if not data.get("throughput"):
        return []
    return _section(
        "Throughput",
        "Each method over the whole set with up to N problems in flight (one engine call per round "
        "for all of them); the per-problem speedup above then compares latencies under that load.",
        [
            "method",
            "N",
            "problems",
            "wall s",
            "problems/hour",
            "tok/s",
            "rows per target call",
            "rows per draft call",
        ],
        [
            [
                k,
                t["max_concurrent"],
                t["prompts"],
                _f(t["wall_s"], ".1f"),
                _f(t["problems_per_hour"], ".1f"),
                _f(t["tokens_per_s"]),
                _f(t.get("rows_per_call", {}).get("target")),
                _f(t.get("rows_per_call", {}).get("draft")),
            ]
            for k, t in data["throughput"].items()
        ],
    )


def _md_paired(data: dict) -> list[str]:
    """The paired speedup comparisons, A over B, where the run has any."""
    if not data.get("paired"):
        return []
    return _section(
        "Paired comparisons",
        "Speedup of A over B on the same problems (Σ wall B / Σ wall A), with a 95% bootstrap interval over problems.",
        ["A", "B", "problems", "A over B [95% CI]"],
        [
            [p["a"], p["b"], p["problems"], f"{_f(p['ratio'], '.3f')}{_ci(p['ratio_ci95'], '.3f')}"]
            for p in data["paired"]
        ],
    )


def _md_accuracy_vs_target(data: dict) -> list[str]:
    """Each method's accuracy against target-only on the same problems (McNemar, changed answers)."""
    if not data.get("accuracy_vs_target"):
        return []
    return _section(
        "Accuracy against target-only (paired)",
        "On the problems both decoded: the difference in accuracy, the "
        "problems only one of the two solved, the two-sided exact McNemar p-value, and the answers that "
        "differ from target-only's (95% Clopper–Pearson). A lossless row (sd; lr or lr+sd with the never "
        "verifier) equals target-only in exact arithmetic: its changed answers are the numeric floor, which "
        "a lossy row's changed answers include (--numerics exact removes it; docs/limits.md)."
        + _floor_sentence(data["accuracy_vs_target"]),
        ["A", "problems", "accuracy A", "target", "A − target", "only A", "only target", "McNemar p", "changed"],
        [
            [
                p["a"] + (" (lossless)" if p.get("lossless") else ""),
                p["problems"],
                _f(p["accuracy_a"]),
                _f(p["accuracy_b"]),
                f"{p['difference']:+.3f}",
                p["only_a"],
                p["only_b"],
                _f(p["mcnemar_p"], ".3f"),
                _changed_cell(p.get("changed")),
            ]
            for p in data["accuracy_vs_target"]
        ],
    )


def _md_by_task(data: dict) -> list[str]:
    """Every method on each task of a task mix, where the run has one."""
    if not data.get("by_task"):
        return []
    return _section(
        "By task",
        "Each task of the mix on its own problems: accuracy, answers finished within the budget, α1 "
        "and speedup (total) over target-only.",
        ["task", "method", "problems", "accuracy", "finished", "α1", "speedup (total)"],
        [
            [
                task,
                k,
                r["n"],
                _f(r["accuracy"]),
                f"{r['finished']}/{r['n']}",
                _f(r["alpha1"]),
                _f(r["speedup_total"]),
            ]
            for task, rows in data["by_task"].items()
            for k, r in rows.items()
        ],
    )


def _md_alpha1_by_position(data: dict) -> list[str]:
    """Step acceptance α1 per draft position of the methods that drafted steps."""
    lr = {k: r for k, r in data["methods"].items() if r["alpha1_by_pos"]}
    if not lr:
        return []
    width = max(len(r["alpha1_by_pos"]) for r in lr.values())
    return [
        "",
        "## Step acceptance α1 by draft position",
        "",
        *_table(
            ["method", *(f"pos {i + 1}" for i in range(width))],
            [
                [k, *(_f(v) for v in list(r["alpha1_by_pos"]) + [None] * (width - len(r["alpha1_by_pos"])))]
                for k, r in lr.items()
            ],
        ),
    ]


def _md_verifier_parity(data: dict) -> list[str]:
    """Each verifier's acceptance while decoding beside its test split's, and its accuracy budget."""
    if not data.get("verifier_parity"):
        return []
    return _section(
        "Verifier acceptance: decoding against its test split",
        "The share of draft steps each row's verifier accepted while decoding (pairs it was asked; 95% bootstrap "
        "interval over problems) beside the share its checkpoint accepted on its test split (templates it never "
        "trained on); a gap is flagged when the intervals do not overlap.",
        [
            "method",
            "verifier",
            "decoding [95% CI]",
            "pairs",
            "test split [95% CI]",
            "test pairs",
            "threshold rule",
            "gap",
            "accuracy budget: promised / measured changed answers",
        ],
        [
            [
                k,
                Path(str(r["verifier"])).name,
                f"{_f(r['decode']['acceptance'])}{_ci(r['decode']['ci95'])}",
                r["decode"]["pairs"],
                f"{_f(r['test_split']['acceptance'])}{_ci(r['test_split']['ci95'])}" if r["test_split"] else "—",
                r["test_split"]["pairs"] if r["test_split"] else "—",
                (r["test_split"] or {}).get("threshold_rule") or "—",
                "—" if r["gap"] is None else ("**yes**" if r["gap"] else "no"),
                _budget_cell(r.get("accuracy_budget")),
            ]
            for k, r in data["verifier_parity"].items()
        ],
    )


def _md_round_kinds(data: dict) -> list[str]:
    """The share of each kind of round, the decode time split and exploration, per method."""
    kinds = {k: r for k, r in data["methods"].items() if r.get("round_kinds")}
    if not kinds:
        return []
    return _section(
        "Round kinds and the time of a round",
        "Share of the rounds (and of the round seconds) of each kind: lr (the target generated "
        "its own steps), score (a prefill judged the draft steps), sd (γ1 = 0: no draft steps); "
        "then the decode time split: draft, the target's prefills of draft chains, the target's "
        "own steps (bonus and regenerated), verifier, in %; and exploration: the seconds the "
        "slower kinds of rounds took beyond the rate of the kind each problem found fastest "
        "(summed over problems), with its share of the wall time.",
        ["method", "lr rounds", "score rounds", "sd rounds", "draft / prefill / steps / verify %", "exploration s"],
        [
            [
                k,
                *(_kind_share(r["round_kinds"][x]) for x in ("lr", "score", "sd")),
                _split4(r),
                _exploration(r),
            ]
            for k, r in kinds.items()
        ],
    )


def _md_rate_guard(data: dict) -> list[str]:
    """The controller's measured-rate guard, per method that ran one."""
    guards = {k: r["rate_guard"] for k, r in data["methods"].items() if r.get("rate_guard")}
    if not guards:
        return []
    return _section(
        "The controller's measured-rate guard",
        "LR and SD rounds measured over the run (a problem's first round left out), their "
        "tokens/s, ρ = how fast LR rounds ran against the speedup model, next to SD rounds, with "
        "its upper bound ρ⁺, the first problem after which the controller tried no LR round, and "
        "the exploration budget's slack at the end (seconds the run could still lose to SD).",
        [
            "method",
            "LR rounds",
            "SD rounds",
            "LR tokens/s",
            "SD tokens/s",
            "ρ [ρ⁺]",
            "LR closed from problem",
            "re-tests",
            "budget slack s",
        ],
        [
            [
                k,
                g["lr_rounds"],
                g["sd_rounds"],
                _f(g["lr_tokens_per_s"], ".2f"),
                _f(g["sd_tokens_per_s"], ".2f"),
                f"{g['rho']:.2f} [{g['rho_upper']:.2f}]",
                "—" if g["lr_closed_from"] is None else g["lr_closed_from"],
                g.get("guard_retests", "—"),
                _f(g.get("budget_slack_s"), ".1f"),
            ]
            for k, g in guards.items()
        ],
    )


def _md_model_check(data: dict) -> list[str]:
    """The speedup model's inputs, then which methods' measured speedup strays from its prediction."""
    flags = [
        (k, r["measured_over_predicted"])
        for k, r in data["methods"].items()
        if r["measured_over_predicted"] is not None and abs(r["measured_over_predicted"] - 1) > FLAG_GAP
    ]
    lines = [
        "",
        "## Speedup model check",
        "",
        f"Prediction from the measured α and c = {_f(data['c_measured'], '.3f')} (draft/target time per token)"
        + (
            ", batch cost " + ", ".join(f"b({n})={_f(v)}" for n, v in data["batch_cost"].items())
            if data.get("batch_cost")
            else ""
        )
        + (
            "; a batch of n steps is priced by its longest step, E[max of n]/E[step] = "
            + ", ".join(f"{_f(v)} (n={n})" for n, v in data["longest_step_factor"].items())
            if data.get("longest_step_factor")
            else ""
        )
        + ".",
    ]
    if data.get("mode", "latency") != "latency":
        return lines + [
            "",
            "The model predicts a decode running alone (latency mode); the speedups of this run are "
            "latencies under throughput load, so no measured/predicted ratio is given.",
        ]
    if flags:
        return lines + [
            "",
            "Measured and predicted speedup disagree by more than "
            f"{FLAG_GAP:.0%} for: " + ", ".join(f"**{k}** ({v:.2f}x of predicted)" for k, v in flags) + ".",
        ]
    return lines + ["", f"All methods with a prediction are within {FLAG_GAP:.0%} of it."]


def _md_run(data: dict) -> list[str]:
    """Engine start, warm-up, decode loop and the evaluator's overhead."""
    t = data["timing"]
    return [
        "",
        "## Run",
        "",
        f"Engine start {_f(t.get('load_s'), '.1f')} s, warm-up {_f(t.get('warmup_s'), '.1f')} s, "
        f"decode loop {_f(t.get('loop_s'), '.1f')} s (all invocations of this run), of which "
        f"{_f(t.get('prompt_cache_s'), '.1f')} s untimed prompt prefill (latency mode: before each decode, after "
        "every engine forgot its cached prefixes, so each decode starts from the same cache); "
        "evaluator overhead (loop time outside both) "
        f"{_f(100 * data['evaluator_overhead'] if data['evaluator_overhead'] is not None else None, '.3f')}%.",
    ]


def _md_plots(data: dict) -> list[str]:
    """Links to the plots written beside the report, where there are any."""
    if not data.get("plots"):
        return []
    return ["", "## Plots", ""] + [f"![{p}]({p})" for p in data["plots"]]


def print_table(data: dict) -> None:
    """The summary as a rich table on stdout."""
    from rich.table import Table

    from lrtune.runfiles import console

    t = Table(title=f"lrtune evaluate — {data['task']} ({data['decoded_problems']} problems)")
    for col in ("method", "acc", "finished", "speedup", "mean [95% CI]", "pred", "α1", "α2", "steps/rnd", "tok/s"):
        t.add_column(col, justify="left" if col == "method" else "right", no_wrap=True)
    for k, r in data["methods"].items():
        t.add_row(
            k,
            _f(r["accuracy"]),
            f"{r.get('finished', 0)}/{r['n']}",
            _f(r["speedup_total"]),
            _f(r["speedup_mean"]) + _ci(r["speedup_mean_ci95"]),
            _f(r["predicted_speedup"]),
            _f(r["alpha1"]),
            _f(r["alpha2"]),
            _f(r["mean_accepted_steps_per_round"]),
            _f(r["tokens_per_s"]),
        )
    console().print(t)


def write_plots(data: dict, out: Path) -> list[Path]:
    """speedup_vs_accuracy.png, acceptance_by_position.png, time_split.png (+ sweep.png)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["methods"]
    paths = [_plot_speedup_vs_accuracy(plt, data, out)]
    acceptance = _plot_acceptance_by_position(plt, rows, out)
    if acceptance is not None:
        paths.append(acceptance)
    paths.append(_plot_time_split(plt, rows, out))
    sweep = _plot_sweep(plt, data, out)
    if sweep is not None:
        paths.append(sweep)
    return paths


def _plot_speedup_vs_accuracy(plt, data: dict, out: Path) -> Path:
    """speedup_vs_accuracy.png: each method's mean speedup against its accuracy, with 95% CIs."""
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for k, r in data["methods"].items():
        x = r["speedup_mean"] if r["speedup_mean"] is not None else 1.0
        y = r["accuracy"] or 0.0
        xe = [[x - r["speedup_mean_ci95"][0]], [r["speedup_mean_ci95"][1] - x]] if r["speedup_mean_ci95"] else None
        ye = [[y - r["accuracy_ci95"][0]], [r["accuracy_ci95"][1] - y]] if r["accuracy_ci95"] else None
        ax.errorbar([x], [y], xerr=xe, yerr=ye, fmt="o", capsize=3, label=k)
    ax.axvline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("speedup vs target-only (mean per problem, 95% CI)")
    ax.set_ylabel("accuracy (95% CI)")
    ax.set_title(f"{data['task']}: speedup vs accuracy")
    ax.legend(fontsize=8)
    return _save(fig, out / "speedup_vs_accuracy.png")


def _plot_acceptance_by_position(plt, rows: dict, out: Path) -> Path | None:
    """acceptance_by_position.png: α1 per draft position of each method that drafted steps (None: none did)."""
    lr = {k: r["alpha1_by_pos"] for k, r in rows.items() if r["alpha1_by_pos"]}
    if not lr:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.8 / len(lr)
    for j, (k, vals) in enumerate(lr.items()):
        xs = [i + 1 + (j - (len(lr) - 1) / 2) * width for i in range(len(vals))]
        ax.bar(xs, [v or 0.0 for v in vals], width=width, label=k)
    ax.set_xlabel("draft step position in the round")
    ax.set_ylabel("α1 (accepted / drafted)")
    ax.set_ylim(0, 1)
    ax.set_title("step acceptance by position")
    ax.legend(fontsize=8)
    return _save(fig, out / "acceptance_by_position.png")


def _plot_time_split(plt, rows: dict, out: Path) -> Path:
    """time_split.png: each method's seconds in draft, target, verifier and the rest, stacked."""
    fig, ax = plt.subplots(figsize=(6, 4))
    bottom = [0.0] * len(rows)
    for part in ("draft", "target", "verify", "other"):
        vals = [r["time_split_s"][part] for r in rows.values()]
        ax.bar(list(rows), vals, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("seconds (all problems)")
    ax.set_title("time split")
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    return _save(fig, out / "time_split.png")


def _plot_sweep(plt, data: dict, out: Path) -> Path | None:
    """sweep.png: measured and predicted speedup over a --sweep's (γ1, γ2) grid (None: no 2-D grid)."""
    grid = [r for r in data["methods"].values() if r["kind"] != "target"] if data.get("sweep") else []
    g1s = sorted({r["gamma1"] for r in grid})
    g2s = sorted({r["gamma2"] for r in grid})
    if not (len(grid) >= 3 and len(g1s) > 1 and len(g2s) > 1):
        return None
    import numpy as np

    meas = np.full((len(g1s), len(g2s)), np.nan)
    pred = np.full_like(meas, np.nan)
    for r in grid:
        i, j = g1s.index(r["gamma1"]), g2s.index(r["gamma2"])
        meas[i, j] = r["speedup_total"] if r["speedup_total"] is not None else np.nan
        pred[i, j] = r["predicted_speedup"] if r["predicted_speedup"] is not None else np.nan
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, mat, title in ((axes[0], meas, "measured speedup"), (axes[1], pred, "speedup model")):
        im = ax.imshow(mat, origin="lower", cmap="viridis")
        ax.set_xticks(range(len(g2s)), [str(v) for v in g2s])
        ax.set_yticks(range(len(g1s)), [str(v) for v in g1s])
        ax.set_xlabel("γ2 (draft tokens)")
        ax.set_ylabel("γ1 (draft steps)")
        ax.set_title(title)
        for (i, j), v in np.ndenumerate(mat):
            if not np.isnan(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w", fontsize=8)
        fig.colorbar(im, ax=ax)
    return _save(fig, out / "sweep.png")


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path
