"""The whole loop as one job: ``lrtune demo`` and ``lrtune pipeline --config FILE``.

    profile → collect (teacher judge, batched) → train verifier → train controller → evaluate

Stage outputs live under ``--out``: ``collect/``, ``profile.json``, ``verifier/``,
``controller/``, ``eval/``. Every stage is resumable and skips itself when its output
exists and matches its config (collect and evaluate skip finished problems; the trainers
return a finished checkpoint trained with the same settings on the same data; the profile
is reused when its settings match). Evaluation runs on held-out problems (another
generator seed) and compares target / sd / lr+sd with the teacher judge / lr+sd with the
distilled verifier / auto (target, sd or adaptive with the distilled verifier and the learned
controller, whichever the profile and the verifier's promise allow: policies.auto).

Like ``cli.py`` this is a face of the library: it is the one module of ``lrtune`` besides
``cli.py`` and ``api.py`` that calls the stages.
"""

from __future__ import annotations

from lrtune import gate
from lrtune import profile_cache
from lrtune import schema
from lrtune.schema import STRICT, Checked, Count, Gamma, Problems, Seed, Text

import dataclasses
import json
import textwrap
import time
from typing import Literal
from dataclasses import dataclass, field
from pathlib import Path

from lrtune.modelconfig import ModelConfig
from lrtune.decoder import DecodeConfig
from lrtune.errors import ConfigError, LrtuneError
from lrtune.configs import flat_dict
from lrtune.outdir import check_out, claim_out
from lrtune.inputs import read_json_object
from lrtune.runfiles import log, write_atomic


@dataclass(frozen=True)
class DemoSize:
    """How much work one ``--size`` does. Pairs per problem grow with ``collect_tokens`` (about
    9 pairs per 192 tokens on gsm_symbolic at γ1 = 3 on the default pair), so the test split
    holds about collect problems × pairs per problem × ``test_fraction`` pairs (split by
    template; gsm_symbolic's first problems each have their own template)."""

    collect_problems: int
    eval_problems: int
    collect_tokens: int  # token budget of each collected problem
    eval_tokens: int  # token budget of each held-out problem (every method decodes it)
    epochs: int  # verifier training epochs
    test_fraction: float = 0.2  # share of collected templates the student is tested on
    val_fraction: float = 0.2  # share it is calibrated on
    min_train_pairs: int = 20  # train verifier refuses fewer training pairs (or one class)
    profile_rows: int = 16  # b(n) measured up to this many rows (caps collect's concurrency)
    teacher_row: bool = True  # evaluate lr+sd with the teacher too (the judge is slow on a CPU)
    profile_tokens: int = 32  # tokens per timed profile generation
    profile_repeats: int = 2
    sd_tokens: int = 128  # tokens of each profile SD run that measures c2 (0: none, c2 = c1)
    sd_prompts: int = 3  # prompts of those runs
    warmup_tokens: int = 32  # evaluation warm-up tokens
    # engine context when --max-model-len is not given (None: ModelConfig's); it sizes each KV cache
    max_model_len: int | None = None


SIZES = {
    # CI, with tiny models: a smoke run of every stage, not a meaningful student
    # (the tiny random models stop early, so they cannot time an SD run of fixed length: c2 = c1)
    "tiny": DemoSize(
        4, 2, 48, 48, 2, min_train_pairs=2, profile_tokens=16, profile_repeats=1, warmup_tokens=8, sd_tokens=0
    ),
    # the README's demo on the default pair (2 CPU cores, <= 20 min): the student is tested on >= 30 pairs
    # (held-out answers get 512 tokens: the target finishes nearly every gsm_symbolic answer within it);
    # 2048 tokens of context hold a prompt and 512 tokens, and the judge's prompt with all four worked
    # examples (at most 1184 tokens on the demo's pairs), in KV caches half those of 4096 (0.4 GiB less)
    "default": DemoSize(
        9,
        4,
        192,
        512,
        4,
        test_fraction=0.4,
        teacher_row=False,
        profile_rows=32,
        profile_tokens=16,
        warmup_tokens=16,
        sd_tokens=64,
        sd_prompts=2,
        max_model_len=2048,
    ),
    "medium": DemoSize(12, 6, 256, 256, 6, profile_rows=48),
    "large": DemoSize(50, 20, 256, 256, 6, profile_rows=64),
}


