"""``lrtune evaluate``: every method on the same problems, in one process, in one run.

    lrtune evaluate --task gsm_symbolic --limit 30 --methods target,sd,lr,lr+sd --out results/eval

Methods run interleaved per problem, in a balanced order (a Williams design: over every n
problems each method runs at each position once and right after every other method once),
after a short warm-up of every method, so machine drift and what one decode leaves in the
engine and CPU caches for the next hit all of them alike. Speedup is
always against target-only on the same problem in the same run. The output directory
holds ``config.json``, ``records.jsonl`` (one line per problem x method, appended and
fsynced as each decode ends), ``summary.json``, ``report.md`` and PNG plots. Re-running
with the same ``--out`` and config skips finished (problem, method) pairs; a different
config is refused (``--overwrite`` moves the old records aside, never deletes them).
Latency mode interleaves its methods per problem, so there ``--methods`` is fixed for the
run; throughput mode runs method after method, so there a later invocation may name more
methods and decodes only the new ones (the report covers the methods named).

``--mode throughput --max-concurrent N`` decodes each method over the whole set with N
problems in flight (batched: one engine call per round for all of them), method after
method, and reports problems/hour, tokens/s and rows per engine call beside the per-problem
rows (whose wall time is then each problem's latency under that load). The two modes are
never mixed in one output directory.

``--sweep "gamma1=1,2,4 gamma2=0,2,4"`` adds one method per grid point (γ2 = 0 is LR
alone, γ1 = 0 SD alone) and plots measured speedup against the speedup model's
prediction from the α and c measured at that point.
"""

from __future__ import annotations

import dataclasses
import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from lrtune import gate
from lrtune import schema
from lrtune.modelconfig import ModelConfig
from lrtune.batchcost import interpolate, read_profile_curve, read_profile_sd_curve
from lrtune.speedup import early_abort_batch_cost, expected_longest, longest_step_batch_cost, reuse_batch_cost
from lrtune.configs import Command, Section
from lrtune.decoder import DecodeConfig
from lrtune.errors import ConfigError
from lrtune.runfiles import log, write_atomic

from lrtune.eval import metrics
from lrtune.eval.config import MODES, EvalConfig, EvalOptions
from lrtune.eval.loops import (
    check_controllers,
    decode_all,
    decode_throughput,
    reuse_keep_share,
    open_engines,
    uses_draft_model,
    asked_gamma2s,
    resolve_auto,
    run_pricing,
)
from lrtune.score_round import require_one_sided
from lrtune.eval.methods import CONTROLLED, MethodSpec, parse_method, parse_methods, parse_sweep
from lrtune.eval.problems import heldout_problems, listed_problems, seen_templates
from lrtune.eval.records import (
    CONFIG,
    RECORDS,
    REPORT,
    RESUME_FREE,
    SUMMARY,
    THROUGHPUT,
    previous_summary,
    append_record,
    check_resume,
    load_records,
    prepare_out_dir,
    resume_key,
    throughput_rows,
)

__all__ = [
    "CONFIG",
    "CONTROLLED",
    "MODES",
    "RECORDS",
    "REPORT",
    "RESUME_FREE",
    "SUMMARY",
    "THROUGHPUT",
    "EvalConfig",
    "EvalOptions",
    "MethodSpec",
    "Summary",
    "append_record",
    "check_resume",
    "config_from_args",
    "heldout_problems",
    "listed_problems",
    "load_records",
    "machine_info",
    "main",
    "parse_method",
    "parse_methods",
    "parse_sweep",
    "predict_rows",
    "prepare_out_dir",
    "resume_key",
    "run",
    "seen_templates",
    "throughput_rows",
    "write_reports",
]


@dataclass
class Summary:
    """What ``run`` returns: per-method rows (see ``summary.json``) and the file paths."""

    methods: dict[str, dict]
    out_dir: Path
    data: dict

    def __getitem__(self, method: str) -> dict:
        return self.methods[method]


