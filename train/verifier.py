"""``lrtune train verifier``: distil a collected teacher judge into a lightweight verifier.

    lrtune train verifier --data results/collect --student cross-encoder --out results/verifier
    lrtune train verifier --data results/collect --student features --out results/verifier-features
    lrtune train verifier --data results/collect --student lm-judge --max-train-pairs 300 --out ...

Steps: load the step pairs of ``lrtune collect`` → split by *problem* into train / val /
test → fit the student (:mod:`lrtune.train.students`) with early stopping on validation AUROC →
export the checkpoint (:mod:`lrtune.verifiers.distilled`) → reload it through the same
``load`` that decoding uses → calibrate the threshold on validation (max acceptance with
false-accept rate ≤ ``--max-false-accept``) → test-split agreement with the teacher and
latency per pair (batch 1 and batched) → ``lrtune_verifier.json`` + ``README.md``.
Re-running with the same ``--out`` resumes training from the last finished epoch. A finished
checkpoint that a retrain replaces (same settings, new data) is set aside to ``<out>.backup-<time>``
while it runs: put back if the retrain fails, kept there as the backup if it succeeds.
"""

from __future__ import annotations

from typing import Annotated, Literal

from annotated_types import Interval

from lrtune import gate
from lrtune import schema
from lrtune.schema import STRICT, Checked, Count, Seed, Text
from pydantic import StringConstraints

import contextlib
import json
import random
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from lrtune.configs import Command, Section, flat_dict
from lrtune.errors import ConfigError
from lrtune.interrupts import cleanup_on_interrupt
from lrtune.outdir import OWNER, check_out, claim_out
from lrtune.runfiles import backup_path, config_key, log, read_json, write_atomic
from lrtune.verifiers import distilled

from lrtune.train import students
from lrtune.train.calibrate import (
    Budget,
    agreement,
    agreement_threshold,
    calibrate_threshold,
    coarse_cap_warning,
    bound_threshold,
    uncertified_warning,
)
from lrtune.train.data import fingerprint, load_pairs, split_examples
from lrtune.train.verifier_report import model_card, print_metrics

TRAIN_CONFIG = "train_config.json"
RESUME_FREE = ("progress", "resume", "out", "keep_train_state", "min_train_pairs")  # never change the result
STOPPING_RULES = ("epochs", "patience")  # decide only where training stops: a resumed run may change them


@dataclass
class SplitOptions(Checked):
    """The train / validation / test split by template (all students; a template's problems stay together)."""

    __pydantic_config__ = STRICT

    val_fraction: Annotated[float, Interval(gt=0, lt=1)] = field(
        default=0.2, metadata={"help": "share of templates in the validation split"}
    )
    test_fraction: Annotated[float, Interval(gt=0, lt=1)] = field(
        default=0.2, metadata={"help": "share of templates in the test split"}
    )
    seed: Seed = field(default=0, metadata={"help": "seed of splits, initialisation and shuffling"})


@dataclass
class NeuralOptions(Checked):
    """The cross-encoder and lm-judge students: base model, LoRA and the training loop."""

    __pydantic_config__ = STRICT

    base_model: Text | None = field(
        default=None,
        metadata={
            "help": "student base: a sentence encoder (all-MiniLM-L6-v2 "
            "default, all-mpnet-base-v2) or, for lm-judge, a causal LM "
            "(default:draft) or a local dir"
        },
    )
    epochs: Annotated[int, Interval(ge=1, le=10_000)] = field(
        default=6, metadata={"help": "maximum training epochs (a resumed run may change it)"}
    )
    patience: Annotated[int, Interval(ge=1, le=10_000)] = field(
        default=2,
        metadata={"help": "stop after this many epochs without a better val AUROC (a resumed run may change it)"},
    )
    batch_size: Annotated[int, Interval(ge=1, le=65_536)] = field(
        default=16, metadata={"help": "training batch size (pairs)"}
    )
    learning_rate: Annotated[float, Interval(gt=0, le=10)] = field(
        default=5e-4, metadata={"help": "AdamW learning rate (LoRA + head)"}
    )
    lora_r: Annotated[int, Interval(ge=1, le=4096)] = field(default=8, metadata={"help": "LoRA rank"})
    lora_alpha: Annotated[int, Interval(ge=1, le=65_536)] = field(
        default=16, metadata={"help": "LoRA alpha (scale = alpha / r)"}
    )
    lora_dropout: Annotated[float, Interval(ge=0, lt=1)] = field(default=0.1, metadata={"help": "LoRA dropout"})
    soft_targets: bool = field(
        default=True, metadata={"help": "cross-encoder: fit the teacher's score, not its 0/1 label"}
    )
    max_length: Annotated[int, Interval(ge=8, le=1_000_000)] = field(
        default=256,
        metadata={
            "help": "student input tokens (lm-judge: prompt + answer); a longer "
            "input loses context first, then step text"
        },
    )
    device: Annotated[str, StringConstraints(pattern=r"^(auto|cpu|cuda(:[0-9]{1,2})?)$")] = field(
        default="cpu", metadata={"help": "cpu | cuda[:i] | auto"}
    )
    resume: bool = field(
        default=True, metadata={"help": "continue from the last finished epoch (state in OUT.train-state)"}
    )
    keep_train_state: bool = field(default=False, metadata={"help": "keep OUT.train-state after a successful export"})