SizeName = Literal["tiny", "default", "medium", "large"]  # the keys of SIZES (a test holds them equal)


@dataclass
class PipelineOptions(Checked):
    """The loop's settings (models and engine: ModelConfig; see also ``--size``)."""

    __pydantic_config__ = STRICT

    out: Text = field(default="results/demo", metadata={"help": "root of every stage's output"})
    size: SizeName = field(
        default="default", metadata={"help": "tiny | default | medium | large (problems, tokens, epochs, splits)"}
    )
    task: Text = field(default="gsm_symbolic", metadata={"help": "task of every stage"})
    data: Text | None = field(default=None, metadata={"help": "problem file for file tasks"})
    collect_problems: Problems | None = field(
        default=None, metadata={"help": "problems to collect (default: by --size)"}
    )
    eval_problems: Problems | None = field(
        default=None, metadata={"help": "held-out problems to evaluate (default: by --size)"}
    )
    eval_task_seed: Seed = field(
        default=1, metadata={"help": "generator seed of the held-out problems (collect uses 0)"}
    )
    teacher: Text = field(
        default="llm_judge",
        metadata={"help": "teacher verifier of collect (and of the judge row where the size has one)"},
    )
    student: Text = field(default="cross-encoder", metadata={"help": "distilled verifier kind"})
    gamma1: Gamma = field(default=3, metadata={"help": "γ1 of collect and of the fixed lr+sd rows"})
    gamma2: Gamma = field(default=4, metadata={"help": "γ2 of collect and of the fixed rows"})
    max_new_tokens: Count | None = field(
        default=None, metadata={"help": "token budget per held-out problem (default: by --size)"}
    )
    collect_tokens: Count | None = field(
        default=None, metadata={"help": "token budget per collected problem (default: by --size)"}
    )
    min_train_pairs: Count | None = field(
        default=None,
        metadata={"help": "refuse to train the student on fewer pairs (default: by --size; 20 but for tiny)"},
    )
    max_step_tokens: Count = field(default=96, metadata={"help": "a step ends after this many tokens at the latest"})
    progress: bool = field(default=True, metadata={"help": "show progress bars"})
    reuse_profile: bool = field(
        default=True,
        metadata={
            "help": "reuse a profile measured before on this machine for the same pair, settings and lrtune "
            "version (kept under $LRTUNE_CACHE/profiles); --no-reuse-profile measures again"
        },
    )


def _sized(opts: PipelineOptions) -> DemoSize:
    """The size's settings with the options that override them."""
    size = SIZES[opts.size]
    over = {
        "collect_problems": opts.collect_problems,
        "eval_problems": opts.eval_problems,
        "eval_tokens": opts.max_new_tokens,
        "collect_tokens": opts.collect_tokens,
        "min_train_pairs": opts.min_train_pairs,
    }
    return dataclasses.replace(size, **{k: v for k, v in over.items() if v is not None})


def to_flags(cfg, drop: tuple[str, ...] = ()) -> list[str]:
    """Command-line flags that rebuild dataclass ``cfg`` (every option that is not None and not
    named in ``drop``, whose stage sets or defaults it itself; sub-configs by their flat flags)."""
    from lrtune.configs import flat_fields

    values = flat_dict(cfg)
    out: list[str] = []
    for name, f, _ in flat_fields(type(cfg)):
        v = values[name]
        if v is None or name in drop:
            continue
        flag = f.metadata.get("flag") or "--" + name.replace("_", "-")
        if isinstance(v, bool):
            out.append(flag if v else "--no-" + flag[2:])
        else:
            out += [flag, str(v)]
    return out


def run_stage(name: str, argv: list[str]) -> float | None:
    """``lrtune ARGV`` in a child process (each stage loads and frees its own engines); returns
    the stage's peak resident memory in GiB (:func:`run_child`)."""
    import sys

    return run_child(name, [sys.executable, "-m", "lrtune", *argv])