# ---- method specs ----------------------------------------------------------------------


# ---- records on disk -------------------------------------------------------------------


# ---- the run ---------------------------------------------------------------------------
def run(cfg: EvalConfig) -> Summary:
    """Evaluate (resuming any finished work in ``cfg.options.out``) and write the reports."""
    opts = cfg.options
    specs = _checked_specs(cfg)
    pricing = run_pricing(cfg, specs)  # the plan every controller and the oracle price with
    specs = resolve_auto(cfg, specs, pricing)  # auto rows: target, sd or adaptive, decided now
    ctl, own = check_controllers(cfg, specs, pricing)
    task, problems = _task_problems(opts)
    profile_curve = profile_sd = None
    if opts.profile:
        profile_curve, profile_sd = read_profile_curve(opts.profile), read_profile_sd_curve(opts.profile)
    check_resume(cfg)  # cheap: before the models, which may be built on first use
    controllers = [c for c in (ctl, *own.values()) if c is not None]
    resolved = _check_models(cfg, specs, task, problems, pricing, controllers)
    gate.passed("evaluate")  # every input is valid; only now is --out claimed and written
    if (cfg.models.target_quantization, cfg.models.draft_quantization) != ("none", "none"):
        # a copy is built (and auto decided) now, so the run records what its engines load
        resolved = _check_models(cfg, specs, task, problems, pricing, controllers, build=True)
    out, done, todo = _claim_out(cfg, specs, problems, resolved)
    timing: dict = {"load_s": 0.0, "warmup_s": 0.0, "loop_s": 0.0, "decode_s": 0.0, "prompt_cache_s": 0.0}
    previous = previous_summary(out)
    batch_cost, batch_cost_sd = _batch_costs(opts, specs, previous, profile_curve, profile_sd)
    peak = max_rss = None
    if todo:
        measured, measured_sd, peak, max_rss = _decode_todo(
            cfg, specs, task, problems, done, out, timing, pricing, ctl, own
        )
        if not opts.profile:
            batch_cost, batch_cost_sd = measured, measured_sd
    records = load_records(out / RECORDS)
    total = {k: timing[k] + float(previous.get("timing", {}).get(k, 0.0)) for k in timing}
    data = write_reports(
        cfg,
        specs,
        problems,
        records,
        out,
        total,
        batch_cost,
        this_run=timing,
        batch_cost_sd=batch_cost_sd,
        draft={"path": resolved.draft, "quantization": resolved.draft_quantization},
        target={"path": resolved.target, "quantization": resolved.target_quantization},
        peak_rss_gib=peak,
        max_rss_gib=max_rss,
        memory_plan=resolved.cpu_memory.to_dict() if resolved.cpu_memory is not None else None,
    )
    return Summary(methods=data["methods"], out_dir=out, data=data)


def _checked_specs(cfg: EvalConfig) -> list[MethodSpec]:
    """The run's method specs, parsed and checked against the mode, the oracle's needs and
    their verifiers (score rounds need a one-sided one), before anything loads."""
    from lrtune.verifiers import check_verifier_spec

    opts = cfg.options
    schema.check(opts)
    cfg.decode.validate()
    specs = parse_methods(opts.methods, opts.sweep, cfg.decode.gamma1, cfg.decode.gamma2)
    if opts.mode == "throughput":
        bad = [s.label for s in specs if s.async_lr or s.control == "oracle"]
        if bad:
            raise ConfigError(
                f"--mode throughput decodes many problems at once; {', '.join(bad)} cannot "
                "(async LR and oracle run one problem at a time): use --mode latency"
            )
    if any(s.control == "oracle" for s in specs) and not any(s.label == "lr+sd" for s in specs):
        raise ConfigError("method oracle needs lr+sd in --methods (it reads each problem's α from it)")
    for s in specs:
        dcfg = s.decode_config(cfg.decode).validate()
        parsed = check_verifier_spec(s.verifier or cfg.models.verification.parsed)
        if dcfg.uses_lr and (dcfg.score_rounds or "score" in (s.round_kinds or ())):
            require_one_sided(parsed)  # before --out is claimed
    return specs