@dataclass
class FeatureStudentOptions(Checked):
    """The features and forest students."""

    __pydantic_config__ = STRICT

    drop_features: Text = field(
        default="",
        metadata={
            "help": "features | forest: comma-separated feature names to "
            "leave out (ablations; see lrtune.verifiers.features)"
        },
    )


@dataclass
class CalibrationOptions(Budget):
    """The threshold on validation and the latency figure (all students); the budget (ε, 1-δ)
    of rule bound (``far`` uses ε as its cap on the validation pairs)."""

    __pydantic_config__ = STRICT

    threshold_rule: Literal["bound", "far", "agreement"] = field(
        default="bound",
        metadata={
            "help": "calibration on validation (templates the student never trained on): bound (highest acceptance "
            "whose "
            "false-accept rate is <= --max-false-accept with probability --confidence; Learn-then-Test, exact "
            "binomial) | far (empirical false-accept rate <= the cap, no guarantee) | agreement (the threshold "
            "that agrees with the teacher most often)"
        },
    )
    latency_pairs: Count = field(default=32, metadata={"help": "test pairs timed at batch 1 for the latency figure"})


FEATURE_STUDENTS = ("features", "forest", "router")  # the students over the cheap pair features
StudentKind = Literal[
    "cross-encoder", "lm-judge", "features", "forest", "router"
]  # distilled.STUDENT_KINDS (a test holds them equal)


@dataclass
class TrainVerifierConfig(Checked):
    """Distillation of a teacher verifier (see module docstring); options of one student kind
    or one step are typed sub-configs whose flags keep their flat names."""

    __pydantic_config__ = STRICT

    data: Text = field(default="results/collect", metadata={"help": "collect output dir (or comma list of dirs)"})
    out: Text = field(default="results/verifier", metadata={"help": "checkpoint directory to write"})
    student: StudentKind = field(
        default="cross-encoder",
        metadata={
            "help": "cross-encoder | lm-judge | features | forest | router (one-sided: judges a draft step without the "
            "target's, for --schedule score)"
        },
    )
    split: SplitOptions = field(default_factory=SplitOptions, metadata={"prefix": ""})
    neural: NeuralOptions = field(default_factory=NeuralOptions, metadata={"prefix": ""})
    feature: FeatureStudentOptions = field(default_factory=FeatureStudentOptions, metadata={"prefix": ""})
    calibration: CalibrationOptions = field(default_factory=CalibrationOptions, metadata={"prefix": ""})
    context_chars: Count = field(
        default=800,
        metadata={
            "help": "characters of context the student reads: the start of "
            "the problem statement and the latest steps, half each"
        },
    )
    max_train_pairs: Annotated[int, Interval(ge=2, le=10_000_000)] | None = field(
        default=None, metadata={"help": "subsample the train split to this many pairs (lm-judge on CPU is slow)"}
    )
    min_train_pairs: Count = field(
        default=20,
        metadata={
            "help": "refuse to train on fewer training-split pairs (a student "
            "fit to a handful of pairs is not a verifier)"
        },
    )
    progress: bool = field(default=True, metadata={"help": "show progress bars"})

    def validate(self) -> "TrainVerifierConfig":
        schema.check(self)
        if self.student not in distilled.STUDENT_KINDS:
            raise ConfigError(f"unknown student {self.student!r}; choose from {', '.join(distilled.STUDENT_KINDS)}")
        if self.feature.drop_features:
            from lrtune.verifiers.features import FEATURE_NAMES

            if self.student not in FEATURE_STUDENTS:
                raise ConfigError("--drop-features applies to the features, forest and router students only")
            unknown = sorted(set(self.dropped_features) - set(FEATURE_NAMES))
            if unknown:
                raise ConfigError(
                    f"--drop-features: unknown feature(s) {', '.join(unknown)}; choose from {', '.join(FEATURE_NAMES)}"
                )
            if set(FEATURE_NAMES) <= set(self.dropped_features):
                raise ConfigError("--drop-features names every feature: a student needs at least one")
        return self

    @classmethod
    def of(cls, **flat) -> "TrainVerifierConfig":
        """The config from its flat option names, as the command line spells them
        (``student="features", epochs=3, drop_features="len_ratio"``); ConfigError for a name it lacks."""
        from lrtune.configs import check_unknown_keys, from_flat

        check_unknown_keys(flat, cls)
        return from_flat(cls, flat)

    @property
    def dropped_features(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.feature.drop_features.split(",") if n.strip())