def run_child(name: str, cmd: list[str], poll_s: float = 0.2) -> float | None:
    """Run ``cmd``; raise when it fails; return its peak resident memory in GiB: the largest
    ``VmHWM`` (the kernel's high-water mark of the process's own memory) read every ``poll_s``
    seconds while it runs, so only a peak in its last ``poll_s`` can be missed. Not
    ``ru_maxrss``: on Linux a forked child's starts at its parent's resident set. None where
    ``/proc`` has no ``VmHWM`` (not Linux)."""
    import subprocess

    from lrtune import peakmem

    proc = subprocess.Popen(cmd)
    peak = None
    try:
        while True:
            hwm = peakmem.high_water_bytes(proc.pid)
            if hwm is not None:
                peak = max(peak or 0, hwm)
            try:
                proc.wait(timeout=poll_s)
                break
            except subprocess.TimeoutExpired:
                continue
    except KeyboardInterrupt:  # the child got the same Ctrl-C: let it save its state and stop
        proc.wait()
        raise
    if proc.returncode != 0:
        raise LrtuneError(
            f"stage {name!r} failed (exit {proc.returncode}); its output is above. Fix it and "
            "re-run the same command: finished stages are skipped"
        )
    return None if peak is None else round(peak / peakmem.GIB, 2)


def validate(opts: PipelineOptions, models: ModelConfig, decode: DecodeConfig, size: DemoSize | None = None) -> None:
    """Phase 1 of the loop, before any stage starts or ``--out`` is touched: every option
    (schema), the task, teacher and student, the sizes every stage needs, the models and the
    output root."""
    from lrtune.build import check_configs
    from lrtune.tasks import get_task
    from lrtune.verifiers.distilled import STUDENT_KINDS

    from lrtune.data_gen.rollout import parse_teacher

    schema.check(opts)
    get_task(opts.task)
    parse_teacher(opts.teacher)
    if opts.student not in STUDENT_KINDS:
        raise ConfigError(f"--student: must be one of {', '.join(STUDENT_KINDS)}, got {opts.student!r}")
    if size is not None and size.collect_problems < 3:  # train verifier splits templates into train/val/test
        raise ConfigError(
            f"--collect-problems: the verifier is trained, validated and tested on problems of "
            f"different templates, so it needs at least 3; got {size.collect_problems}"
        )
    check_out(opts.out, "pipeline")
    check_configs(models, decode, load_all_methods=True)


def sized_context(size: str, args, file_values: dict) -> dict:
    """``file_values`` with the size's ``max_model_len`` where neither a flag nor the file sets
    one (an unknown size is left to :func:`run` to refuse)."""
    from lrtune.configs import spelled_options

    want = SIZES[size].max_model_len if size in SIZES else None
    in_file = any(name == "max_model_len" for name, _ in spelled_options(ModelConfig, file_values))  # engine: too
    if want is None or getattr(args, "max_model_len", None) is not None or in_file:
        return file_values
    return {**file_values, "max_model_len": want}


def run(opts: PipelineOptions, models: ModelConfig) -> dict:
    """Run (or resume) every stage; returns the evaluation summary and stage timings."""
    if opts.size not in SIZES:
        raise ConfigError(f"unknown --size {opts.size!r}; choose from {', '.join(SIZES)}")
    size = _sized(opts)
    models = dataclasses.replace(models, controller=None)
    decode = DecodeConfig(
        method="lr+sd",
        gamma1=opts.gamma1,
        gamma2=opts.gamma2,
        max_new_tokens=size.eval_tokens,
        max_step_tokens=opts.max_step_tokens,
    )
    validate(opts, models, decode, size)
    gate.passed("pipeline")  # every input checked
    root = claim_out(opts.out, "pipeline")
    st = _Stages(root)
    _profile_stage(st, opts, size, models)
    _collect_stage(st, opts, size, models, decode)
    _train_verifier_stage(st, opts, size, models)
    _train_controller_stage(st, opts, size)
    _evaluate_stage(st, opts, size, models, decode)
    return _results(st, size)


