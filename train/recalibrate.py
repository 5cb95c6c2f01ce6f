"""``lrtune calibrate``: set a verifier's threshold by a false-accept budget with a guarantee.

    lrtune calibrate --verifier embedding --data results/collect_heldout --max-false-accept 0.05
    lrtune calibrate --verifier results/verifier --data results/collect_heldout --confidence 0.9

Scores every teacher-labelled pair of ``--data`` (collect directories: the pairs' recorded
context, steps and target scores, read as training and decoding read them) with the verifier,
then keeps the most permissive threshold whose false-accept rate (share of teacher-rejected
steps accepted) is ≤ ε with probability ≥ 1 − δ (:func:`~lrtune.train.calibrate.bound_threshold`:
Learn then Test; by default each template counts once). The pairs must come from problems,
and for a student from templates, the verifier never trained on.

A training-free verifier (``embedding``, ``exact``, ``target_logprob[(min)]``) gets a JSON
file (``--out``) and the spec to decode with (``embedding@T``); a checkpoint gets the new
threshold and its evidence in its metadata and card (the previous calibration kept under
``calibration_history``). Judges that need a model engine are refused: distil them first.

With ``--max-accuracy-loss Δ`` it calibrates answers instead of pairs: it decodes ``--limit``
problems of ``--task`` (templates the checkpoint never trained on) with target-only and with
lr+sd at a ladder of thresholds and keeps the most permissive one whose rate of answers that
differ from target-only is ≤ Δ at ``--confidence`` (:mod:`lrtune.train.accuracy_budget`).

    lrtune calibrate --verifier results/verifier --max-accuracy-loss 0.05 --limit 60
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from annotated_types import Interval


from lrtune import gate
from lrtune.configs import Command, Section
from lrtune.errors import ConfigError
from lrtune.runfiles import log
from lrtune.schema import STRICT, Fraction, Problems, Seed, Text
from lrtune.train.accuracy_budget import DEFAULT_LADDER
from lrtune.train.calibrate import Budget


@dataclass
class CalibrateConfig(Budget):
    """Settings of ``lrtune calibrate`` (see module docstring); the budget (ε, 1-δ) first."""

    __pydantic_config__ = STRICT

    verifier: Text = field(
        default="",
        metadata={
            "help": "a training-free verifier spec (embedding, exact, "
            "target_logprob, target_logprob(min)) or a checkpoint directory"
        },
    )
    data: Text = field(
        default="",
        metadata={"help": "collect output dir (or comma list) of teacher-labelled pairs the verifier never trained on"},
    )
    rounds: Literal["auto", "lr", "score"] = field(
        default="auto",
        metadata={
            "help": "which rounds the threshold is for: lr (the verifier sees the target's step), score (it does not: "
            "one-sided verifiers); auto: score for a router, else lr"
        },
    )
    max_accuracy_loss: Fraction | None = field(
        default=None,
        metadata={
            "help": "Δ: calibrate answers, not pairs: the most permissive threshold whose share of answers that differ "
            "from target-only greedy is <= Δ at --confidence (decodes --limit problems of --task)"
        },
    )
    task: Text = field(
        default="gsm_symbolic", metadata={"help": "--max-accuracy-loss: the task of the calibration problems"}
    )
    task_data: Text | None = field(default=None, metadata={"help": "--max-accuracy-loss: problem file for file tasks"})
    task_seed: Seed = field(
        default=2,
        metadata={"help": "--max-accuracy-loss: problem generator seed (collect uses 0, lrtune demo's evaluation 1)"},
    )
    limit: Problems = field(
        default=80,
        metadata={
            "help": "--max-accuracy-loss: calibration problems (N); N certifies Δ only if (1-Δ)^N <= 1-confidence"
        },
    )
    heldout_from: Text | None = field(
        default=None,
        metadata={
            "help": "--max-accuracy-loss: collect dirs whose templates "
            "to leave out (default: the checkpoint's training data)"
        },
    )
    thresholds: Text = field(
        default=",".join(f"{t:g}" for t in DEFAULT_LADDER),
        metadata={"help": "--max-accuracy-loss: the ladder, strict to permissive"},
    )
    max_concurrent: Annotated[int, Interval(ge=1, le=64)] = field(
        default=8,
        metadata={
            "help": "--max-accuracy-loss: calibration problems decoded at once (answers, not latency, are measured; "
            "under --numerics exact a problem gets the tokens it gets alone)"
        },
    )
    out: Text | None = field(
        default=None,
        metadata={
            "help": "JSON file for the result (required for a training-free verifier; a checkpoint is updated in place)"
        },
    )
    dry_run: bool = field(default=False, metadata={"help": "print the result, write nothing"})

    @cached_property
    def verifier_spec(self):
        """``verifier`` parsed once (:class:`lrtune.verifiers.VerifierSpec`); every step reads it."""
        from lrtune.verifiers import VerifierSpec

        return VerifierSpec.parse(self.verifier)

    def validate(self) -> "CalibrateConfig":
        from lrtune import schema
        from lrtune.verifiers import MODEL_VERIFIERS, check_verifier_spec

        schema.check(self)
        if not self.verifier:
            raise ConfigError("lrtune calibrate needs --verifier SPEC_OR_DIR")
        if self.max_accuracy_loss is None and not self.data:
            raise ConfigError(
                "lrtune calibrate needs --data COLLECT_DIR (labelled pairs), or --max-accuracy-loss Δ "
                "to calibrate on decoded answers"
            )
        spec = check_verifier_spec(self.verifier_spec)
        if spec.threshold is not None:
            raise ConfigError(f"--verifier: give it without @T ({self.verifier!r}): calibrate chooses the threshold")
        if spec.kind in MODEL_VERIFIERS:
            raise ConfigError(
                f"--verifier: {spec.kind} needs a model engine per pair; distil it into a checkpoint "
                "(lrtune train verifier) and calibrate that"
            )
        if spec.kind in ("never", "always", "random"):
            raise ConfigError(f"--verifier: {spec.kind} has no threshold to calibrate")
        if spec.kind != "checkpoint" and not self.out and not self.dry_run:
            raise ConfigError("--out: a training-free verifier's calibration goes to a JSON file (or use --dry-run)")
        for d in [x for x in self.data.split(",") if x.strip()]:
            if not Path(d.strip()).expanduser().is_dir():
                raise ConfigError(f"--data: not a directory: {d.strip()}")
        if self.max_accuracy_loss is not None:
            from lrtune.tasks import get_task
            from lrtune.train.accuracy_budget import max_differences, parse_ladder, problems_needed

            if self.data:
                raise ConfigError("--data: --max-accuracy-loss decodes problems of --task; give one of the two")
            parse_ladder(self.thresholds)
            get_task(self.task)
            if max_differences(self.limit, self.max_accuracy_loss, self.confidence) < 0:
                raise ConfigError(
                    f"--limit {self.limit} problems cannot certify an accuracy loss <= "
                    f"{self.max_accuracy_loss:g} at confidence {self.confidence:g} even with no answer "
                    f"changed; that needs at least {problems_needed(self.max_accuracy_loss, self.confidence)}"
                )
        return self


def _scored(cfg: CalibrateConfig, examples):
    """(scores, labels, the view) of ``examples``' pairs as the verifier sees them in its rounds."""
    from lrtune.train.students import score_pairs
    from lrtune.train.verifier import one_sided_view
    from lrtune.verifiers import make_verifier

    v = make_verifier(cfg.verifier_spec)
    view = cfg.rounds if cfg.rounds != "auto" else ("score" if getattr(v, "name", "") == "distilled:router" else "lr")
    pairs = [one_sided_view(e.pair) if view == "score" else e.pair for e in examples]
    return score_pairs(v, pairs), [e.label for e in examples], view