def up_to_date(cfg: TrainVerifierConfig, data_fingerprint: str) -> dict | None:
    """The metadata of a finished checkpoint in ``cfg.out`` trained with this config on
    this data, or None."""
    out = Path(cfg.out).expanduser()
    if read_json(out / TRAIN_CONFIG) == config_key({"options": cfg}, free=RESUME_FREE):
        from lrtune.filekinds import VerifierMeta, read_or_none

        meta = read_or_none(out / distilled.META, VerifierMeta)
        if meta and "metrics" in meta and (meta.get("data") or {}).get("fingerprint") == data_fingerprint:
            return meta
    return None


def _prepare_out(cfg: TrainVerifierConfig) -> tuple[Path, bool]:
    """The output dir, and whether it holds a finished checkpoint that this run replaces (same
    settings, new data); a different config in it is refused (resume only with the same one)."""
    out = check_out(cfg.out, "train verifier")  # phase 1: reads only, up to claim_out below
    key = config_key({"options": cfg}, free=RESUME_FREE)
    old = read_json(out / TRAIN_CONFIG)
    if old is not None and not isinstance(old.get("options"), dict):
        raise ConfigError(
            f"{out / TRAIN_CONFIG} is not a verifier's training record (no options object); use "
            "another --out or delete it"
        )
    if old is not None and old != key:
        changed = sorted(k for k in key["options"] if old.get("options", {}).get(k) != key["options"][k])
        old_rest = {**old, "options": {k: v for k, v in old.get("options", {}).items() if k not in STOPPING_RULES}}
        if old_rest != config_key({"options": cfg}, free=RESUME_FREE + STOPPING_RULES):
            raise ConfigError(
                f"{out} holds a training run with other settings ({', '.join(changed) or 'format'}); "
                "use another --out or delete it"
            )
        bad = next((k for k in changed if type(old["options"].get(k)) is not int or old["options"][k] < 1), None)
        if bad is not None:  # a recorded stopping rule must be a count, as the option is; never echoed
            raise ConfigError(
                f"{out / TRAIN_CONFIG}: options.{bad} is not a whole number >= 1 (not a training record lrtune "
                "wrote); use another --out or delete it"
            )
        log(
            "stopping rule changed on resume: "
            + ", ".join(f"{k} {old['options'].get(k)} -> {key['options'][k]}" for k in changed)
        )
    if old is None and (out / distilled.META).is_file():
        raise ConfigError(f"{out} already holds a verifier checkpoint; use another --out")
    meta = read_json(out / distilled.META) if old is not None else None
    _check_base_model(cfg)
    gate.passed("train verifier")
    out = claim_out(out, "train verifier")
    if meta is not None and "metrics" not in meta:
        (out / distilled.META).unlink()  # the provisional metadata of an interrupted run
    return out, meta is not None and "metrics" in meta


def _check_base_model(cfg) -> None:
    """Phase 1: a ``--base-model`` given is found (a sentence encoder for the features, forest and
    cross-encoder students, a causal LM for lm-judge) before ``--out`` is claimed."""
    base = cfg.neural.base_model
    if base is None:
        return
    if cfg.student == "lm-judge":
        distilled.resolve_base_lm(base)
    else:
        distilled.resolve_encoder(base)