def _task_problems(opts: EvalOptions) -> tuple:
    """The task (code tasks: the sandbox's isolation checked) and its problems to evaluate,
    loaded with their warnings logged; none, or ids that repeat, is a ConfigError."""
    from lrtune.tasks import get_task

    task = get_task(opts.task)
    if getattr(task, "KIND", "math") == "code":
        from lrtune.sandbox import require_isolation

        require_isolation(opts.unsafe_exec)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        problems = (
            listed_problems(task, opts)
            if opts.problem_ids
            else heldout_problems(task, opts)
            if opts.heldout_from
            else task.load(limit=opts.limit, seed=opts.task_seed, path=opts.data)
        )
    for w in caught:
        log(f"warning: {w.message}")
    if not problems:
        raise ConfigError(f"no problems to evaluate in task {opts.task!r}" + (f" ({opts.data})" if opts.data else ""))
    if len({p.id for p in problems}) != len(problems):
        raise ConfigError("problem ids are not unique; give every row a distinct 'id'")
    return task, problems


def _check_models(cfg: EvalConfig, specs, task, problems, pricing, controllers: list, build: bool = False):
    """The models resolved (every γ2 the methods and ``controllers`` may ask for) and a
    prompt that fits the context checked, before ``--out`` is claimed; with ``build``
    (after the gate) a quantized copy is built and ``auto`` decided, as the engines will run."""
    from lrtune.build import check_configs, require_a_prompt_that_fits

    opts = cfg.options
    resolved = check_configs(
        cfg.models,
        dataclasses.replace(cfg.decode, method="lr+sd"),
        progress=opts.progress,
        load_all_methods=uses_draft_model(cfg, specs),
        gamma2s=asked_gamma2s(cfg, specs, controllers, pricing),
        build=build,
    )
    if not build:
        require_a_prompt_that_fits(cfg.models, cfg.decode, [task.prompt(p) for p in problems], progress=opts.progress)
    return resolved


def _claim_out(cfg: EvalConfig, specs, problems, resolved) -> tuple[Path, set, list]:
    """Claim ``--out`` (phase 2) and say what the run resolved; returns the directory, the
    (problem, method) pairs already decoded and the (problem, spec) pairs to decode."""
    out, records = prepare_out_dir(cfg)
    # said once --out is ours: a run refused before this point prints its one error line only
    for s in specs:
        if s.auto_reason:
            log(f"{s.label} runs {s.control or s.kind}: {s.auto_reason}")
    if resolved.cpu_memory is not None:
        log(f"memory plan: {resolved.cpu_memory.describe()}")
    done = {(r["problem"], r["method"]) for r in records}
    todo = [(p, s) for p in problems for s in specs if (p.id, s.label) not in done]
    if done:
        log(f"resuming {out}: {len(done)} decodes done, {len(todo)} to go")
    return out, done, todo


def _batch_costs(opts: EvalOptions, specs, previous: dict, profile_curve, profile_sd) -> tuple:
    """(b(n), b_SD) before this invocation decodes: a ``--profile``'s, else the previous
    invocation's summary's (None where neither has one)."""
    batch_cost = {int(n): float(v) for n, v in previous["batch_cost"].items()} if previous.get("batch_cost") else None
    batch_cost_sd = sd_curve(previous.get("batch_cost_sd"))
    if opts.profile:
        batch_cost = profile_curve
        log(f"batch cost b(n) from {opts.profile}: " + ", ".join(f"b({n})={v:.2f}" for n, v in batch_cost.items()))
        batch_cost_sd = None if profile_sd is None else {"gamma2": profile_sd[0], "curve": profile_sd[1]}
        if profile_sd is None and any(s.kind == "lr+sd" for s in specs):
            log(
                f"note: {opts.profile} has no batch cost of SD rows (batch_cost_sd): lr+sd rows are predicted with "
                "plain b(n), which SD rows exceed; rerun lrtune profile"
            )
    return batch_cost, batch_cost_sd


