"""``lrtune train controller``: fit the learned (γ1, γ2) controller on collected problems.

    lrtune train controller --data results/collect --profile results/profile.json --out results/controller

Per-problem rows of ``lrtune collect`` give each problem's measured α1, α2 (and c1). The
problems' texts are reloaded from the task the collect run used. :class:`AlphaPredictor`
(ridge, penalty chosen by cross-validation) maps problem features to (α1, α2); metrics are
K-fold cross-validated **by problem**:

* MAE of the predicted α1, α2 vs predicting the training mean;
* decision quality under the speedup model h (with the profile's c1, c2, b(n)): for each
  held-out problem, h at the (γ1, γ2) chosen from the prediction, at the best fixed
  (γ1, γ2) of the training folds (max mean h), and at the oracle (γ1, γ2) from its true α.

The profile (``lrtune profile``) supplies c1, c2 and the batch-cost curve b(n); without one,
c1 = c2 = the median measured c1 of the data and b ≡ 1 (stated in the metadata). Every γ2 is
priced as at run time on the shared SD engine, which drafts ``gamma2_max`` tokens per pass
whatever γ2 a round asks for (:func:`lrtune.speedup.g` with ``drafted``; ``lrtune.api``).
"""

from __future__ import annotations

from typing import Annotated

from annotated_types import Interval

from lrtune import gate
from lrtune import schema
from lrtune.schema import STRICT, Checked, Seed, Text

import hashlib
import json
import math
import shutil
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lrtune.batchcost import profile_c2
from lrtune.configs import Command, Section
from lrtune.control import DEFAULT_COST_RATIO, Bounds, ProblemInfo
from lrtune.errors import ConfigError
from lrtune import outdir
from lrtune.runfiles import backup_path, log, read_json
from lrtune.pricing import Pricing

from lrtune.policies import learned


TRAIN_CONFIG = "train_config.json"


@dataclass
class TrainControllerConfig(Checked):
    """Fitting of the learned controller (see module docstring)."""

    __pydantic_config__ = STRICT

    data: Text = field(default="results/collect", metadata={"help": "collect output dir (or comma list of dirs)"})
    out: Text = field(default="results/controller", metadata={"help": "controller directory to write"})
    profile: Text | None = field(default=None, metadata={"help": "hardware profile JSON from lrtune profile"})
    encoder: Text = field(
        default="all-MiniLM-L6-v2",
        metadata={"help": "sentence encoder of the problem text ('none': length and task only)"},
    )
    gamma1_max: Annotated[int, Interval(ge=1, le=16)] = field(
        default=Bounds.gamma1_max, metadata={"help": "largest γ1 the controller may choose"}
    )
    gamma2_max: Annotated[int, Interval(ge=0, le=16)] = field(
        default=4,
        metadata={
            "help": "largest γ2 the controller may choose (on vLLM the SD engine drafts this many tokens every pass "
            "and cuts per request, so rows with a smaller γ2 pay for them)"
        },
    )
    budget: Annotated[float, Interval(ge=0, le=256)] = field(
        default=Bounds.M, metadata={"help": "parallel budget M: γ1·γ2 <= M"}
    )
    prior_strength: Annotated[float, Interval(gt=0, le=1e6)] = field(
        default=8.0, metadata={"help": "pseudo-observations behind the predicted α (online refinement weight)"}
    )
    folds: Annotated[int, Interval(ge=2, le=1000)] = field(
        default=5, metadata={"help": "cross-validation folds (by problem)"}
    )
    seed: Seed = field(default=0, metadata={"help": "fold assignment seed"})

    def validate(self) -> "TrainControllerConfig":
        schema.check(self)
        return self


def step_lengths(dirs: list[str], limit: int = 2000, seed: int = 0) -> list[int]:
    """Token lengths of the target steps of collect dirs (``target_len`` of every pair; a
    seeded sample of at most ``limit``): the sample that prices a batch by its longest step."""
    import random

    from lrtune.dataset import load_tables

    lengths = []
    for d in dirs:
        pairs, _ = load_tables(Path(d).expanduser())
        if "target_len" in pairs.column_names:
            lengths += [int(n) for n in pairs.column("target_len").to_pylist() if n]
    return sorted(random.Random(seed).sample(lengths, limit) if len(lengths) > limit else lengths)