def _check_unseen(cfg: CalibrateConfig, examples) -> dict | None:
    """A checkpoint's metadata; ConfigError when ``--data`` is its own training data."""
    from lrtune.train.data import fingerprint
    from lrtune.verifiers.distilled import read_meta

    meta = read_meta(cfg.verifier)
    trained = meta.get("data") or {}
    if trained.get("fingerprint") and trained["fingerprint"] == fingerprint(examples):
        raise ConfigError(
            "--data: these are the pairs the checkpoint was trained on; calibrate on pairs of templates it never saw"
        )
    return meta


def run(cfg: CalibrateConfig, models=None, decode=None) -> dict:
    """Score, calibrate, write (see module docstring); returns the calibration record.
    ``models``/``decode`` (ModelConfig, DecodeConfig): the engines of ``--max-accuracy-loss``."""
    if cfg.max_accuracy_loss is not None:
        return run_accuracy(cfg, models, decode)
    from lrtune.train.calibrate import agreement, bound_threshold, uncertified_warning
    from lrtune.train.data import fingerprint

    cfg.validate()
    spec = cfg.verifier_spec
    out = None
    if cfg.out and not cfg.dry_run:
        from lrtune.outdir import json_out_file

        out = json_out_file(cfg.out, inputs=_inputs(cfg))  # a bad --out is refused before any model loads
    from lrtune.train.data import load_pairs

    examples, teacher = load_pairs([d.strip() for d in cfg.data.split(",")])
    meta = _check_unseen(cfg, examples) if spec.kind == "checkpoint" else None
    gate.passed("calibrate")
    if cfg.out and not cfg.dry_run:
        from lrtune.outdir import claim_json_out

        claim_json_out(out)
    if meta is not None and not cfg.dry_run:
        hold_checkpoint(Path(spec.path).expanduser(), meta)
    scores, labels, view = _scored(cfg, examples)
    calib = bound_threshold(scores, labels, [e.split_group for e in examples], cfg)
    warn = uncertified_warning(calib)
    if warn:
        log(f"warning: {warn}")
    calib.update(
        data={
            "dirs": cfg.data,
            "fingerprint": fingerprint(examples),
            "teacher": teacher,
            "problems": len({e.problem_id for e in examples}),
        },
        rounds=view,
        agreement=agreement(scores, labels, calib["threshold"]),
    )
    base = spec.path if spec.kind == "checkpoint" else str(spec)
    calib["spec"] = f"{base}@{calib['threshold']:.6g}" if spec.kind != "checkpoint" else base
    if not cfg.dry_run:
        if meta is not None:
            _write_checkpoint(Path(spec.path).expanduser(), meta, calib)
        if out is not None:
            from lrtune.runfiles import write_json_file

            write_json_file(out, calib)
    return calib