def _decode_todo(cfg: EvalConfig, specs, task, problems, done, out: Path, timing: dict, pricing, ctl, own) -> tuple:
    """Start the engines and decode what is left (in the run's mode), watching resident
    memory; returns the measured b(n) and b_SD, the peak PSS and this process's max RSS (GiB)."""
    from lrtune.peakmem import PeakMemory, max_rss_gib

    opts = cfg.options
    with PeakMemory() as pm:
        eng, measured, measured_sd = open_engines(cfg, specs, task, problems, timing, pricing, ctl, own)
        if opts.mode == "throughput":
            decode_throughput(eng, cfg, specs, task, problems, done, out, timing)
        else:
            decode_all(eng, cfg, specs, task, problems, done, out, timing)
    peak, max_rss = round(pm.peak_gib, 2), max_rss_gib()
    max_rss = None if max_rss is None else round(max_rss, 2)
    log(
        f"peak resident memory of this run: {peak:.1f} GiB (PSS, this process and its children)"
        + ("" if max_rss is None else f"; this process's high-water RSS {max_rss:.1f} GiB")
    )
    return measured, measured_sd, peak, max_rss


# ---- reports ---------------------------------------------------------------------------
def sd_curve(saved) -> dict | None:
    """``{"gamma2": γ2, "curve": {n: b_SD(n)}}`` as a summary stores it (JSON keys are strings)."""
    if not isinstance(saved, dict) or not saved.get("curve"):
        return None
    return {"gamma2": int(saved["gamma2"]), "curve": {int(n): float(v) for n, v in saved["curve"].items()}}


def predict_rows(
    specs, rows: dict, recs: list[dict], batch_cost, latency: bool, verifier: str, batch_cost_sd: dict | None = None
) -> float | None:
    """Add each method's model prediction to its summary row (``predicted_speedup``, and in
    latency mode ``measured_over_predicted``) from the run's own α1, α2, c and committed step
    lengths, with b(n) from ``batch_cost``, or for lr+sd rows at its γ2 from ``batch_cost_sd``
    (``{"gamma2", "curve"}``: the batch cost of rows decoded with SD); returns the measured c."""
    c = metrics.measured_c(rows, recs)
    steps = metrics.committed_step_tokens(recs)
    for s in specs:
        row = rows[s.label]
        _describe_row(row, s, verifier)
        b, keep = _row_batch_cost(s, row, recs, steps, batch_cost, batch_cost_sd)
        row["reuse_keep"] = keep
        # score rounds: no prefill seconds is a ratio of 0 (a verifier that reads no target
        # score makes no scoring call), not an LR row to price with b(n)
        ratio = (metrics.prefill_ratio(recs, s.label) or 0.0) if s.schedule == "score" else None
        row["prefill_ratio"] = ratio
        pred = (
            None
            if s.control or s.width > 1  # per-round depths, or several branches: outside the model
            else metrics.predicted_speedup(
                s.kind, s.gamma1, s.gamma2, row["alpha1"], row["alpha2"], c, b, async_lr=s.async_lr, prefill_ratio=ratio
            )
        )
        row["predicted_speedup"] = pred
        row["measured_over_predicted"] = (
            (row["speedup_total"] / pred) if latency and pred and row["speedup_total"] else None
        )
    return c