def _longest_ratio(steps: list[int], n: int) -> float:
    from lrtune.speedup import expected_longest

    return expected_longest(steps, n) / expected_longest(steps, 1)


def load_problem_rows(dirs: list[str]) -> tuple[list[ProblemInfo], np.ndarray, list[float]]:
    """(problems with their texts, Y = [[α1, α2]], measured c1 values) from collect dirs."""
    from lrtune.dataset import CONFIG, load_tables, read_config
    from lrtune.tasks import get_task

    problems, ys, c1s = [], [], []
    for d in dirs:
        src = Path(d).expanduser()
        if not src.is_dir():
            raise ConfigError(f"training data not found: {d} (a directory written by lrtune collect)")
        cfg_file = src / CONFIG
        if not cfg_file.is_file():
            raise ConfigError(f"{d} has no {CONFIG}: not a collect output")
        opts = read_config(cfg_file).get("options", {})
        _, probs = load_tables(src)
        rows = probs.to_pylist()
        task = get_task(opts.get("task", "gsm_symbolic"))
        limit = max(r["index"] for r in rows) + 1
        texts = {
            p.id: task.prompt(p) for p in task.load(limit=limit, seed=opts.get("task_seed", 0), path=opts.get("data"))
        }
        for r in rows:
            if r.get("alpha1") is None or r["problem_id"] not in texts:
                continue
            a2 = r.get("alpha2")
            problems.append(ProblemInfo(id=r["problem_id"], text=texts[r["problem_id"]], task=r["task"]))
            ys.append([float(r["alpha1"]), float("nan") if a2 is None else float(a2)])
            if r.get("c1"):
                c1s.append(float(r["c1"]))
    if len(problems) < 3:
        raise ConfigError(f"need at least 3 collected problems with measured α1, got {len(problems)}")
    Y = np.asarray(ys)
    if np.isnan(Y[:, 1]).all():
        raise ConfigError("the data has no α2 (collect with --method lr+sd)")
    Y[np.isnan(Y[:, 1]), 1] = np.nanmean(Y[:, 1])
    return problems, Y, c1s


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def read_profile(path: str) -> dict:
    """The ``lrtune profile`` JSON at ``path``, checked: an object with c1, c2 numbers > 0 and
    ``batch_cost`` absent or a list of numbers > 0 (b(1), b(2), ...)."""
    from lrtune.inputs import read_json

    prof = read_json(path, "--profile")
    if not isinstance(prof, dict):
        raise ConfigError(f"--profile {path} is not an lrtune profile (a JSON object)")
    for k in ("c1", "c2"):
        if not _positive(prof.get(k)):
            raise ConfigError(f"{path}: {k} must be a number > 0")
    b = prof.get("batch_cost")
    if b is not None and not (isinstance(b, list) and b and all(_positive(v) for v in b)):
        raise ConfigError(f"{path}: batch_cost must be a list of numbers > 0 (b(1), b(2), ...), got {b!r:.60}")
    from lrtune.batchcost import check_profile_blocks

    try:
        check_profile_blocks(prof)
    except ValueError as e:
        raise ConfigError(f"--profile {path}: {e}") from None
    return prof


def _profile(cfg: TrainControllerConfig, c1s: list[float], prof: dict | None) -> dict:
    """c1, c2, b(n) and their source: from the profile ``prof`` (:func:`read_profile`) or the data."""
    if prof is not None:
        p = Path(cfg.profile).expanduser()
        c2, note = profile_c2(prof)
        if note:
            log(f"{cfg.profile}: {note}")
        return {"c1": prof["c1"], "c2": c2, "batch_cost": prof.get("batch_cost"), "source": str(p)}
    c = statistics.median(c1s) if c1s else DEFAULT_COST_RATIO
    return {
        "c1": c,
        "c2": c,
        "batch_cost": None,
        "source": "median c1 of the collected problems; b(n) = 1 (no profile given)",
    }