class _Stages:
    """The stages' output paths under ``root`` and what each stage that ran measured."""

    def __init__(self, root: Path) -> None:
        """Paths of every stage's output under ``root``; no timings yet."""
        self.root = root
        self.collect_dir, self.verifier_dir, self.controller_dir = (
            root / "collect",
            root / "verifier",
            root / "controller",
        )
        self.profile_path = root / "profile.json"
        self.timings: dict[str, float] = {}
        self.peaks: dict[str, float] = {}
        self.reused: dict[str, str] = {}  # stage: the cached result it copied instead of running

    def run(self, name: str, argv: list[str]) -> None:
        """Run stage ``name`` (``lrtune ARGV`` in a child process); log and keep its time and peak memory."""
        t0 = time.perf_counter()
        log(f"== {name}: lrtune {' '.join(argv[:2])} ...")
        peak = run_stage(name, argv)
        self.timings[name] = time.perf_counter() - t0
        if peak is not None:
            self.peaks[name] = peak
        log(f"== {name}: {self.timings[name]:.0f} s" + ("" if peak is None else f", peak {peak:.1f} GiB resident"))


def _profile_stage(st: _Stages, opts: PipelineOptions, size: DemoSize, models: ModelConfig) -> None:
    """Stage 1: measure c1, c2 and b(n), unless ``profile.json`` holds a profile with these settings."""
    from lrtune.eval.profile import ProfileOptions

    # b(n) up to the rows of every collected problem in flight at once (caps collect's concurrency)
    prof = ProfileOptions(
        out=str(st.profile_path),
        gamma1_max=6,
        tokens=size.profile_tokens,
        repeats=size.profile_repeats,
        task=opts.task,
        data=opts.data,
        batch_max=min(size.profile_rows, size.collect_problems * (opts.gamma1 + 1)),
        sd_gamma2=opts.gamma2 if size.sd_tokens else 0,
        sd_tokens=size.sd_tokens or ProfileOptions.sd_tokens,
        sd_prompts=size.sd_prompts,
    )
    if _profile_matches(st.profile_path, prof, models):
        return
    key, kept = _profile_key(prof, models), _profiles_dir(models)
    cached = profile_cache.lookup(key, kept) if opts.reuse_profile else None
    if cached is not None:
        path, measured = cached
        reused = {**measured, "options": dataclasses.asdict(prof), "reused_from": str(path)}
        write_atomic(st.profile_path, json.dumps(reused, indent=1))
        st.reused["profile"] = str(path)
        log(
            f"== profile: reused the profile measured {measured.get('measured_at', '?')} on this machine for "
            f"this pair and lrtune version ({path}); --no-reuse-profile measures again"
        )
        return
    st.run(
        "profile",
        ["profile", *to_flags(prof), *to_flags(models, drop=("verifier", "verifier_threshold", "judge_model"))],
    )
    measured = read_json_object(st.profile_path, "profile")
    log(f"== profile: kept for later runs on this machine as {profile_cache.store(measured, key, kept)}")


def _profiles_dir(models: ModelConfig) -> Path | None:
    """Where profiles are kept: ``--cache-dir``'s ``profiles`` when given (else the cache's default)."""
    return None if models.cache_dir is None else Path(models.cache_dir).expanduser() / "profiles"


def _profile_key(prof, models: ModelConfig) -> str:
    """The profile cache's key of this profile stage (the pair resolved to its directories)."""
    from lrtune.models import resolve_model

    dirs = [
        resolve_model(getattr(models, r), r, cache_dir=models.cache_dir, progress=False) for r in ("target", "draft")
    ]
    return profile_cache.profile_key(prof, models, *dirs)


def _collect_stage(
    st: _Stages, opts: PipelineOptions, size: DemoSize, models: ModelConfig, decode: DecodeConfig
) -> None:
    """Stage 2: collect teacher-labelled step pairs of the training problems."""
    from lrtune.data_gen.config import collect_options

    collect = collect_options(
        task=opts.task,
        data=opts.data,
        limit=size.collect_problems,
        teacher=opts.teacher,
        out=str(st.collect_dir),
        progress=opts.progress,
        profile=str(st.profile_path),
    )
    st.run(
        "collect",
        [
            "collect",
            *to_flags(collect),
            *to_flags(models, drop=("verifier", "verifier_threshold")),
            *to_flags(dataclasses.replace(decode, max_new_tokens=size.collect_tokens), drop=("record", "schedule")),
        ],
    )