def _inputs(cfg) -> tuple:
    """What this calibration reads: its labelled data, the checkpoint, the calibration problems."""
    spec = cfg.verifier_spec
    return (cfg.data, spec.path if spec.kind == "checkpoint" else None, cfg.task_data, cfg.heldout_from)


def run_accuracy(cfg: CalibrateConfig, models=None, decode=None) -> dict:
    """``--max-accuracy-loss``: walk the threshold ladder on decoded answers (phase 1: every
    input checked before an engine starts); a checkpoint gets the chosen threshold (1.0 when
    none is certified) and the evidence as ``accuracy_budget``."""
    import dataclasses

    from lrtune.build import check_configs
    from lrtune.decoder import DecodeConfig
    from lrtune.modelconfig import ModelConfig
    from lrtune.tasks import get_task
    from lrtune.train.accuracy_budget import budget_story, parse_ladder

    cfg.validate()
    models = dataclasses.replace(
        models or ModelConfig(), verifier=cfg.verifier, verifier_threshold=None, controller=None
    ).validate()
    dcfg = dataclasses.replace(decode or DecodeConfig(), method="lr+sd").validate()
    meta, heldout = _checkpoint_heldout(cfg)
    out = None
    if cfg.out:
        from lrtune.outdir import json_out_file

        out = json_out_file(cfg.out, inputs=_inputs(cfg))
    progress_path = _progress_path(cfg, out)
    task = get_task(cfg.task)
    problems = _calibration_problems(cfg, task, heldout)
    check_configs(models, dcfg, load_all_methods=True)
    ladder = parse_ladder(cfg.thresholds)
    gate.passed("calibrate")
    if out is not None:
        from lrtune.outdir import claim_json_out

        claim_json_out(out)
    if meta is not None:
        hold_checkpoint(Path(cfg.verifier_spec.path).expanduser(), meta)
    budget = _decode_ladder(cfg, models, dcfg, task, problems, ladder, progress_path, meta)
    budget.update(
        task=cfg.task,
        task_seed=cfg.task_seed,
        heldout_from=heldout,
        spec=cfg.verifier,
        decode={k: getattr(dcfg, k) for k in ("gamma1", "gamma2", "max_new_tokens", "max_step_tokens")},
    )
    if not budget["certified"]:
        log(f"warning: {budget_story(budget)}; the threshold is set to 1.0 (identical steps only)")
    if not cfg.dry_run:
        _write_budget(cfg, meta, out, budget)
    return budget