def _settings(key: dict | None) -> dict:
    """A controller's config key less its data hash: what must match to refit one in place."""
    return {k: v for k, v in (key or {}).items() if k != "data_sha256"}


def check_controller_out(out: Path, key: dict) -> None:
    """Refuse an ``--out`` that another command owns (:func:`lrtune.outdir.check_out`), that
    holds another artifact (a verifier checkpoint or training run, a collect dataset) or a
    controller fitted with other settings; a controller fitted with these settings on other
    data is refitted in place (:func:`_keep_backup`). Reads only."""
    from lrtune.dataset import CONFIG

    outdir.check_out(out, "train controller")
    from lrtune.verifiers.distilled import META as VERIFIER_META

    for name, what in ((VERIFIER_META, "a verifier checkpoint"), (CONFIG, "a collect dataset")):
        if (out / name).exists():
            raise ConfigError(f"{out} holds {what} ({name}); use another --out")
    prev = read_json(out / TRAIN_CONFIG)
    if (out / TRAIN_CONFIG).exists() and (prev is None or "options" in prev):
        raise ConfigError(f"{out} holds another training run ({TRAIN_CONFIG} is not a controller's); use another --out")
    if (out / learned.META).exists() and _settings(prev) != _settings(key):
        old, new = _settings(prev), _settings(key)
        changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k)) if prev else ["unknown"]
        raise ConfigError(
            f"{out} holds a controller fitted with other settings ({', '.join(changed)}); "
            "use another --out or delete it"
        )


def _keep_backup(out: Path) -> None:
    """Copy a controller that this run refits (same settings, new data) to a new sibling
    ``<out>.backup-<time>`` before it is overwritten."""
    if not (out / learned.META).is_file():
        return
    src = out.resolve()
    backup = backup_path(src.with_name(f"{src.name}.backup"))
    shutil.copytree(src, backup)
    log(f"the previous controller is kept in {backup}")


def training_pricing(prof: dict, bounds: Bounds) -> Pricing:
    """The plan a controller is trained and judged with: the profile's c1, c2 and b(n) (priced by
    the longest of n steps), on the engine it will run on, which drafts ``gamma2_max`` tokens per
    pass (the shared engine drafts the controller's largest γ2 and cuts per request; 0 without SD)."""
    return Pricing(
        c1=prof["c1"], c2=prof["c2"], batch_cost=learned.priced_batch_cost(prof), engine_drafts=bounds.gamma2_max
    )


def _folds(n: int, k: int, seed: int) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    return [order[i::k] for i in range(k)]


def cross_validate(
    X: np.ndarray, Y: np.ndarray, ridge: float, cfg: TrainControllerConfig, bounds: Bounds, prof: dict
) -> dict:
    """Held-out α errors and speedup-model decision quality (see module docstring)."""
    arms = bounds.arms()
    pricing = training_pricing(prof, bounds)

    def hv(arm, a1, a2):
        return pricing.speedup("lr", arm[0], arm[1], min(a1, 0.999), min(a2, 0.999))

    err, err_mean, h_learned, h_fixed, h_oracle = [], [], [], [], []
    for test in _folds(len(X), min(cfg.folds, len(X)), cfg.seed):
        train = np.setdiff1d(np.arange(len(X)), test)
        m = learned.AlphaPredictor(alpha=ridge).fit(X[train], Y[train])
        pred = np.clip(m.predict(X[test]), *learned.ALPHA_CLIP)
        err.append(np.abs(pred - Y[test]))
        err_mean.append(np.abs(Y[train].mean(axis=0) - Y[test]))
        fixed = max(arms, key=lambda a: float(np.mean([hv(a, *Y[i]) for i in train])))
        for i, p in zip(test, pred):
            chosen = pricing.best_gammas(p[0], p[1], bounds)
            arm = bounds.clip(chosen.gamma1, chosen.gamma2)
            h_learned.append(hv(arm, *Y[i]))
            h_fixed.append(hv(fixed, *Y[i]))
            h_oracle.append(max(hv(a, *Y[i]) for a in arms))
    e, em = np.vstack(err), np.vstack(err_mean)
    return {
        "mae_alpha1": float(e[:, 0].mean()),
        "mae_alpha2": float(e[:, 1].mean()),
        "mae_alpha1_mean_baseline": float(em[:, 0].mean()),
        "mae_alpha2_mean_baseline": float(em[:, 1].mean()),
        "model_speedup_learned": float(np.mean(h_learned)),
        "model_speedup_best_fixed": float(np.mean(h_fixed)),
        "model_speedup_oracle": float(np.mean(h_oracle)),
    }