def _describe_row(row: dict, s: MethodSpec, verifier: str) -> None:
    """Write the method's settings into its summary row (and why an auto row runs what it runs)."""
    row.update(
        kind=s.kind,
        control=s.control,
        gamma1=s.gamma1,
        gamma2=s.gamma2,
        async_lr=s.async_lr,
        width=s.width,
        schedule=s.schedule,
        verifier=s.verifier or verifier,
    )
    if s.auto_reason:
        row["auto"] = {"runs": s.control or s.kind, "reason": s.auto_reason}
    if s.kind not in ("sd", "lr+sd"):
        # no token-level SD in this method (records written before the vLLM backend
        # stopped reporting the shared engine's late-counted drafts may still hold some)
        row["alpha2"] = None


def _row_batch_cost(s: MethodSpec, row: dict, recs: list[dict], steps, batch_cost, batch_cost_sd) -> tuple:
    """The batch cost b(1..γ1+1) a method's prediction prices its rounds with (LR rows: of a
    batch lasting as long as its longest step, early abort and reuse applied), and its reuse
    keep share (None without draft reuse)."""
    # b(n) between measured sizes interpolated, beyond the largest the last measured (never 1 by default)
    bc = (
        batch_cost_sd["curve"]
        if batch_cost_sd and s.kind == "lr+sd" and s.gamma2 == batch_cost_sd["gamma2"]
        else batch_cost
    )
    b = [interpolate(bc, min(max(n, min(bc)), max(bc))) for n in range(1, s.gamma1 + 2)] if bc else None
    keep = reuse_keep_share(recs, s.label) if s.reuse_drafts else None
    if steps and s.kind in ("lr", "lr+sd"):  # a batch of steps lasts as long as its longest step
        abort = s.early_abort and row["alpha1"] is not None  # early abort: of the rows up to the first rejection
        b = (
            reuse_batch_cost(b, steps, keep, row["alpha1"] if abort else None)
            if keep is not None
            else early_abort_batch_cost(b, steps, row["alpha1"])
            if abort
            else longest_step_batch_cost(b, steps)
        )
    return b, keep