def _checkpoint_heldout(cfg: CalibrateConfig) -> tuple[dict | None, str | None]:
    """(the checkpoint's metadata or None, the data whose templates the calibration problems
    avoid): ``--heldout-from``, else the checkpoint's own training data when it is here."""
    spec, meta, heldout = cfg.verifier_spec, None, cfg.heldout_from
    if spec.kind == "checkpoint":
        from lrtune.verifiers.distilled import read_meta

        meta = read_meta(spec.path)
        trained = str((meta.get("data") or {}).get("dirs") or "")
        if heldout is None and trained and all(Path(d.strip()).expanduser().is_dir() for d in trained.split(",")):
            heldout = trained
        elif heldout is None:
            log(
                "warning: the checkpoint's training data is not here; calibration problems may share its templates "
                "(pass --heldout-from)"
            )
    return meta, heldout


def _progress_path(cfg: CalibrateConfig, out: Path | None) -> Path:
    """Where the ladder's decodes are appended: beside ``--out``, else in the checkpoint."""
    if out is not None:
        return out.with_name(out.name + ".progress.jsonl")
    return Path(cfg.verifier_spec.path).expanduser() / "accuracy_budget.progress.jsonl"


def _calibration_problems(cfg: CalibrateConfig, task, heldout: str | None) -> list:
    """``--limit`` problems of ``--task`` (of templates ``heldout`` lacks, when given);
    ConfigError when fewer exist."""
    from lrtune.dataset import unseen_problems

    problems = (
        unseen_problems(task, cfg.task, heldout, cfg.limit, cfg.task_seed, cfg.task_data)[0]
        if heldout
        else task.load(limit=cfg.limit, seed=cfg.task_seed, path=cfg.task_data)[: cfg.limit]
    )
    if len(problems) < cfg.limit:
        raise ConfigError(f"--limit {cfg.limit}: only {len(problems)} calibration problems of unseen templates")
    return problems


def _ladder_key(models, dcfg, cfg: CalibrateConfig, problems, meta: dict | None) -> str:
    """The progress file's key of this configuration: models, decoding, task, problems, training data."""
    import hashlib

    from lrtune.configs import flat_dict

    settings = {
        "models": flat_dict(models),
        "decode": flat_dict(dcfg),
        "task": cfg.task,
        "problems": [p.id for p in problems],
        "data": (meta or {}).get("data"),
    }
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _decode_ladder(cfg: CalibrateConfig, models, dcfg, task, problems, ladder, progress_path: Path, meta) -> dict:
    """Load the engines and walk the ladder (:func:`~lrtune.train.accuracy_budget.run_ladder`)."""
    from lrtune.decoding import Decoder
    from lrtune.train.accuracy_budget import run_ladder

    key = _ladder_key(models, dcfg, cfg, problems, meta)
    with Decoder.from_configs(models, dcfg, load_all_methods=True) as dec:
        return run_ladder(
            dec,
            dec.verifier,
            task,
            problems,
            ladder,
            dcfg,
            cfg.max_accuracy_loss,
            cfg.confidence,
            progress_path,
            key,
            log=log,
            write=not cfg.dry_run,
            numerics=models.engine.numerics,
            max_concurrent=cfg.max_concurrent,
        )