def _set_aside(out: Path) -> Path:
    """Move everything in ``out`` (a finished checkpoint) to a new sibling ``<out>.backup-<time>``."""
    out = out.resolve()
    backup = backup_path(out.with_name(f"{out.name}.backup"))
    backup.mkdir()
    for p in out.iterdir():
        if p.name != OWNER:  # the directory stays this command's
            p.rename(backup / p.name)
    return backup


def _put_back(out: Path, backup: Path) -> None:
    """Undo :func:`_set_aside` after a failed retrain: this run's files go, the old checkpoint returns."""
    for p in out.iterdir():
        if p.name == OWNER:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    for p in backup.iterdir():
        p.rename(out / p.name)
    backup.rmdir()


@contextlib.contextmanager
def _replacing(out: Path, finished: bool):
    """With ``finished``, the checkpoint in ``out`` is set aside (:func:`_set_aside`) for the
    block: put back when the block fails (an interrupt included), kept as the backup when it
    succeeds."""
    backup = _set_aside(out) if finished else None
    try:
        with cleanup_on_interrupt():  # Ctrl-C: the old checkpoint is put back below
            yield
    except BaseException:
        if backup is not None:
            _put_back(out, backup)
            log(f"training failed: the previous checkpoint is back in {out}")
        raise
    if backup is not None:
        log(f"the previous checkpoint is kept in {backup}")


def measure_latency(verifier, pairs, n_single: int, batched: float) -> dict:
    """Seconds per pair at batch 1 (median of ``n_single`` calls) beside ``batched``, the
    caller's timing of the scoring pass over all ``pairs`` (batches of 64, total / n)."""
    single = []
    for p in pairs[:n_single]:
        t = time.perf_counter()
        verifier.score([p])
        single.append(time.perf_counter() - t)
    return {
        "batch1_s_per_pair": statistics.median(single) if single else None,
        "batched_s_per_pair": batched,
        "n_batch1": len(single),
        "n_batched": len(pairs),
    }


def agreement_with_intervals(scores, examples, threshold: float, seed: int) -> dict:
    """:func:`lrtune.train.calibrate.agreement` plus 95% bootstrap intervals over problems of its
    accuracy, AUROC and acceptance (``accuracy_ci95``, ``auroc_ci95``, ``acceptance_ci95``)."""
    from lrtune.pairstats import agreement_intervals

    labels = [e.label for e in examples]
    out = agreement(scores, labels, threshold)
    ci = agreement_intervals(scores, labels, threshold, [e.problem_id for e in examples], seed=seed)
    out.update(accuracy_ci95=list(ci["accuracy"]), auroc_ci95=list(ci["auroc"]), acceptance_ci95=list(ci["acceptance"]))
    return out


def brier(scores, labels) -> float | None:
    """Brier score (scikit-learn): mean (score − label)², how well the student's score reads as
    a probability of the teacher's accept; None without pairs."""
    from sklearn.metrics import brier_score_loss

    kept = [(min(1.0, max(0.0, float(s))), bool(y)) for s, y in zip(scores, labels) if s == s]
    return float(brier_score_loss([y for _, y in kept], [s for s, _ in kept])) if kept else None


def cheap_baselines(test, seed: int = 0, one_sided: bool = False) -> dict:
    """Agreement of the embedding (collect's cosine, threshold 0.95) and exact verifiers
    with the teacher on the test split: the bar a student must clear. ``one_sided`` (a router):
    the training-free verifiers that need no target step instead, ``target_logprob`` and its
    ``min`` form, scored as score rounds see a pair (target step blank, so no copy scores 1)."""
    out = {}
    cos = [e.embedding_cosine for e in test]
    if not one_sided and all(c is not None for c in cos):
        out["embedding@0.95"] = agreement_with_intervals(cos, test, 0.95, seed)
    ex = [e.exact_match for e in test]
    if not one_sided and all(x is not None for x in ex):
        out["exact"] = agreement_with_intervals([float(x) for x in ex], test, 0.5, seed)
    if test and any(e.pair.draft_scores is not None for e in test):
        # the training-free bar: the target's own likelihood of the draft step (recorded by collect)
        from lrtune.verifiers import make_verifier

        pairs = [one_sided_view(e.pair) if one_sided else e.pair for e in test]
        for spec in ("target_logprob", "target_logprob(min)") if one_sided else ("target_logprob",):
            v = make_verifier(spec)
            out[f"{spec}@{v.threshold:g}"] = agreement_with_intervals(v.score(pairs), test, v.threshold, seed)
    return out