def write_reports(
    cfg: EvalConfig,
    specs,
    problems,
    records,
    out: Path,
    timing: dict,
    batch_cost,
    this_run: dict | None = None,
    batch_cost_sd: dict | None = None,
    draft: dict | None = None,
    target: dict | None = None,
    peak_rss_gib: float | None = None,
    max_rss_gib: float | None = None,
    memory_plan: dict | None = None,
) -> dict:
    """summary.json, report.md and plots from the records of the current problems (``draft``,
    ``target``: the directory each model's engines ran and its quantization, as resolved)."""
    from lrtune.eval.report import render_markdown, write_plots

    ids = {p.id for p in problems}
    recs = [r for r in records if r["problem"] in ids]
    labels = [s.label for s in specs]
    rows = metrics.summarize(recs, labels)
    latency = cfg.options.mode == "latency"  # the model predicts one decode alone; throughput: latencies under load
    c = predict_rows(specs, rows, recs, batch_cost, latency, cfg.models.verification.spec, batch_cost_sd)
    data = {
        "task": cfg.options.task,
        "problems": len(problems),
        "decoded_problems": len({r["problem"] for r in recs}),
        "methods": rows,
        **_comparisons(cfg, specs, problems, recs, labels),
        "c_measured": c,
        "longest_step_factor": _longest_step_factor(recs),
        "batch_cost": batch_cost,
        "batch_cost_sd": batch_cost_sd,
        "timing": timing,
        "timing_this_invocation": this_run if this_run is not None else timing,
        # resident memory at peak while this invocation loaded and decoded (GiB, summed over its processes)
        "peak_rss_gib": peak_rss_gib,
        # this process's own high-water RSS to the end of decoding (the kernel's, exact; shared pages in full)
        "max_rss_gib": max_rss_gib,
        # what lrtune.cpumemory planned before any model loaded (an upper bound; None on a GPU)
        "memory_plan": memory_plan,
        "sweep": bool(cfg.options.sweep),
        "mode": cfg.options.mode,
        "throughput": throughput_rows(out / THROUGHPUT, labels) if cfg.options.mode == "throughput" else None,
        "evaluator_overhead": _evaluator_overhead(timing),
        "machine": machine_info(),
        "draft": draft,
        "target": target,
        "config": resume_key(cfg),
        "generated_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    _log_parity(data["verifier_parity"])
    plots = write_plots(data, out) if cfg.options.plots else []
    data["plots"] = [str(p.name) for p in plots]
    write_atomic(out / SUMMARY, json.dumps(data, indent=1))
    write_atomic(out / REPORT, render_markdown(data))
    return data


def _comparisons(cfg: EvalConfig, specs, problems, recs: list[dict], labels: list[str]) -> dict:
    """The summary's paired parts: speedups of method against method, accuracy against
    target-only, per task of a mix, and each verifier's acceptance against its test split."""
    from lrtune.eval.parity import changed_answers, parity

    lossless = {s.label for s in specs if s.lossless(cfg.models.verification.spec)}
    task_of = {p.id: p.meta["task"] for p in problems if p.meta.get("task")}  # set by a task mix
    return {
        "paired": metrics.paired_comparisons(recs, labels),
        "accuracy_vs_target": [
            {**r, "changed": changed_answers(recs, r["a"]), "lossless": r["a"] in lossless}
            for r in (metrics.paired_accuracy(recs, lab) for lab in labels if lab != "target")
            if r is not None
        ],
        # a task mix: every method's accuracy, finished answers, α1 and speedup on each task's problems
        "by_task": metrics.summarize_by_group(recs, labels, task_of) if len(set(task_of.values())) > 1 else None,
        # the share of draft steps each verifier accepted while decoding beside its test split's
        "verifier_parity": parity(recs, labels, {s.label: s.verifier or cfg.models.verification.spec for s in specs}),
    }


def _longest_step_factor(recs: list[dict]) -> dict | None:
    """E[longest of n steps] / E[step] for n = 2..5 of the committed steps (None: no steps)."""
    steps = metrics.committed_step_tokens(recs)
    return {n: expected_longest(steps, n) / expected_longest(steps, 1) for n in range(2, 6)} if steps else None


def _evaluator_overhead(timing: dict) -> float | None:
    """The share of the loop time outside decoding and outside the untimed per-problem
    prompt prefill (None: no loop time)."""
    loop = timing.get("loop_s", 0.0)
    return ((loop - timing.get("decode_s", 0.0) - timing.get("prompt_cache_s", 0.0)) / loop) if loop > 0 else None


def _log_parity(verifier_parity: dict) -> None:
    """Log each verifier row with a gap or an accuracy budget (a warning where it is alarming)."""
    from lrtune.eval.parity import alarming, parity_lines

    for label, row in verifier_parity.items():
        if row["gap"] or row["accuracy_budget"]:
            for line in parity_lines({label: row}):
                log(f"warning: {line}" if alarming(row) else line)


def machine_info() -> dict:
    """The machine a run measured (:func:`lrtune.machine.machine_info`: versions, CPU flags, GPUs)."""
    from lrtune.machine import machine_info as info

    return info()


# ---- CLI -------------------------------------------------------------------------------
COMMAND = Command(
    ("evaluate",),
    __doc__.splitlines()[0],
    (
        Section(EvalOptions),
        Section(ModelConfig),
        Section(
            DecodeConfig,
            skip=("method",),
            defaults={k: getattr(EvalConfig().decode, k) for k in ("gamma1", "max_new_tokens", "max_step_tokens")},
        ),
    ),
)
add_arguments, make_parser = COMMAND.add_arguments, COMMAND.make_parser


def config_from_args(args) -> EvalConfig:
    options, models, decode = COMMAND.configs(args)
    return EvalConfig(options=options, models=models, decode=decode)


def main(cfg: EvalConfig) -> int:
    summary = run(cfg)
    from lrtune.eval.report import print_table

    print_table(summary.data)
    log(f"wrote {summary.out_dir / REPORT}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    COMMAND.main(lambda args: main(config_from_args(args)))