def _train_verifier_stage(st: _Stages, opts: PipelineOptions, size: DemoSize, models: ModelConfig) -> None:
    """Stage 3: distil the teacher into the student verifier."""
    from lrtune.train.verifier import TrainVerifierConfig

    cfg = TrainVerifierConfig.of(
        data=str(st.collect_dir),
        out=str(st.verifier_dir),
        student=opts.student,
        epochs=size.epochs,
        progress=opts.progress,
        test_fraction=size.test_fraction,
        val_fraction=size.val_fraction,
        min_train_pairs=size.min_train_pairs,
        device="cpu" if models.device == "auto" else models.device,
    )
    st.run("train verifier", ["train", "verifier", *to_flags(cfg)])


def _train_controller_stage(st: _Stages, opts: PipelineOptions, size: DemoSize) -> None:
    """Stage 4: fit the learned (γ1, γ2) controller on the collected problems and the profile."""
    from lrtune.train.controller import TrainControllerConfig

    cfg = TrainControllerConfig(
        data=str(st.collect_dir),
        out=str(st.controller_dir),
        profile=str(st.profile_path),
        folds=min(5, max(2, size.collect_problems)),
        # vLLM drafts the engine's γ2 (the controller's γ2 max) every SD pass and cuts per request: a
        # larger max would slow the fixed rows' SD, so the controller chooses γ2 <= the rows' γ2
        gamma2_max=opts.gamma2,
    )
    st.run("train controller", ["train", "controller", *to_flags(cfg)])


def _evaluate_stage(
    st: _Stages, opts: PipelineOptions, size: DemoSize, models: ModelConfig, decode: DecodeConfig
) -> None:
    """Stage 5: every method on the held-out problems, with the student and the controller."""
    from lrtune.eval.evaluate import EvalOptions

    teacher_row = f"lr+sd/v={opts.teacher}," if size.teacher_row else ""
    ev = EvalOptions(
        task=opts.task,
        data=opts.data,
        limit=size.eval_problems,
        task_seed=opts.eval_task_seed,
        methods=f"target,sd,{teacher_row}lr+sd,auto",
        out=str(st.root / "eval"),
        progress=opts.progress,
        warmup_tokens=size.warmup_tokens,
        profile=str(st.profile_path),
    )  # b(n) as measured by the profile stage
    trained = dataclasses.replace(models, verifier=str(st.verifier_dir), controller=str(st.controller_dir))
    st.run(
        "evaluate",
        ["evaluate", *to_flags(ev), *to_flags(trained), *to_flags(decode, drop=("method", "record", "schedule"))],
    )


def _results(st: _Stages, size: DemoSize) -> dict:
    """Write ``pipeline.json`` (timings, peaks, sizes); the evaluation summary, timings and student metadata."""
    from lrtune.verifiers.distilled import read_meta

    summary = read_json_object(st.root / "eval" / "summary.json", "evaluate summary")
    write_atomic(
        st.root / "pipeline.json",
        json.dumps(
            {"timings_s": st.timings, "peak_rss_gib": st.peaks, "reused": st.reused, "sizes": dataclasses.asdict(size)},
            indent=1,
        ),
    )
    student = read_meta(st.verifier_dir)
    return {
        "summary": summary,
        "timings": st.timings,
        "peak_rss_gib": st.peaks,
        "reused": st.reused,
        "student": student,
        "eval_tokens": size.eval_tokens,
    }