def one_sided_view(pair):
    """``pair`` as a score round shows it to a verifier: the target step left blank."""
    from dataclasses import replace

    return replace(pair, target="")


def check_trainable(train, min_pairs: int) -> None:
    """Refuse (ConfigError) a training split with fewer than ``min_pairs`` pairs or one label."""
    n, problems = len(train), len({e.problem_id for e in train})
    if n < min_pairs:
        raise ConfigError(
            f"the training split holds {n} pairs from {problems} problem(s), fewer than --min-train-pairs "
            f"{min_pairs}: collect more problems (lrtune demo: --collect-problems or a larger --size) or "
            "lower --min-train-pairs"
        )
    labels = {e.label for e in train}
    if len(labels) < 2:
        which = "accept" if labels == {True} else "reject"
        raise ConfigError(
            f"every one of the {n} training pairs is labelled {which} by the teacher: a student cannot "
            "learn from one class; collect more problems or use another teacher"
        )


def run(cfg: TrainVerifierConfig) -> dict:
    """Train, export, calibrate and measure; returns the checkpoint metadata. A checkpoint
    already finished in ``--out`` with the same config is returned as is."""
    cfg.validate()
    check_out(cfg.out, "train verifier")  # a foreign --out fails before the data loads
    examples, teacher = load_pairs([d for d in cfg.data.split(",") if d])
    done = up_to_date(cfg, fingerprint(examples))
    if done is not None:
        log(f"{cfg.out} is up to date (same data and settings): nothing to train")
        return done
    splits = split_examples(examples, cfg.split.val_fraction, cfg.split.test_fraction, cfg.split.seed)
    train = splits["train"]
    if cfg.max_train_pairs and len(train) > cfg.max_train_pairs:
        train = random.Random(cfg.split.seed).sample(train, cfg.max_train_pairs)
    check_trainable(train, cfg.min_train_pairs)  # before --out is touched: a lower minimum may rerun there
    check_inputs(cfg, examples, train, splits["val"])
    out, finished = _prepare_out(cfg)
    with _replacing(out, finished):
        write_atomic(out / TRAIN_CONFIG, json.dumps(config_key({"options": cfg}, free=RESUME_FREE), indent=1))
        meta = _train_and_export(cfg, out, examples, teacher, splits, train)
    if not cfg.neural.keep_train_state:
        shutil.rmtree(students.state_dir(out), ignore_errors=True)
    return meta


def check_inputs(cfg: TrainVerifierConfig, examples, train, val) -> None:
    """Before ``--out`` is touched: a features/forest student has a feature left and finite
    values in it; a cross-encoder / lm-judge state to resume from was trained like this run."""
    if cfg.student in FEATURE_STUDENTS:
        students.check_finite(examples, students.student_features(train, cfg))
    elif cfg.neural.resume:
        students.check_state(students.state_dir(Path(cfg.out).expanduser()), students.state_key(train, val, cfg))


def fit_and_load(cfg: TrainVerifierConfig, out: Path, train, val, teacher: str) -> tuple[object, dict, float]:
    """Fit the student on ``train`` (``val`` picks its hyper-parameters) into ``out``, write
    provisional metadata (threshold 0.5) and reload it by the path decoding uses. Returns
    (verifier, metadata, training seconds)."""
    t0 = time.perf_counter()
    fit_meta = students.FITTERS[cfg.student](train, val, out, cfg)
    train_s = time.perf_counter() - t0
    meta = {
        "format": distilled.FORMAT,
        "version": distilled.VERSION,
        "kind": cfg.student,
        "threshold": 0.5,
        "teacher": teacher,
        **fit_meta,
    }
    write_atomic(out / distilled.META, json.dumps(meta, indent=1))  # provisional: lets load() read the weights
    return distilled.load(out, device=cfg.neural.device), meta, train_s


