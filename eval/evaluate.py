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

from typing import Annotated, Literal

from annotated_types import Interval

from lrtune import schema
from lrtune.schema import STRICT, Problems, Seed, Size, Text

import dataclasses
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lrtune.api import ModelConfig
from lrtune.batchcost import interpolate, measure_batch_cost, read_profile_curve, read_profile_sd_curve
from lrtune.speedup import early_abort_batch_cost, expected_longest, longest_step_batch_cost, reuse_batch_cost
from lrtune.configs import Command, Section
from lrtune.control import DEFAULT_COST_RATIO, Bounds
from lrtune.decoder import METHODS, DecodeConfig
from lrtune.errors import ConfigError
from lrtune.outdir import check_out, claim_out
from lrtune.runfiles import ProgressBar, changed_keys, config_key, log, read_json, write_atomic

from eval import metrics

RECORDS, SUMMARY, REPORT, CONFIG = "records.jsonl", "summary.json", "report.md", "config.json"
THROUGHPUT = "throughput.jsonl"  # one line per (method, invocation) in throughput mode: BatchStats
MODES = ("latency", "throughput")
# Options that may change between runs into the same --out (they do not change results).
RESUME_FREE = ("limit", "progress", "plots", "overwrite", "out", "profile")  # profile: only the predicted column
# lr+sd whose depths come from a controller: per round (adaptive, needs --controller), per
# problem from its measured α under the speedup model (oracle, after lr+sd on the problem),
# or the best fixed pair on the controller's training data (best-fixed).
CONTROLLED = ("adaptive", "oracle", "best-fixed")