def run(cfg: TrainControllerConfig) -> dict:
    """Fit, cross-validate and export; a controller already in ``--out`` with this config is
    returned as is (its metrics)."""
    from lrtune.runfiles import write_atomic

    cfg.validate()
    outdir.check_out(cfg.out, "train controller")  # a foreign --out fails before the data loads
    given = read_profile(cfg.profile) if cfg.profile else None  # checked before any work
    dirs = [d for d in cfg.data.split(",") if d]
    problems, Y, c1s = load_problem_rows(dirs)
    key = _train_key(cfg, problems, Y)
    done = _up_to_date(cfg, key)
    if done is not None:
        log(f"{cfg.out} is up to date (same data and settings): nothing to fit")
        return done["metrics"]
    check_controller_out(Path(cfg.out).expanduser(), key)
    prof = _profile(cfg, c1s, given)
    prof["step_tokens"] = step_lengths(dirs, seed=cfg.seed)
    gate.passed("train controller")  # the encoder loads below; --out is claimed once the fit is done
    bounds = Bounds(gamma1_min=0, gamma1_max=cfg.gamma1_max, gamma2_min=0, gamma2_max=cfg.gamma2_max, M=cfg.budget)
    feats = learned.ProblemFeaturizer(
        sorted({p.task for p in problems}), None if cfg.encoder.lower() == "none" else cfg.encoder
    )
    X = feats.transform(problems)
    log(
        f"{len(problems)} problems; mean α1 {Y[:, 0].mean():.3f}, α2 {Y[:, 1].mean():.3f}; "
        f"c1 {prof['c1']:.3f}, c2 {prof['c2']:.3f}"
    )
    model, metrics = _fit(X, Y, cfg, bounds, prof)
    out = outdir.claim_out(cfg.out, "train controller")  # phase 2: the fit is done, only writes follow
    _keep_backup(out)
    data = {
        "dirs": dirs,
        "problems": len(problems),
        "mean_alpha1": float(Y[:, 0].mean()),
        "mean_alpha2": float(Y[:, 1].mean()),
    }
    learned.save(
        out, model, feats, bounds=bounds, profile=prof, prior_strength=cfg.prior_strength, metrics=metrics, data=data
    )
    _write_card(out, metrics, prof, bounds, len(problems))
    write_atomic(out / TRAIN_CONFIG, json.dumps(key, indent=1))
    return metrics


def _train_key(cfg: TrainControllerConfig, problems, Y: np.ndarray) -> dict:
    """What a fit depends on: every setting but ``--out`` and a digest of the problems' rows."""
    import dataclasses

    digest = hashlib.sha256(json.dumps([[p.id for p in problems], Y.round(9).tolist()]).encode()).hexdigest()
    return {**{k: v for k, v in dataclasses.asdict(cfg).items() if k != "out"}, "data_sha256": digest}


def _up_to_date(cfg: TrainControllerConfig, key: dict) -> dict | None:
    """The metadata of a controller in ``--out`` fitted with ``key`` (with its metrics); None when there is none."""
    prev = read_json(Path(cfg.out).expanduser() / TRAIN_CONFIG)
    meta = read_json(Path(cfg.out).expanduser() / learned.META)
    return meta if prev == key and meta and "metrics" in meta else None