def _train_and_export(cfg: TrainVerifierConfig, out: Path, examples, teacher: str, splits: dict, train) -> dict:
    """Fit the student into ``out``, reload, calibrate, measure; write the metadata and card."""
    counts = _split_counts(splits, train, examples, teacher)
    v, meta, train_s = fit_and_load(cfg, out, train, splits["val"], teacher)
    calib, val_scores = _calibrate_student(cfg, v, splits["val"])
    v.threshold = calib["threshold"]
    test = splits["test"]
    t0 = time.perf_counter()
    test_scores = students.score_pairs(v, [e.pair for e in test])
    batched_s = (time.perf_counter() - t0) / max(1, len(test))
    metrics = {
        "test": {
            **agreement_with_intervals(test_scores, test, calib["threshold"], cfg.split.seed),
            "brier": brier(test_scores, [e.label for e in test]),
        },
        "val": agreement(val_scores, [e.label for e in splits["val"]], calib["threshold"]),
    }
    meta.update(
        threshold=calib["threshold"],
        calibration=calib,
        data={
            "dirs": cfg.data,
            "fingerprint": fingerprint(examples),
            "splits": counts,
            "split_by": "template",
            "seed": cfg.split.seed,
        },
        metrics={
            **metrics,
            "latency": _student_latency(cfg, v, test, batched_s),
            "baselines_test": cheap_baselines(test, cfg.split.seed, one_sided=cfg.student == "router"),
            "train_seconds": train_s,
        },
        training={k: v_ for k, v_ in flat_dict(cfg).items() if k not in RESUME_FREE},
        files=distilled.file_digests(out),  # checked on every load
    )
    write_atomic(out / "README.md", model_card(meta))
    write_atomic(out / distilled.META, json.dumps(meta, indent=1, default=float))  # last: the checkpoint is done
    return meta


def _split_counts(splits: dict, train, examples, teacher: str) -> dict:
    """Pairs, problems, templates and teacher acceptance of each split (logged, with a warning
    for a val or test split of one label)."""
    counts = {
        s: {
            "pairs": len(v),
            "problems": len({e.problem_id for e in v}),
            "templates": len({e.split_group for e in v}),
            "teacher_accept": sum(e.label for e in v) / max(1, len(v)),
        }
        for s, v in splits.items()
    }
    counts["train"]["pairs_used"] = len(train)
    log(
        f"{len(examples)} pairs from {teacher!r}: "
        + ", ".join(f"{s} {c['pairs']} ({c['problems']} problems)" for s, c in counts.items())
    )
    for s in ("val", "test"):
        if len({e.label for e in splits[s]}) < 2:
            log(f"warning: the {s} split holds one teacher label only; AUROC is undefined there")
    return counts


def _calibrate_student(cfg: TrainVerifierConfig, v, val) -> tuple[dict, list[float]]:
    """(the calibration by ``--threshold-rule`` on the validation split, the student's validation scores)."""
    val_scores = students.score_pairs(v, [e.pair for e in val])
    val_labels = [e.label for e in val]
    if cfg.calibration.threshold_rule == "agreement":
        calib = agreement_threshold(val_scores, val_labels)
        coarse = None
    elif cfg.calibration.threshold_rule == "bound":
        calib = bound_threshold(val_scores, val_labels, [e.split_group for e in val], cfg.calibration)
        coarse = uncertified_warning(calib)
    else:
        calib = calibrate_threshold(val_scores, val_labels, cfg.calibration.max_false_accept)
        coarse = coarse_cap_warning(calib["val_rejected"], cfg.calibration.max_false_accept)
    if coarse:
        log(f"warning: {coarse}")
    return calib, val_scores


def _student_latency(cfg: TrainVerifierConfig, v, test, batched_s: float) -> dict:
    """The student's seconds per pair (single and batched) beside the teacher's as collect recorded them."""
    lat = measure_latency(v, [e.pair for e in test], cfg.calibration.latency_pairs, batched_s)
    teacher_s = [e.teacher_s for e in test if e.teacher_s is not None]
    lat["teacher_s_per_pair"] = statistics.median(teacher_s) if teacher_s else None
    lat["teacher_note"] = "median judge seconds per pair as recorded by collect (batched per round, same machine)"
    if lat["teacher_s_per_pair"] and lat["batched_s_per_pair"]:
        lat["cost_ratio_batched"] = lat["batched_s_per_pair"] / lat["teacher_s_per_pair"]
    return lat


COMMAND = Command(("train", "verifier"), __doc__.splitlines()[0], (Section(TrainVerifierConfig),))
add_arguments, make_parser, config_from_args = COMMAND.add_arguments, COMMAND.make_parser, COMMAND.config


def main(cfg: TrainVerifierConfig) -> int:
    meta = run(cfg)
    print_metrics(meta)
    log(f"verifier checkpoint: {cfg.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    COMMAND.main(lambda args: main(config_from_args(args)))
