"""The whole loop as one job: ``lrtune demo`` and ``lrtune pipeline --config FILE``.

    profile → collect (teacher judge, batched) → train verifier → train controller → evaluate

Stage outputs live under ``--out``: ``collect/``, ``profile.json``, ``verifier/``,
``controller/``, ``eval/``. Every stage is resumable and skips itself when its output
exists and matches its config (collect and evaluate skip finished problems; the trainers
return a finished checkpoint trained with the same settings on the same data; the profile
is reused when its settings match). Evaluation runs on held-out problems (another
generator seed) and compares target / sd / lr+sd with the teacher judge / lr+sd with the
distilled verifier / adaptive (distilled verifier + learned controller).

Like ``cli.py`` this is a face of the library: it is the one module of ``lrtune`` besides
``cli.py`` and ``api.py`` that calls the stages.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from lrtune.api import ModelConfig
from lrtune.decoder import DecodeConfig
from lrtune.errors import ConfigError, LrtuneError
from lrtune.runfiles import log, writable_dir, write_atomic

# size -> (collect problems, eval problems, max new tokens, verifier epochs)
SIZES = {
    "tiny": (4, 2, 48, 2),        # CI, with tiny models
    "default": (3, 2, 96, 4),     # the README's demo on the default pair (2 CPU cores, <= 20 min)
    "medium": (12, 6, 256, 6),
    "large": (50, 20, 256, 6),
}
# size -> (profile tokens per timed generation, profile repeats, evaluation warm-up tokens)
TIMING = {"tiny": (16, 1, 8), "default": (16, 2, 16), "medium": (32, 2, 32), "large": (32, 2, 32)}


@dataclass
class PipelineOptions:
    """The loop's settings (models and engine: ModelConfig; see also ``--size``)."""

    out: str = field(default="results/demo", metadata={"help": "root of every stage's output"})
    size: str = field(default="default", metadata={"help": "tiny | default | medium | large (problems, tokens, epochs)",
                                                    "choices": tuple(SIZES)})
    task: str = field(default="gsm_symbolic", metadata={"help": "task of every stage"})
    data: str | None = field(default=None, metadata={"help": "problem file for file tasks"})
    collect_problems: int | None = field(default=None, metadata={"help": "problems to collect (default: by --size)"})
    eval_problems: int | None = field(default=None, metadata={"help": "held-out problems to evaluate (default: by --size)"})
    eval_task_seed: int = field(default=1, metadata={"help": "generator seed of the held-out problems (collect uses 0)"})
    teacher: str = field(default="llm_judge@0.85", metadata={"help": "teacher verifier of collect (and the judge row)"})
    student: str = field(default="cross-encoder", metadata={"help": "distilled verifier kind"})
    gamma1: int = field(default=3, metadata={"help": "γ1 of collect and of the fixed lr+sd rows"})
    gamma2: int = field(default=4, metadata={"help": "γ2 of collect and of the fixed rows"})
    max_new_tokens: int | None = field(default=None, metadata={"help": "token budget per problem (default: by --size)"})
    max_step_tokens: int = field(default=96, metadata={"help": "a step ends after this many tokens at the latest"})
    progress: bool = field(default=True, metadata={"help": "show progress bars"})


def _sized(opts: PipelineOptions) -> tuple[int, int, int, int]:
    n_col, n_eval, tokens, epochs = SIZES[opts.size]
    return (opts.collect_problems or n_col, opts.eval_problems or n_eval, opts.max_new_tokens or tokens, epochs)


def to_flags(cfg) -> list[str]:
    """Command-line flags that rebuild dataclass ``cfg`` (every field that is not None)."""
    out: list[str] = []
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if v is None:
            continue
        flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
        if isinstance(v, bool):
            out.append(flag if v else "--no-" + flag[2:])
        else:
            out += [flag, str(v)]
    return out