def closing_lines(res: dict) -> list[str]:
    """The loop's result as plain lines of at most 80 columns (readable in any log): per method
    accuracy, answers finished within the budget, speedup (target wall time / method wall time,
    totals), α1 and α2; the student's test agreement with its teacher; the stage times."""
    s = res["summary"]
    rows = s["methods"]
    out = [
        f"Held-out {s['task']} problems: {s['decoded_problems']}, budget {res.get('eval_tokens', '?')} tokens each",
        f"{'method':<12}{'accuracy':>10}{'finished':>10}{'speedup':>9}{'α1':>7}{'α2':>7}",
    ]

    def f(x, spec=".2f"):
        return "—" if x is None else format(x, spec)

    for name, r in rows.items():
        out.append(
            f"{name[:12]:<12}{f(r['accuracy']):>10}{str(r.get('finished', 0)) + '/' + str(r['n']):>10}"
            f"{f(r['speedup_total']):>9}{f(r['alpha1']):>7}{f(r['alpha2']):>7}"
        )
    t = rows.get("target")
    if t:
        out.append(f"The target finished {t.get('finished', 0)} of {t['n']} answers within the budget; accuracy counts")
        out.append("a cut-off answer as wrong.")
    auto = (rows.get("auto") or {}).get("auto")
    if auto:
        out += textwrap.wrap(f"auto ran {auto['runs']}: {auto['reason']}.", 80, subsequent_indent="  ")
    test = (res.get("student") or {}).get("metrics", {}).get("test") or {}
    if test:
        kind = res["student"].get("kind", "student")
        out.append(f"Student ({kind}) vs its teacher on {test.get('n', 0)} test pairs of unseen templates:")
        out.append(
            f"  agreement {f(test.get('accuracy'))}, AUROC {f(test.get('auroc'))}, "
            f"accepts {f(test.get('acceptance'))} (teacher {f(test.get('teacher_acceptance'))})"
        )
    out += promise_lines(res)
    for stage, path in (res.get("reused") or {}).items():  # a kept result copied instead of measured
        out += textwrap.wrap(
            f"The {stage} was not measured again: this machine's, kept in {path} (--no-reuse-{stage} measures it).",
            80,
            subsequent_indent="  ",
        )
    times = res["timings"]
    out.append("Stage times (s): " + ", ".join(f"{k} {v:.0f}" for k, v in times.items()))
    peaks = res.get("peak_rss_gib") or {}
    if peaks:  # a stage skipped on resume has no figure
        line = "Peak resident memory (GiB): " + ", ".join(f"{k} {v:.1f}" for k, v in peaks.items())
        out += textwrap.wrap(line, 80, subsequent_indent="  ")
    out.append(f"Total: {sum(times.values()) / 60:.1f} min")
    return out


def promise_lines(res: dict) -> list[str]:
    """What the student's threshold promised before the run and what the run measured: its
    false-accept budget (certified or not), decode-time against test-split acceptance, and the
    answers that only the target got right (≤ 80 columns each)."""
    calib = (res.get("student") or {}).get("calibration") or {}
    test = ((res.get("student") or {}).get("metrics") or {}).get("test") or {}
    s = res["summary"]
    out = []
    if "false_accept_bound" in calib:  # rule bound (an accuracy budget's calibration has none)
        out.append(
            f"Promise: the student accepts <= {calib['max_false_accept']:.0%} of teacher-rejected steps "
            f"at {calib['confidence']:.0%}"
        )
        from lrtune.train.calibrate import evidence_words, needed_words

        if calib["certified"]:
            out.append(f"  certified on {evidence_words(calib)} (bound {calib['false_accept_bound']:.3f})")
        else:
            out.append(f"  NOT certifiable from {evidence_words(calib)}")
            out.append(f"  (needs {needed_words(calib)}):")
            out.append("  threshold 1.0, it accepts only steps identical to the target's")
        if test.get("false_accept_rate") is not None:
            out.append(
                f"  test split: accepted {test['fp']} of {test['fp'] + test['tn']} rejected steps "
                f"({test['false_accept_rate']:.2f})"
            )
    for lab, r in (s.get("verifier_parity") or {}).items():
        d, t = r["decode"], r["test_split"]
        out.append(f"{lab[:20]} accepted {d['acceptance']:.2f} of {d['pairs']} draft steps in decoding")
        if t:
            verdict = "a GAP beyond both 95% intervals" if r["gap"] else "within the intervals"
            out.append(f"  vs {t['acceptance']:.2f} on its test split: {verdict}")
    for a in s.get("accuracy_vs_target") or []:
        if a["a"].startswith("lr"):
            out.append(
                f"{a['a'][:20]} vs target: {a['only_b']} answer(s) only the target solved, "
                f"{a['only_a']} only {a['a'][:12]}"
            )
    return out


def _profile_matches(path: Path, prof, models: ModelConfig) -> bool:
    """True when ``path`` holds a profile measured with these settings and models."""
    if not path.is_file():
        return False
    try:
        p = read_json_object(path, "profile")
    except ConfigError:
        return False
    return (
        p.get("options") == dataclasses.asdict(prof)
        and p.get("target") == models.target
        and p.get("draft") == models.draft
        and p.get("backend") == models.backend
        and p.get("target_quantization", "none") == models.target_quantization
        and p.get("draft_quantization", "none") == models.draft_quantization
    )