def _write_budget(cfg: CalibrateConfig, meta: dict | None, out: Path | None, budget: dict) -> None:
    """The checkpoint's threshold (1.0 when none is certified) and evidence; the ``--out`` JSON."""
    if meta is not None:
        thr = budget["threshold"] if budget["certified"] else 1.0
        path = Path(cfg.verifier_spec.path).expanduser()
        _write_checkpoint(path, meta, {**budget, "threshold": thr}, accuracy_budget=budget)
    if out is not None:
        from lrtune.runfiles import write_json_file

        write_json_file(out, budget)


def _write_checkpoint(root: Path, meta: dict, calib: dict, **extra) -> None:
    """The checkpoint's threshold and calibration replaced, the previous calibration appended to
    ``calibration_history``, ``extra`` metadata set; card first, metadata last (it makes the change)."""
    from lrtune.train.verifier_report import model_card
    from lrtune.verifiers.distilled import META

    from lrtune.runfiles import write_atomic_files

    history = list(meta.get("calibration_history") or []) + [meta.get("calibration")]
    meta = {**meta, **extra, "threshold": calib["threshold"], "calibration": calib, "calibration_history": history}
    # both or neither: a full disk leaves the card and the metadata as they were
    write_atomic_files({root / "README.md": model_card(meta), root / META: json.dumps(meta, indent=1, default=float)})


def hold_checkpoint(root: Path, meta: dict) -> None:
    """Phase 2 for a checkpoint this calibration rewrites: lock it (:mod:`lrtune.locks`, as
    ``train verifier`` locks its output), so two calibrations, or a calibration and a training,
    never interleave a read-change-write; then check that its metadata is still the ``meta``
    read in phase 1. ConfigError (one line) otherwise."""
    from lrtune import locks
    from lrtune.verifiers.distilled import META, read_meta

    if not locks.hold(root):
        raise ConfigError(f"{root} is being written by another lrtune command now; wait for it to end")
    if read_meta(str(root)) != meta:
        raise ConfigError(f"{root / META} changed after this calibration read it; run it again")


def summary_lines(calib: dict) -> list[str]:
    """What ``lrtune calibrate`` prints."""
    from lrtune.train.verifier_report import threshold_story

    if "max_accuracy_loss" in calib:
        from lrtune.train.accuracy_budget import budget_story

        return [
            f"threshold {calib['threshold'] if calib['certified'] else 1.0:g}: {budget_story(calib)}",
            f"target-only accuracy on the calibration problems: {calib['target_accuracy']:.2f}",
        ]

    a = calib["agreement"]
    return [
        f"threshold {calib['threshold']:.6g}: {threshold_story(calib)}",
        f"on these pairs: acceptance {a['acceptance']:.3f} (teacher {a['teacher_acceptance']:.3f}), "
        f"false-accept rate {a['false_accept_rate'] if a['false_accept_rate'] is not None else float('nan'):.3f}",
        f"decode with: --verifier {calib['spec']}",
    ]


def _sections():
    from lrtune.modelconfig import ModelConfig
    from lrtune.decoder import DecodeConfig

    return (
        Section(CalibrateConfig),
        Section(ModelConfig, skip=("verifier", "verifier_threshold", "controller")),
        Section(DecodeConfig, skip=("method",)),
    )


COMMAND = Command(("calibrate",), __doc__.splitlines()[0], _sections())
add_arguments, make_parser = COMMAND.add_arguments, COMMAND.make_parser


def config_from_args(args):
    """(CalibrateConfig, ModelConfig, DecodeConfig) from the command line."""
    return tuple(COMMAND.configs(args))


def main(cfgs) -> int:
    cfg, models, decode = cfgs if isinstance(cfgs, tuple) else (cfgs, None, None)
    for line in summary_lines(run(cfg, models, decode)):
        print(line)
    return 0