def run_stage(name: str, argv: list[str]) -> None:
    """``lrtune ARGV`` in a child process (each stage loads and frees its own engines)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "lrtune", *argv])
    if proc.returncode != 0:
        raise LrtuneError(f"stage {name!r} failed (exit {proc.returncode}); its output is above. Fix it and "
                          "re-run the same command: finished stages are skipped")


def run(opts: PipelineOptions, models: ModelConfig) -> dict:
    """Run (or resume) every stage; returns the evaluation summary and stage timings."""
    from eval.evaluate import EvalOptions
    from eval.profile import ProfileOptions
    from train.controller import TrainControllerConfig
    from train.verifier import TrainVerifierConfig

    from data_gen.collect import CollectOptions

    if opts.size not in SIZES:
        raise ConfigError(f"unknown --size {opts.size!r}; choose from {', '.join(SIZES)}")
    n_col, n_eval, tokens, epochs = _sized(opts)
    root = writable_dir(opts.out)
    models = dataclasses.replace(models, controller=None)
    decode = DecodeConfig(method="lr+sd", gamma1=opts.gamma1, gamma2=opts.gamma2, max_new_tokens=tokens,
                          max_step_tokens=opts.max_step_tokens)
    model_flags = to_flags(dataclasses.replace(models, verifier=None, verifier_threshold=None))
    decode_flags = to_flags(dataclasses.replace(decode, logprobs=None, async_lr=None))
    timings: dict[str, float] = {}

    def stage(name: str, argv: list[str]) -> None:
        t0 = time.perf_counter()
        log(f"== {name}: lrtune {' '.join(argv[:2])} ...")
        run_stage(name, argv)
        timings[name] = time.perf_counter() - t0
        log(f"== {name}: {timings[name]:.0f} s")

    collect_dir, verifier_dir, controller_dir = root / "collect", root / "verifier", root / "controller"
    profile_path = root / "profile.json"
    prof_tokens, prof_repeats, warmup = TIMING[opts.size]
    # b(n) up to the rows of every collected problem in flight at once (collect's concurrency)
    prof = ProfileOptions(out=str(profile_path), gamma1_max=6, tokens=prof_tokens, repeats=prof_repeats, task=opts.task,
                          batch_max=min(n_col, 16) * (opts.gamma1 + 1))
    if not _profile_matches(profile_path, prof, models):
        stage("profile", ["profile", *to_flags(prof),
                          *to_flags(dataclasses.replace(models, verifier=None, verifier_threshold=None,
                                                        judge_model=None))])
    stage("collect", ["collect", *to_flags(CollectOptions(
        task=opts.task, data=opts.data, limit=n_col, teacher=opts.teacher, out=str(collect_dir),
        progress=opts.progress, profile=str(profile_path))), *model_flags, *decode_flags])
    stage("train verifier", ["train", "verifier", *to_flags(TrainVerifierConfig(
        data=str(collect_dir), out=str(verifier_dir), student=opts.student, epochs=epochs, progress=opts.progress,
        device="cpu" if models.device == "auto" else models.device))])
    stage("train controller", ["train", "controller", *to_flags(TrainControllerConfig(
        data=str(collect_dir), out=str(controller_dir), profile=str(profile_path), folds=min(5, max(2, n_col)),
        # vLLM drafts the engine's γ2 (the controller's γ2 max) every SD pass and cuts per request: a
        # larger max would slow the fixed rows' SD, so the controller chooses γ2 <= the rows' γ2
        gamma2_max=opts.gamma2))])
    ev = EvalOptions(task=opts.task, data=opts.data, limit=n_eval, task_seed=opts.eval_task_seed,
                     methods=f"target,sd,lr+sd/v={opts.teacher},lr+sd,adaptive", out=str(root / "eval"),
                     progress=opts.progress, warmup_tokens=warmup,
                     profile=str(profile_path))  # b(n) as measured by the profile stage
    stage("evaluate", ["evaluate", *to_flags(ev),
                       *to_flags(dataclasses.replace(models, verifier=str(verifier_dir), controller=str(controller_dir))),
                       *to_flags(dataclasses.replace(decode, method=None, logprobs=None, async_lr=None))])
    summary = json.loads((root / "eval" / "summary.json").read_text())
    write_atomic(root / "pipeline.json", json.dumps({"timings_s": timings, "sizes": {
        "collect_problems": n_col, "eval_problems": n_eval, "max_new_tokens": tokens}}, indent=1))
    return {"summary": summary, "timings": timings}


def _profile_matches(path: Path, prof, models: ModelConfig) -> bool:
    """True when ``path`` holds a profile measured with these settings and models."""
    if not path.is_file():
        return False
    try:
        p = json.loads(path.read_text())
    except ValueError:
        return False
    return (p.get("options") == dataclasses.asdict(prof)
            and p.get("target") == models.target and p.get("draft") == models.draft and p.get("backend") == models.backend)