def _fit(X: np.ndarray, Y: np.ndarray, cfg: TrainControllerConfig, bounds: Bounds, prof: dict) -> tuple:
    """(the α predictor at the ridge strength with the least cross-validated error, the metrics:
    cross-validation by strength and the best fixed (γ1, γ2) arm on these problems)."""
    scores = {r: cross_validate(X, Y, r, cfg, bounds, prof) for r in (0.1, 1.0, 10.0, 100.0, 1000.0)}
    ridge = min(scores, key=lambda r: scores[r]["mae_alpha1"] + scores[r]["mae_alpha2"])
    model = learned.AlphaPredictor(alpha=ridge).fit(X, Y)
    pricing = training_pricing(prof, bounds)
    best_fixed = max(
        bounds.arms(),
        key=lambda a: float(
            np.mean([pricing.speedup("lr", a[0], a[1], min(y[0], 0.999), min(y[1], 0.999)) for y in Y])
        ),
    )
    metrics = {
        "cv": scores[ridge],
        "ridge_alpha": ridge,
        "cv_by_ridge": {str(k): v for k, v in scores.items()},
        "folds": cfg.folds,
    }
    metrics["best_fixed"] = list(best_fixed)
    return model, metrics


def _write_card(out: Path, metrics: dict, prof: dict, bounds: Bounds, n: int) -> None:
    from lrtune.runfiles import write_atomic

    cv = metrics["cv"]
    lines = [
        "# lrtune learned controller",
        "",
        f"Fitted by `lrtune train controller` on {n} problems. Load: `lrtune.policies.learned.load(path)` or "
        "`--controller PATH`.",
        "",
        f"- bounds: γ1 ≤ {bounds.gamma1_max}, γ2 ≤ {bounds.gamma2_max}, γ1·γ2 ≤ M = {bounds.M:g}",
        f"- profile: c1 = {prof['c1']:.3f}, c2 = {prof['c2']:.3f}, b(n) = {prof.get('batch_cost') or '1'} "
        f"({prof['source']})",
        f"- a batch of n steps is priced by its longest step: {len(prof.get('step_tokens') or [])} collected target "
        "steps"
        + (f", E[max of 4]/E[step] = {_longest_ratio(prof['step_tokens'], 4):.2f}" if prof.get("step_tokens") else ""),
        f"- ridge penalty {metrics['ridge_alpha']:g} (cross-validated, {metrics['folds']} folds by problem)",
        "",
        "| held-out | learned | training mean |",
        "|---|---|---|",
        f"| MAE α1 | {cv['mae_alpha1']:.3f} | {cv['mae_alpha1_mean_baseline']:.3f} |",
        f"| MAE α2 | {cv['mae_alpha2']:.3f} | {cv['mae_alpha2_mean_baseline']:.3f} |",
        "",
        "Speedup model h at the chosen depths, mean over held-out problems (true α):",
        "",
        f"- learned: {cv['model_speedup_learned']:.3f}; best fixed (training folds): "
        f"{cv['model_speedup_best_fixed']:.3f}; oracle: {cv['model_speedup_oracle']:.3f}",
    ]
    write_atomic(out / "README.md", "\n".join(lines) + "\n")


COMMAND = Command(("train", "controller"), __doc__.splitlines()[0], (Section(TrainControllerConfig),))
add_arguments, make_parser, config_from_args = COMMAND.add_arguments, COMMAND.make_parser, COMMAND.config


def main(cfg: TrainControllerConfig) -> int:
    m = run(cfg)
    cv = m["cv"]
    print(
        f"held-out MAE α1 {cv['mae_alpha1']:.3f} (mean baseline {cv['mae_alpha1_mean_baseline']:.3f}), "
        f"α2 {cv['mae_alpha2']:.3f} ({cv['mae_alpha2_mean_baseline']:.3f})"
    )
    print(
        f"speedup model at the chosen depths: learned {cv['model_speedup_learned']:.3f}, best fixed "
        f"{cv['model_speedup_best_fixed']:.3f}, oracle {cv['model_speedup_oracle']:.3f}"
    )
    log(f"controller: {cfg.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    COMMAND.main(lambda args: main(config_from_args(args)))