@dataclass
class EvalOptions:
    """What to evaluate and where to write it (models/decoding: ModelConfig, DecodeConfig)."""

    __pydantic_config__ = STRICT

    task: Text = field(default="gsm_symbolic", metadata={"help": "gsm_symbolic | gsm8k | math500 | aime24 | humaneval | custom"})
    data: Text | None = field(default=None, metadata={"help": "problem file (JSONL/JSON/parquet) or hub dataset for file tasks"})
    limit: Problems = field(default=10, metadata={"help": "number of problems (a larger limit later resumes the same run)"})
    task_seed: Seed = field(default=0, metadata={"help": "problem generator seed (gsm_symbolic)"})
    heldout_from: Text | None = field(default=None, metadata={"help": "comma list of collect dirs (a verifier's or controller's training data): evaluate only problems whose template none of them holds (gsm_symbolic: the generator template; other tasks: the problem itself)"})
    problem_ids: Text | None = field(default=None, metadata={"help": "comma list of problem ids, or @FILE with one per line: evaluate exactly these, in this order (from the task's first 20 x --limit + 100 problems; e.g. the problems of an earlier run); --limit caps them"})
    methods: Text = field(default="target,sd,lr,lr+sd", metadata={"help": "comma list of target | sd | lr | lr+sd, each optionally with /async, /abort (early abort), /reuse (draft-prefix reuse), /w=N, /v=VERIFIER (e.g. lr+sd/async/v=llm_judge), and adaptive | oracle | best-fixed (depths from --controller; adaptive/c=POLICY_OR_DIR: from another controller)"})
    sweep: Text | None = field(default=None, metadata={"help": "grid, e.g. 'gamma1=1,2,4 gamma2=0,2,4' (adds one method per point)"})
    mode: Literal["latency", "throughput"] = field(default="latency", metadata={"help": "latency: methods interleaved per problem, one problem at a time; throughput: each method over the whole set with --max-concurrent problems in flight"})
    max_concurrent: Annotated[int, Interval(ge=1, le=4096)] = field(default=8, metadata={"help": "throughput mode: problems in flight at once"})
    warmup_tokens: Size = field(default=32, metadata={"help": "tokens per method in the untimed warm-up (0 = none)"})
    profile: Text | None = field(default=None, metadata={"help": "take the batch-cost curve b(n) from this `lrtune profile` JSON instead of measuring it after the warm-up"})
    out: Text = field(default="results/eval", metadata={"help": "output directory"})
    overwrite: bool = field(default=False, metadata={"help": "start over in --out (old records are kept as a backup)"})
    plots: bool = field(default=True, metadata={"help": "write PNG plots"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    unsafe_exec: bool = field(default=False, metadata={"help": "code tasks: run generated code without OS-level isolation when bubblewrap is missing (only the in-process Python guard; not isolation)"})


@dataclass
class EvalConfig:
    """Everything ``run`` needs; build with :func:`config_from_args` or directly."""

    options: EvalOptions = field(default_factory=EvalOptions)
    models: ModelConfig = field(default_factory=ModelConfig)
    decode: DecodeConfig = field(default_factory=lambda: DecodeConfig(gamma1=2, max_new_tokens=512, max_step_tokens=96))


@dataclass(frozen=True)
class MethodSpec:
    """One evaluated method: a decode ``kind`` with its γ1/γ2, options and a unique label.

    Options come from the label (``kind/opt/opt``): ``async`` (pipelined LR), ``abort``
    (early abort: stop the target rows a rejection makes useless), ``reuse`` (draft-prefix
    reuse: target rows start after the draft tokens the target would write itself,
    :mod:`lrtune.reuse`), ``w=N`` (draft branches),
    ``v=SPEC`` (a verifier other than the run's ``--verifier``).
    """

    label: str
    kind: str
    gamma1: int
    gamma2: int
    async_lr: bool = False
    width: int = 1
    verifier: str | None = None
    early_abort: bool = False
    reuse_drafts: bool = False
    control: str | None = None  # adaptive | oracle | best-fixed: lr+sd with depths from a controller
    controller: str | None = None  # adaptive/c=SPEC: this controller instead of the run's --controller

    def decode_config(self, base: DecodeConfig) -> DecodeConfig:
        return dataclasses.replace(base, method=self.kind, gamma1=max(1, self.gamma1), gamma2=max(1, self.gamma2),
                                   async_lr=self.async_lr, width=self.width,
                                   early_abort=self.early_abort or base.early_abort,
                                   reuse_drafts=self.reuse_drafts or base.reuse_drafts)


def parse_method(label: str, gamma1: int, gamma2: int) -> MethodSpec:
    """``"lr+sd/async/w=2/v=llm_judge"`` -> MethodSpec (see :class:`MethodSpec`). ``v=`` comes
    last and takes the rest of the label, so a checkpoint path may hold slashes."""
    if label.startswith("adaptive/c=") and label[len("adaptive/c="):].strip():
        return MethodSpec(label, "lr+sd", gamma1, gamma2, control="adaptive",
                          controller=label[len("adaptive/c="):].strip())
    head, sep, vspec = label.partition("/v=")
    kind, *opts = [x.strip() for x in head.split("/")]
    if sep:
        opts.append("v=" + vspec.strip())
    if kind in CONTROLLED and not opts:
        return MethodSpec(label, "lr+sd", gamma1, gamma2, control=kind)
    if kind not in METHODS:
        raise ConfigError(f"unknown method {kind!r} in {label!r}; choose from {', '.join((*METHODS, *CONTROLLED))}")
    extra: dict = {}
    for opt in opts:
        key, _, val = opt.partition("=")
        if opt == "async":
            extra["async_lr"] = True
        elif opt == "abort":
            extra["early_abort"] = True
        elif opt == "reuse":
            extra["reuse_drafts"] = True
        elif key == "w" and val.isdigit():
            extra["width"] = int(val)
        elif key == "v" and val:
            extra["verifier"] = val
        else:
            raise ConfigError(f"bad method option {opt!r} in {label!r} (async | abort | reuse | w=N | v=VERIFIER)")
    if extra and kind not in ("lr", "lr+sd"):
        raise ConfigError(f"method options apply to lr and lr+sd only: {label!r}")
    return MethodSpec(label, kind, gamma1 if "lr" in kind else 0, gamma2 if kind in ("sd", "lr+sd") else 0, **extra)


def seen_templates(task_name: str, dirs: str) -> set[str]:
    """The split groups (:func:`lrtune.tasks.template_of`) of every problem in collect dirs."""
    from lrtune.dataset import load_tables
    from lrtune.tasks import template_of

    seen = set()
    for d in [x.strip() for x in dirs.split(",") if x.strip()]:
        if not Path(d).expanduser().is_dir():
            raise ConfigError(f"--heldout-from {d}: not a directory (a collect output)")
        _, probs = load_tables(Path(d).expanduser())
        for r in probs.to_pylist():
            seen.add(template_of(r.get("task") or task_name, r["problem_id"]))
    return seen


def heldout_problems(task, opts: EvalOptions) -> list:
    """The first ``opts.limit`` problems whose template is in none of ``opts.heldout_from``;
    in a task mix each problem is grouped under its own task (as collect records it) and the
    tasks keep equal shares (unseen problems of one task may come much later in its pool)."""
    from lrtune.tasks import template_of

    seen = seen_templates(opts.task, opts.heldout_from)
    pool = task.load(limit=20 * opts.limit + 100, seed=opts.task_seed, path=opts.data)
    kept = [p for p in pool if template_of(p.meta.get("task") or opts.task, p.id) not in seen]
    kept = (task.balanced(kept) if hasattr(task, "balanced") else kept)[:opts.limit]
    log(f"held-out templates: {len(kept)} of the first {len(pool)} problems are unseen by {opts.heldout_from}")
    if len(kept) < opts.limit:
        log(f"warning: only {len(kept)} problems with unseen templates (asked for {opts.limit})")
    return kept


def listed_problems(task, opts: EvalOptions) -> list:
    """The problems ``opts.problem_ids`` names (a comma list or ``@FILE``), in that order,
    at most ``opts.limit``; a ConfigError names any id the task's pool does not hold."""
    if opts.heldout_from:
        raise ConfigError("--problem-ids names the problems itself: drop --heldout-from")
    spec = opts.problem_ids.strip()
    if spec.startswith("@"):
        path = Path(spec[1:]).expanduser()
        if not path.is_file():
            raise ConfigError(f"--problem-ids {spec}: no such file")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            why = "not a UTF-8 text file" if isinstance(e, UnicodeDecodeError) else (e.strerror or str(e))
            raise ConfigError(f"--problem-ids {spec}: {why}") from None
        ids = [x.strip() for x in text.splitlines() if x.strip()]
    else:
        ids = [x.strip() for x in spec.split(",") if x.strip()]
    ids = ids[:opts.limit]
    pool = {p.id: p for p in task.load(limit=20 * opts.limit + 100, seed=opts.task_seed, path=opts.data)}
    missing = [i for i in ids if i not in pool]
    if missing:
        raise ConfigError(f"--problem-ids: {len(missing)} id(s) not among the task's first {len(pool)} problems "
                          f"(task {opts.task!r}, seed {opts.task_seed}): {', '.join(missing[:5])}")
    return [pool[i] for i in ids]


@dataclass
class Summary:
    """What ``run`` returns: per-method rows (see ``summary.json``) and the file paths."""

    methods: dict[str, dict]
    out_dir: Path
    data: dict

    def __getitem__(self, method: str) -> dict:
        return self.methods[method]


# ---- method specs ----------------------------------------------------------------------
def parse_methods(methods: str, sweep: str | None, gamma1: int, gamma2: int) -> list[MethodSpec]:
    """Method specs from ``--methods`` and ``--sweep``; target-only is always first."""
    names = [m.strip() for m in methods.split(",") if m.strip()]
    specs = [parse_method(m, gamma1, gamma2) for m in dict.fromkeys(["target", *names])]
    if sweep:
        grid = parse_sweep(sweep)
        labels = {s.label for s in specs}
        for g1 in grid.get("gamma1", [gamma1]):
            for g2 in grid.get("gamma2", [gamma2]):
                kind = "lr+sd" if g1 and g2 else "lr" if g1 else "sd" if g2 else "target"
                if kind == "target":
                    continue
                spec = MethodSpec(f"{kind}[g1={g1},g2={g2}]", kind, g1, g2)
                if spec.label not in labels:
                    specs.append(spec)
                    labels.add(spec.label)
    return specs


def parse_sweep(text: str) -> dict[str, list[int]]:
    """``"gamma1=1,2,4 gamma2=0,2"`` -> ``{"gamma1": [1, 2, 4], "gamma2": [0, 2]}``."""
    grid: dict[str, list[int]] = {}
    for part in text.replace(";", " ").split():
        key, _, values = part.partition("=")
        if key not in ("gamma1", "gamma2") or not values:
            raise ConfigError(f"bad --sweep item {part!r}; expected gamma1=1,2,4 and/or gamma2=0,2,4")
        try:
            vals = [int(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise ConfigError(f"bad --sweep values in {part!r}: integers expected") from None
        if any(v < 0 or v > 16 for v in vals):
            raise ConfigError(f"--sweep values must be in 0..16: {part!r}")
        grid[key] = vals
    if not grid:
        raise ConfigError("empty --sweep")
    return grid


# ---- records on disk -------------------------------------------------------------------
def load_records(path: Path, keys: tuple[str, ...] = ("problem", "method")) -> list[dict]:
    """Records of ``records.jsonl`` (each must hold ``keys``); a torn last line (a crash
    mid-write) is dropped and the file rewritten without it, so appending can continue."""
    if not path.is_file():
        return []
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    good, bad_tail = [], False
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            if i >= len(lines) - 2:  # only the last line may be torn
                bad_tail = True
                continue
            raise ConfigError(f"{path}:{i + 1}: corrupt record; move the file away to start over") from None
        if not isinstance(rec, dict) or not set(keys) <= set(rec):
            raise ConfigError(f"{path}:{i + 1}: not an lrtune evaluate record (no {'/'.join(keys)}); move the file "
                              "away or use another --out")
        good.append(rec)
    if bad_tail:
        warnings.warn(f"{path}: dropped a torn last line (interrupted write); it will be redone", stacklevel=2)
        write_atomic(path, "".join(json.dumps(r) + "\n" for r in good))
    return good


def append_record(path: Path, record: dict) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def resume_key(cfg: EvalConfig) -> dict:
    """The part of the config that must match to append to an existing run."""
    return config_key({"options": cfg.options, "models": cfg.models, "decode": cfg.decode}, RESUME_FREE)


def check_resume(cfg: EvalConfig) -> None:
    """Phase 1: ``--out`` can take this run (:func:`lrtune.outdir.check_out`) and holds no run
    of another config unless ``--overwrite``; reads only."""
    out = check_out(cfg.options.out, "evaluate")
    cfg_path = out / CONFIG
    if not cfg_path.is_file():
        return
    old = read_json(cfg_path)
    diff = _changed(old, resume_key(cfg)) if old is not None else ["unreadable config"]
    if cfg.options.mode == "throughput" and "options.methods" in diff:
        # throughput mode decodes method after method anyway: a new --methods list reuses the
        # finished (problem, method) decodes and decodes only the methods it adds
        diff.remove("options.methods")
        log(f"{out}: --methods changed; finished decodes are reused, new methods decoded")
    if diff and not cfg.options.overwrite:
        raise ConfigError(f"{out} holds a run with a different config ({', '.join(diff)}); "
                          "use another --out, or --overwrite to start over (old records are kept)")


def prepare_out_dir(cfg: EvalConfig) -> tuple[Path, list[dict]]:
    """Phase 2 (after :func:`check_resume`): claim ``--out``, set old files aside with
    ``--overwrite``, record this config; return the directory and the records already there."""
    out = claim_out(cfg.options.out, "evaluate")
    if cfg.options.overwrite:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for name in (RECORDS, SUMMARY, REPORT, CONFIG, THROUGHPUT):
            if (out / name).exists():
                (out / name).rename(out / f"{name}.bak-{stamp}")
    write_atomic(out / CONFIG, json.dumps(resume_key(cfg), indent=1))
    return out, load_records(out / RECORDS)


def _changed(old: dict, new: dict) -> list[str]:
    """Config keys whose value changed (see :func:`lrtune.runfiles.changed_keys`)."""
    return changed_keys(old, new, resume_key(EvalConfig(options=EvalOptions(), models=ModelConfig(),
                                                        decode=DecodeConfig())))


# ---- the run ---------------------------------------------------------------------------
def run(cfg: EvalConfig) -> Summary:
    """Evaluate (resuming any finished work in ``cfg.options.out``) and write the reports."""
    from lrtune.tasks import get_task

    opts = cfg.options
    schema.check(opts)
    cfg.decode.validate()
    specs = parse_methods(opts.methods, opts.sweep, cfg.decode.gamma1, cfg.decode.gamma2)
    if opts.mode == "throughput":
        bad = [s.label for s in specs if s.async_lr or s.control == "oracle"]
        if bad:
            raise ConfigError(f"--mode throughput decodes many problems at once; {', '.join(bad)} cannot "
                              "(async LR and oracle run one problem at a time): use --mode latency")
    if any(s.control == "oracle" for s in specs) and not any(s.label == "lr+sd" for s in specs):
        raise ConfigError("method oracle needs lr+sd in --methods (it reads each problem's α from it)")
    from lrtune.verifiers import check_verifier_spec

    for s in specs:
        s.decode_config(cfg.decode).validate()
        if s.verifier:
            check_verifier_spec(s.verifier)
    _check_controllers(cfg, specs)
    task = get_task(opts.task)
    if getattr(task, "KIND", "math") == "code":
        from lrtune.sandbox import require_isolation

        require_isolation(opts.unsafe_exec)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        problems = (listed_problems(task, opts) if opts.problem_ids
                    else heldout_problems(task, opts) if opts.heldout_from
                    else task.load(limit=opts.limit, seed=opts.task_seed, path=opts.data))
    for w in caught:
        log(f"warning: {w.message}")
    if not problems:
        raise ConfigError(f"no problems to evaluate in task {opts.task!r}" + (f" ({opts.data})" if opts.data else ""))
    if len({p.id for p in problems}) != len(problems):
        raise ConfigError("problem ids are not unique; give every row a distinct 'id'")
    profile_curve = profile_sd = None
    if opts.profile:
        profile_curve, profile_sd = read_profile_curve(opts.profile), read_profile_sd_curve(opts.profile)
    check_resume(cfg)  # cheap: before the models, which may be built on first use
    from lrtune.api import check_configs, require_a_prompt_that_fits

    check_configs(cfg.models, dataclasses.replace(cfg.decode, method="lr+sd"), progress=opts.progress,
                  load_all_methods=_uses_draft(cfg, specs))
    require_a_prompt_that_fits(cfg.models, cfg.decode, [task.prompt(p) for p in problems], progress=opts.progress)
    # phase 2: every input is valid; only now is --out claimed and written
    out, records = prepare_out_dir(cfg)
    done = {(r["problem"], r["method"]) for r in records}
    todo = [(p, s) for p in problems for s in specs if (p.id, s.label) not in done]
    if done:
        log(f"resuming {out}: {len(done)} decodes done, {len(todo)} to go")

    timing: dict = {"load_s": 0.0, "warmup_s": 0.0, "loop_s": 0.0, "decode_s": 0.0, "prompt_cache_s": 0.0}
    previous = _previous_summary(out)
    batch_cost = {int(n): float(v) for n, v in previous["batch_cost"].items()} if previous.get("batch_cost") else None
    batch_cost_sd = sd_curve(previous.get("batch_cost_sd"))
    if opts.profile:
        batch_cost = profile_curve
        log(f"batch cost b(n) from {opts.profile}: " + ", ".join(f"b({n})={v:.2f}" for n, v in batch_cost.items()))
        batch_cost_sd = None if profile_sd is None else {"gamma2": profile_sd[0], "curve": profile_sd[1]}
        if profile_sd is None and any(s.kind == "lr+sd" for s in specs):
            log(f"note: {opts.profile} has no batch cost of SD rows (batch_cost_sd): lr+sd rows are predicted with "
                "plain b(n), which SD rows exceed; rerun lrtune profile")
    if todo:
        eng, measured, measured_sd = _start(cfg, specs, task, problems, timing)
        if not opts.profile:
            batch_cost, batch_cost_sd = measured, measured_sd
        if opts.mode == "throughput":
            _decode_throughput(eng, cfg, specs, task, problems, done, out, timing)
        else:
            _decode_all(eng, cfg, specs, task, problems, done, out, timing)
    records = load_records(out / RECORDS)
    total = {k: timing[k] + float(previous.get("timing", {}).get(k, 0.0)) for k in timing}
    data = write_reports(cfg, specs, problems, records, out, total, batch_cost, this_run=timing,
                         batch_cost_sd=batch_cost_sd)
    return Summary(methods=data["methods"], out_dir=out, data=data)


def _previous_summary(out: Path) -> dict:
    """The last summary of this run directory (its timings accumulate across invocations)."""
    return read_json(out / SUMMARY) or {}


@dataclass
class _Engines:
    """The loaded decoder and what each method plugs into its decode calls."""

    dec: Any  # lrtune.api.Decoder
    controller: Any  # adaptive / best-fixed / oracle methods only (None: no --controller)
    verifiers: dict  # MethodSpec.verifier (None: the configured verifier) -> Verifier
    controllers: dict = dataclasses.field(default_factory=dict)  # MethodSpec.controller (adaptive/c=) -> controller

    def verifier(self, spec: MethodSpec):
        return self.verifiers[spec.verifier]

    def controller_for(self, spec: MethodSpec):
        return self.controllers[spec.controller] if spec.controller else self.controller


def _uses_draft(cfg: EvalConfig, specs) -> bool:
    return any(s.kind in ("lr", "lr+sd") for s in specs) or (
        any(s.kind in ("sd", "lr+sd") for s in specs) and cfg.models.sd_method == "draft")


def _check_controllers(cfg: EvalConfig, specs) -> tuple:
    """The run's controller and each method's own (``adaptive/c=``), built (cheap: no model
    loads) so that a bad name or directory fails before ``--out`` is touched."""
    from lrtune.api import build_controller

    ctl = build_controller(cfg.models.controller, cfg.decode)
    own = {s.controller: build_controller(s.controller, cfg.decode) for s in specs if s.controller}
    if any(s.control in ("adaptive", "best-fixed") and not s.controller for s in specs) and ctl is None:
        raise ConfigError("methods adaptive and best-fixed need --controller (a policy or a controller directory)")
    return ctl, own


def _start(cfg: EvalConfig, specs, task, problems, timing) -> tuple[_Engines, dict | None, dict | None]:
    from lrtune.api import Decoder

    t0 = time.perf_counter()
    uses_draft = _uses_draft(cfg, specs)
    ctl, own = _check_controllers(cfg, specs)
    dec = Decoder.from_configs(dataclasses.replace(cfg.models, controller=None),
                               dataclasses.replace(cfg.decode, method="lr+sd"),
                               progress=cfg.options.progress, load_all_methods=uses_draft)
    for s in specs:  # start every engine now: lazy starts would bill the first problem
        dec.start_engines(s.decode_config(cfg.decode))
    from lrtune.api import price_on_engine

    ctl = price_on_engine(ctl, dec.target)
    own = {k: price_on_engine(c, dec.target) for k, c in own.items()}
    eng = _Engines(dec, ctl, _method_verifiers(dec, cfg, specs), own)
    timing["load_s"] = time.perf_counter() - t0
    log(f"engines ready in {timing['load_s']:.1f} s")
    t0 = time.perf_counter()
    limit = cfg.models.max_model_len
    need = cfg.decode.max_new_tokens + cfg.decode.max_step_tokens
    # never decode (not even warm up on) a prompt that does not fit; run() checked that one does
    warm = next(ids for ids in (dec.encode(task.prompt(p)) for p in problems) if len(ids) + need <= limit)
    if cfg.options.warmup_tokens > 0:
        for s in specs:
            dec.decoder.decode(warm, dataclasses.replace(s.decode_config(cfg.decode),
                                                         max_new_tokens=cfg.options.warmup_tokens),
                               verifier=eng.verifier(s))
    batch_cost = batch_cost_sd = None
    lr_specs = [s for s in specs if s.kind in ("lr", "lr+sd")]
    if lr_specs and cfg.options.warmup_tokens > 0 and not cfg.options.profile:  # --profile: run() has b(n)
        sizes = sorted({s.gamma1 + 1 for s in lr_specs})
        if ctl is not None and any(s.control for s in specs):
            sizes = sorted(set(sizes) | set(range(2, ctl.bounds.gamma1_max + 2)))
        batch_cost = measure_batch_cost(dec.target, [warm], sizes)
        log("batch cost b(n): " + ", ".join(f"b({n})={v:.2f}" for n, v in batch_cost.items()))
        sd_specs = [s for s in lr_specs if s.kind == "lr+sd" and not s.control]
        if sd_specs:  # LR+SD's target rows decode with SD, which batches worse than plain rows
            g2 = sd_specs[0].gamma2
            curve = measure_batch_cost(dec.target, [warm], sorted({s.gamma1 + 1 for s in sd_specs}), gamma2=g2)
            batch_cost_sd = {"gamma2": g2, "curve": curve}
            log(f"batch cost of SD rows (γ2 = {g2}): " + ", ".join(f"b({n})={v:.2f}" for n, v in curve.items()))
    timing["warmup_s"] = time.perf_counter() - t0
    return eng, batch_cost, batch_cost_sd


def _method_verifiers(dec, cfg: EvalConfig, specs) -> dict:
    """One verifier object per distinct ``v=`` option (model verifiers judge with the target)."""
    from lrtune.verifiers import make_verifier

    out = {None: dec.verifier}
    for s in specs:
        if s.verifier is not None and s.verifier not in out:
            out[s.verifier] = make_verifier(s.verifier, threshold=None, seed=cfg.decode.seed, backend=dec.target)
    return out


def _decode_all(eng: _Engines, cfg: EvalConfig, specs, task, problems, done, out: Path, timing) -> None:
    from lrtune.control import ProblemInfo

    dec = eng.dec

    progress = ProgressBar("evaluate", sum((p.id, s.label) not in done for p in problems for s in specs),
                           cfg.options.progress)
    live: dict[str, dict] = {s.label: {"k": 0, "n": 0, "wall": 0.0, "base": 0.0} for s in specs}
    base_wall: dict[str, float] = {}
    lrsd_stats: dict[str, dict] = {}  # problem -> the lr+sd row's stats (the oracle's α)
    for r in load_records(out / RECORDS):
        if r["method"] == "target":
            base_wall[r["problem"]] = r["wall_s"]
        elif r["method"] == "lr+sd":
            lrsd_stats[r["problem"]] = r.get("stats", {})
    t_loop = time.perf_counter()
    try:
        for i, prob in enumerate(problems):
            pending = [s for s in specs if (prob.id, s.label) not in done]
            if not pending:
                continue
            try:
                ids = dec.encode(task.prompt(prob))
            except ConfigError as e:
                log(f"skipping {prob.id}: {e}")
                progress.advance(len(pending))
                continue
            need = len(ids) + cfg.decode.max_new_tokens + cfg.decode.max_step_tokens
            if need > cfg.models.max_model_len:
                log(f"skipping {prob.id}: prompt of {len(ids)} tokens + budget exceeds max_model_len "
                     f"{cfg.models.max_model_len}")
                progress.advance(len(pending))
                continue
            order = [pending[j] for j in metrics.balanced_order(len(pending), i)]
            order = [s for s in order if s.control != "oracle"] + [s for s in order if s.control == "oracle"]
            for spec in order:
                dcfg, kwargs = _controlled(eng.controller_for(spec), cfg, spec, prob, task, lrsd_stats.get(prob.id))
                kwargs.setdefault("problem", ProblemInfo(prob.id, task.prompt(prob), len(ids), cfg.options.task))
                t_warm = time.perf_counter()
                _fresh_cache(dec, ids)
                timing["prompt_cache_s"] += time.perf_counter() - t_warm
                res, stats = dec.decoder.decode(ids, dcfg, verifier=eng.verifier(spec), **kwargs)
                timing["decode_s"] += stats.wall_s
                rec = _record(prob, i, spec, dcfg, cfg, task, res, stats)
                ok = rec["correct"]
                append_record(out / RECORDS, rec)
                done.add((prob.id, spec.label))
                if spec.label == "target":
                    base_wall[prob.id] = stats.wall_s
                elif spec.label == "lr+sd":
                    lrsd_stats[prob.id] = rec["stats"]
                lv = live[spec.label]
                lv["k"] += ok
                lv["n"] += 1
                if prob.id in base_wall:
                    lv["wall"] += stats.wall_s
                    lv["base"] += base_wall[prob.id]
                progress.advance(1, _live_text(spec.label, lv))
    finally:
        timing["loop_s"] += time.perf_counter() - t_loop
        progress.close()


def _record(prob, i: int, spec: MethodSpec, dcfg, cfg: EvalConfig, task, res, stats) -> dict:
    answer, ok = task.check(prob, res.text)
    return {"problem": prob.id, "index": i, "method": spec.label, "kind": spec.kind,
            # depths actually run (0 = not used); adaptive rows change them per round
            "gamma1": None if spec.control == "adaptive" else dcfg.gamma1 * dcfg.uses_lr,
            "gamma2": None if spec.control == "adaptive" else dcfg.gamma2 * dcfg.uses_sd,
            "control": spec.control, "decode_method": dcfg.method,
            "async_lr": spec.async_lr, "width": spec.width, "early_abort": spec.early_abort,
            "reuse_drafts": spec.reuse_drafts,
            "verifier": spec.verifier or cfg.models.verifier, "answer": answer, "expected": prob.answer,
            "correct": bool(ok), "tokens": len(res.token_ids), "wall_s": stats.wall_s,
            "finish": res.finish, "text": res.text, "stats": stats.to_dict(),
            "step_tokens": [len(ids) for _, ids in res.steps] if dcfg.uses_lr else None}


def _decode_throughput(eng: _Engines, cfg: EvalConfig, specs, task, problems, done, out: Path, timing) -> None:
    """Throughput mode: each method over every problem it has not finished, with
    ``--max-concurrent`` in flight; a record is written as each problem ends and one
    :class:`~lrtune.stats.BatchStats` line per method to ``throughput.jsonl``."""
    from lrtune.control import ProblemInfo

    dec = eng.dec
    opts = cfg.options
    progress = ProgressBar("evaluate", sum((p.id, s.label) not in done for p in problems for s in specs),
                           opts.progress)
    t_loop = time.perf_counter()
    try:
        for spec in specs:
            todo = [(i, p) for i, p in enumerate(problems) if (p.id, spec.label) not in done]
            if not todo:
                continue
            dcfg, kwargs = _controlled(eng.controller_for(spec), cfg, spec, todo[0][1], task, None)
            ids = [dec.encode(task.prompt(p)) for _, p in todo]
            problems_info = [ProblemInfo(p.id, task.prompt(p), len(x), opts.task) for (_, p), x in zip(todo, ids)]
            n_ok = [0]
            t_warm = time.perf_counter()
            _cache_prompt(dec, ids)  # untimed, as in latency mode: no method pays another's prefill
            timing["prompt_cache_s"] += time.perf_counter() - t_warm

            def on_done(k: int, result, spec=spec, dcfg=dcfg, todo=todo, n_ok=n_ok) -> None:
                i, prob = todo[k]
                if isinstance(result, Exception):
                    log(f"skipping {prob.id}: {result}")
                else:
                    rec = _record(prob, i, spec, dcfg, cfg, task, *result)
                    append_record(out / RECORDS, rec)
                    done.add((prob.id, spec.label))
                    n_ok[0] += rec["correct"]
                progress.advance(1, f"{spec.label}: acc {n_ok[0]}")

            _, batch = dec.decoder.decode_many(ids, dcfg, max_concurrent=opts.max_concurrent,
                                               max_len=cfg.models.max_model_len, controller=kwargs.get("controller"),
                                               verifier=eng.verifier(spec),
                                               problems=problems_info, on_done=on_done)
            timing["decode_s"] += batch.wall_s
            append_record(out / THROUGHPUT, {"method": spec.label, **batch.to_dict()})
    finally:
        timing["loop_s"] += time.perf_counter() - t_loop
        progress.close()


def throughput_rows(path: Path, labels) -> dict[str, dict]:
    """Per method, the sum of its ``throughput.jsonl`` lines (a resumed method has several):
    problems, wall seconds, tokens, problems/hour, tokens/s and rows per engine call."""
    out: dict[str, dict] = {}
    for line in load_records(path, keys=("method", "prompts", "wall_s")) if path.is_file() else []:
        m = out.setdefault(line["method"], {"prompts": 0, "wall_s": 0.0, "generated_tokens": 0, "calls": {},
                                            "rows": {}, "max_concurrent": line["max_concurrent"]})
        m["prompts"] += line["prompts"]
        m["wall_s"] += line["wall_s"]
        m["generated_tokens"] += line["generated_tokens"]
        for kind in line["calls"]:
            m["calls"][kind] = m["calls"].get(kind, 0) + line["calls"][kind]
            m["rows"][kind] = m["rows"].get(kind, 0) + line["rows"][kind]
    for m in out.values():
        m["problems_per_hour"] = 3600.0 * m["prompts"] / m["wall_s"] if m["wall_s"] else None
        m["tokens_per_s"] = m["generated_tokens"] / m["wall_s"] if m["wall_s"] else None
        m["rows_per_call"] = {k: m["rows"][k] / m["calls"][k] for k in m["calls"] if m["calls"][k]}
    return {k: out[k] for k in labels if k in out}


def _cache_prompt(dec, ids: list[int] | list[list[int]]) -> None:
    """Prefill the problem's prompt (or every prompt of a list) once on every engine,
    untimed. Engines cache prefixes, so otherwise the first method run on a problem would
    pay the prompt's prefill for all the others (a bias that the balanced order only cancels
    over many problems)."""
    from lrtune.backends.base import GenParams

    prompts = ids if ids and isinstance(ids[0], list) else [ids]
    params = GenParams(max_tokens=1, stop_at_delimiter=False)
    for backend in _backends(dec):
        backend.generate(prompts, params)


def _backends(dec) -> list:
    """The decoder's distinct engines: the target, and the draft when it has one."""
    return list({id(b): b for b in (dec.target, dec.draft) if b is not None}.values())


def _fresh_cache(dec, ids: list[int]) -> None:
    """Latency mode, before each timed decode: every engine forgets its cached prefixes and
    prefills the problem's prompt again, untimed. Each decode then starts from the same cache:
    greedy methods share prefixes (the same draft steps, the same target steps), so otherwise a
    method would find blocks an earlier method on the problem computed (which also hides draft
    tokens from the target's prefill scores: a reused block is not scored)."""
    for backend in _backends(dec):
        reset = getattr(backend, "reset_prefix_cache", None)
        if reset is not None:
            reset()
    _cache_prompt(dec, ids)


def _controlled(ctl, cfg: EvalConfig, spec: MethodSpec, prob, task, ref_stats: dict | None):
    """(decode config, decode kwargs) of one decode; controlled methods get their depths
    from ``ctl`` (the run's controller). ``ref_stats``: the lr+sd row's DecodeStats of this
    problem (the oracle reads its α)."""
    from lrtune.control import ProblemInfo
    from lrtune.speedup import best_gammas

    dcfg = spec.decode_config(cfg.decode)
    if spec.control == "adaptive":
        return dcfg, {"controller": ctl, "problem": ProblemInfo(prob.id, task.prompt(prob), task=cfg.options.task)}
    if spec.control == "best-fixed":
        g1, g2 = getattr(ctl, "best_fixed", None) or (cfg.decode.gamma1, cfg.decode.gamma2)
        return _fixed_depths(dcfg, g1, g2), {}
    if spec.control == "oracle":
        st = ref_stats or {}
        a1, a2 = st.get("alpha1"), st.get("alpha2")
        if a1 is None or a2 is None:
            return dcfg, {}
        c1, c2 = (ctl.c1, ctl.c2) if ctl is not None and hasattr(ctl, "c1") else (DEFAULT_COST_RATIO,) * 2
        b = getattr(ctl, "batch_cost", None) if ctl is not None else None
        bounds = ctl.bounds if ctl is not None else None
        # γ2 priced on the engine that runs it, as the controller prices it (api.price_on_engine);
        # without a priced controller the run's shared SD engine drafts --gamma2 (lrtune.api)
        drafted = getattr(ctl, "engine_drafts", None)
        if drafted is None:
            m = cfg.models
            drafted = cfg.decode.gamma2 if m.backend == "vllm" and m.shared_engine and m.sd_method == "draft" else 0
        best = best_gammas(min(a1, 0.999), c1, min(a2, 0.999), c2, (bounds or Bounds()).M,
                           bounds.gamma1_max if bounds else 6, bounds.gamma2_max if bounds else 8, b, drafted or None)
        return _fixed_depths(dcfg, best.gamma1, best.gamma2), {}
    return dcfg, {}


def _fixed_depths(dcfg, gamma1: int, gamma2: int):
    """``dcfg`` running fixed (γ1, γ2); a zero depth switches the method (γ1 = 0 → sd, ...)."""
    from lrtune.control import method_for_depths

    return dataclasses.replace(dcfg, method=method_for_depths(gamma1, gamma2),
                               gamma1=max(1, gamma1), gamma2=max(1, gamma2))


def _reuse_keep(records: list[dict], label: str) -> float | None:
    """Draft-prefix reuse: the share of the target's tokens at drafted positions that its
    rows still generated, 1 − reused / all (None without such tokens in ``label``'s records)."""
    st = [r["stats"] for r in records if r["method"] == label]
    total = sum(x.get("target_tokens_at_drafts") or 0 for x in st)
    if not total:
        return None
    return min(1.0, max(0.0, 1.0 - sum(x.get("reused_target_tokens") or 0 for x in st) / total))


def _live_text(label: str, lv: dict) -> str:
    acc = f"{lv['k'] / lv['n']:.0%}" if lv["n"] else "—"
    sp = f"{lv['base'] / lv['wall']:.2f}x" if lv["wall"] else "—"
    return f"{label}: acc {acc}, speedup {sp}"


# ---- reports ---------------------------------------------------------------------------
def sd_curve(saved) -> dict | None:
    """``{"gamma2": γ2, "curve": {n: b_SD(n)}}`` as a summary stores it (JSON keys are strings)."""
    if not isinstance(saved, dict) or not saved.get("curve"):
        return None
    return {"gamma2": int(saved["gamma2"]), "curve": {int(n): float(v) for n, v in saved["curve"].items()}}


def predict_rows(specs, rows: dict, recs: list[dict], batch_cost, latency: bool, verifier: str,
                 batch_cost_sd: dict | None = None) -> float | None:
    """Add each method's model prediction to its summary row (``predicted_speedup``, and in
    latency mode ``measured_over_predicted``) from the run's own α1, α2, c and committed step
    lengths, with b(n) from ``batch_cost``, or for lr+sd rows at its γ2 from ``batch_cost_sd``
    (``{"gamma2", "curve"}``: the batch cost of rows decoded with SD); returns the measured c."""
    c = metrics.measured_c(rows, recs)
    steps = metrics.committed_step_tokens(recs)
    for s in specs:
        row = rows[s.label]
        row.update(kind=s.kind, control=s.control, gamma1=s.gamma1, gamma2=s.gamma2, async_lr=s.async_lr, width=s.width,
                   verifier=s.verifier or verifier)
        if s.kind not in ("sd", "lr+sd"):
            # no token-level SD in this method (records written before the vLLM backend
            # stopped reporting the shared engine's late-counted drafts may still hold some)
            row["alpha2"] = None
        # b(n) between measured sizes interpolated, beyond the largest the last measured (never 1 by default)
        bc = (batch_cost_sd["curve"] if batch_cost_sd and s.kind == "lr+sd" and s.gamma2 == batch_cost_sd["gamma2"]
              else batch_cost)
        b = [interpolate(bc, min(max(n, min(bc)), max(bc))) for n in range(1, s.gamma1 + 2)] if bc else None
        keep = _reuse_keep(recs, s.label) if s.reuse_drafts else None
        if steps and s.kind in ("lr", "lr+sd"):  # a batch of steps lasts as long as its longest step
            abort = s.early_abort and row["alpha1"] is not None  # early abort: of the rows up to the first rejection
            b = (reuse_batch_cost(b, steps, keep, row["alpha1"] if abort else None) if keep is not None
                 else early_abort_batch_cost(b, steps, row["alpha1"]) if abort
                 else longest_step_batch_cost(b, steps))
        row["reuse_keep"] = keep
        pred = (None if s.control or s.width > 1  # per-round depths, or several branches: outside the model
                else metrics.predicted_speedup(s.kind, s.gamma1, s.gamma2, row["alpha1"], row["alpha2"], c, b,
                                               async_lr=s.async_lr))
        row["predicted_speedup"] = pred
        row["measured_over_predicted"] = (row["speedup_total"] / pred) if latency and pred and row["speedup_total"] else None
    return c


def write_reports(cfg: EvalConfig, specs, problems, records, out: Path, timing: dict, batch_cost,
                  this_run: dict | None = None, batch_cost_sd: dict | None = None) -> dict:
    """summary.json, report.md and plots from the records of the current problems."""
    from eval.report import render_markdown, write_plots

    ids = {p.id for p in problems}
    recs = [r for r in records if r["problem"] in ids]
    labels = [s.label for s in specs]
    rows = metrics.summarize(recs, labels)
    latency = cfg.options.mode == "latency"  # the model predicts one decode alone; throughput: latencies under load
    c = predict_rows(specs, rows, recs, batch_cost, latency, cfg.models.verifier, batch_cost_sd)
    steps = metrics.committed_step_tokens(recs)
    loop = timing.get("loop_s", 0.0)
    task_of = {p.id: p.meta["task"] for p in problems if p.meta.get("task")}  # set by a task mix
    data = {
        "task": cfg.options.task,
        "problems": len(problems),
        "decoded_problems": len({r["problem"] for r in recs}),
        "methods": rows,
        "paired": metrics.paired_comparisons(recs, labels),
        "accuracy_vs_target": [r for r in (metrics.paired_accuracy(recs, lab) for lab in labels if lab != "target")
                               if r is not None],
        # a task mix: every method's accuracy, finished answers, α1 and speedup on each task's problems
        "by_task": metrics.summarize_by_group(recs, labels, task_of) if len(set(task_of.values())) > 1 else None,
        "c_measured": c,
        "longest_step_factor": ({n: expected_longest(steps, n) / expected_longest(steps, 1) for n in range(2, 6)}
                                if steps else None),
        "batch_cost": batch_cost,
        "batch_cost_sd": batch_cost_sd,
        "timing": timing,
        "timing_this_invocation": this_run if this_run is not None else timing,
        "sweep": bool(cfg.options.sweep),
        "mode": cfg.options.mode,
        "throughput": throughput_rows(out / THROUGHPUT, labels) if cfg.options.mode == "throughput" else None,
        # loop time outside decoding and outside the untimed per-problem prompt prefill
        "evaluator_overhead": ((loop - timing.get("decode_s", 0.0) - timing.get("prompt_cache_s", 0.0)) / loop)
        if loop > 0 else None,
        "machine": machine_info(),
        "config": resume_key(cfg),
        "generated_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    plots = write_plots(data, out) if cfg.options.plots else []
    data["plots"] = [str(p.name) for p in plots]
    write_atomic(out / SUMMARY, json.dumps(data, indent=1))
    write_atomic(out / REPORT, render_markdown(data))
    return data


def machine_info() -> dict:
    """The machine a run measured (:func:`lrtune.machine.machine_info`: versions, CPU flags, GPUs)."""
    from lrtune.machine import machine_info as info

    return info()


# ---- CLI -------------------------------------------------------------------------------
COMMAND = Command(("evaluate",), __doc__.splitlines()[0], (
    Section(EvalOptions), Section(ModelConfig),
    Section(DecodeConfig, skip=("method",), defaults={k: getattr(EvalConfig().decode, k)
                                                     for k in ("gamma1", "max_new_tokens", "max_step_tokens")})))
add_arguments, make_parser = COMMAND.add_arguments, COMMAND.make_parser


def config_from_args(args) -> EvalConfig:
    options, models, decode = COMMAND.configs(args)
    return EvalConfig(options=options, models=models, decode=decode)


def main(cfg: EvalConfig) -> int:
    summary = run(cfg)
    from eval.report import print_table

    print_table(summary.data)
    log(f"wrote {summary.out_dir / REPORT}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    COMMAND.main()
