"""``learned``: predict a problem's α1, α2 before decoding it, then refine them online.

1. :class:`AlphaPredictor` (:mod:`lrtune.policies.alpha_predictor`, a scikit-learn
   regressor: standardised ridge regression, closed form) maps problem features to (α1, α2).
2. :class:`LearnedController` turns the prediction into the bandit's prior,
   α ~ Beta(n0·α̂, n0·(1 − α̂)) with ``prior_strength`` n0 pseudo-observations, so the first
   round already uses the (γ1, γ2) that maximises the speedup model for this problem,
   and later rounds follow the evidence (see :mod:`lrtune.policies.bandit`).

Problem features (:class:`ProblemFeaturizer`): the sentence-encoder embedding of the
problem text, log(1 + characters) and a one-hot of the task. The controller directory
holds ``lrtune_controller.json``: features, the fitted weights, the hardware profile
(c1, c2, batch-cost curve), bounds and budget M, cross-validated metrics. No pickle.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from typing import TYPE_CHECKING

import numpy as np

from lrtune.control import Bounds, ProblemInfo
from lrtune.errors import ConfigError

from lrtune.policies.bandit import BanditController
from lrtune.pricing import Pricing

META = "lrtune_controller.json"
FORMAT = "lrtune-controller"
VERSION = 1
ALPHA_CLIP = (0.02, 0.98)

if TYPE_CHECKING:
    from lrtune.policies.alpha_predictor import AlphaPredictor


def __getattr__(name: str):
    """``learned.AlphaPredictor`` on first use: scikit-learn (about 0.9 s) is imported when a
    model is fitted or loaded, not by every command that reads this module's constants."""
    if name == "AlphaPredictor":
        from lrtune.policies.alpha_predictor import AlphaPredictor

        return AlphaPredictor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ProblemFeaturizer:
    """Problem → feature vector: [embedding (d), log(1 + chars), one-hot(task)]."""

    def __init__(self, tasks: Sequence[str], encoder: str | None = "all-MiniLM-L6-v2") -> None:
        self.tasks = list(tasks)
        self.encoder = encoder
        self._enc = None

    def _embed(self, texts: list[str]) -> np.ndarray:
        if self.encoder is None:
            return np.zeros((len(texts), 0))
        if self._enc is None:
            from lrtune.verifiers.distilled import resolve_encoder
            from lrtune.verifiers.embedding import EmbeddingVerifier

            self._enc = EmbeddingVerifier(model=resolve_encoder(self.encoder))
        return self._enc.embed(texts).numpy()

    def transform(self, problems: Sequence[ProblemInfo]) -> np.ndarray:
        emb = self._embed([p.text for p in problems])
        rows = []
        for p, e in zip(problems, emb):
            onehot = [float(p.task == t) for t in self.tasks]
            rows.append([*e.tolist(), math.log1p(len(p.text)), *onehot])
        return np.asarray(rows, dtype=np.float64)

    def to_dict(self) -> dict:
        return {"tasks": self.tasks, "encoder": self.encoder}


class LearnedController(BanditController):
    """The bandit with a per-problem prior from :class:`AlphaPredictor` (module docstring)."""

    name = "learned"

    def __init__(
        self,
        predictor: AlphaPredictor,
        featurizer: ProblemFeaturizer,
        bounds: Bounds | None = None,
        pricing: Pricing | None = None,
        prior_strength: float = 8.0,
        mode: str = "thompson",
        seed: int = 0,
        best_fixed: tuple[int, int] | None = None,
        **options,
    ) -> None:
        super().__init__(bounds, pricing, mode=mode, seed=seed, **options)
        self.predictor, self.featurizer = predictor, featurizer
        self.prior_strength = prior_strength
        self.best_fixed = best_fixed  # the best fixed (γ1, γ2) on the training data
        self.last_prediction: tuple[float, float] | None = None
        self._given = {
            **self._given,
            "predictor": predictor,
            "featurizer": featurizer,
            "prior_strength": prior_strength,
            "best_fixed": best_fixed,
        }

    def derive(self, **changes):
        """As :meth:`BanditController.derive`; a new ``pricing`` keeps this controller's machine
        costs (c1, c2, b(n) of the profile it was trained with) and takes the rest."""
        if changes.get("pricing") is not None:
            changes["pricing"] = changes["pricing"].with_costs_of(self.pricing)
        return super().derive(**changes)

    def predict_alphas(self, problem: ProblemInfo) -> tuple[float, float]:
        y = np.asarray(self.predictor.predict(self.featurizer.transform([problem]))).reshape(-1)
        lo, hi = ALPHA_CLIP
        return float(np.clip(y[0], lo, hi)), float(np.clip(y[1], lo, hi))

    def problem_prior(self, problem: ProblemInfo) -> tuple[float, float, float, float]:
        a1, a2 = self.last_prediction = self.predict_alphas(problem)
        n0 = self.prior_strength
        return (n0 * a1, n0 * (1 - a1), n0 * a2, n0 * (1 - a2))


# ---- files -------------------------------------------------------------------------------
def save(
    path: str | Path,
    predictor: AlphaPredictor,
    featurizer: ProblemFeaturizer,
    *,
    bounds: Bounds,
    profile: dict,
    prior_strength: float,
    metrics: dict,
    data: dict,
) -> Path:
    """Write a controller directory (``lrtune_controller.json`` + README)."""
    from lrtune.runfiles import write_atomic

    out = Path(path).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "policy": "learned",
        "features": featurizer.to_dict(),
        "model": predictor.to_dict(),
        "profile": profile,
        "prior_strength": prior_strength,
        "bounds": {
            "gamma1_min": bounds.gamma1_min,
            "gamma1_max": bounds.gamma1_max,
            "gamma2_min": bounds.gamma2_min,
            "gamma2_max": bounds.gamma2_max,
            "M": bounds.M,
        },
        "metrics": metrics,
        "data": data,
    }
    write_atomic(out / META, json.dumps(meta, indent=1))
    return out


def read_meta(path: str | Path) -> dict:
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ConfigError(f"controller not found: {path}")
    from lrtune.verifiers.distilled import PICKLE_SUFFIXES

    if any(p.suffix.lower() in PICKLE_SUFFIXES for p in root.rglob("*")):
        raise ConfigError(f"refusing to load {path}: it holds pickle-capable files; controllers are JSON only")
    f = root / META
    if not f.is_file():
        raise ConfigError(f"{path} is not an lrtune controller (no {META})")
    from lrtune.filekinds import ControllerMeta, read

    return read(f, ControllerMeta, "controller metadata")


def priced_batch_cost(prof: dict):
    """A profile's b(n), priced by the longest of n steps where its ``step_tokens`` (the
    collected target step lengths) are known (:func:`lrtune.speedup.longest_step_batch_cost`)."""
    from lrtune.speedup import longest_step_batch_cost

    steps = prof.get("step_tokens")
    return longest_step_batch_cost(prof.get("batch_cost"), steps) if steps else prof.get("batch_cost")


def _check_model(m: AlphaPredictor, feats: ProblemFeaturizer) -> None:
    """ValueError unless the weights predict (α1, α2) from the featurizer's vectors."""
    n = m.n_features_in_
    if (
        m.coef_.shape != (n, 2)
        or m.intercept_.shape != (2,)
        or m.x_scale_.shape != (n,)
        or not all(np.isfinite(a).all() for a in (m.coef_, m.intercept_, m.x_mean_, m.x_scale_))
    ):
        raise ValueError("model weights of the wrong shape or not finite")
    if n < len(feats.tasks) + 1 + (feats.encoder is not None) or (feats.encoder is None and n != len(feats.tasks) + 1):
        raise ValueError(f"{n} model features do not match the features {feats.to_dict()}")


def load(
    path: str | Path, *, seed: int = 0, mode: str = "thompson", pricing: Pricing | None = None
) -> LearnedController:
    """A :class:`LearnedController` from a directory written by :func:`save`, priced by ``pricing``
    (the run's plan) with the machine costs it was trained with; ConfigError (one line) when its
    metadata is incomplete or mistyped."""
    from lrtune.policies.alpha_predictor import AlphaPredictor
    from lrtune.speedup import f_sync

    meta = read_meta(path)
    try:
        b = Bounds(**meta["bounds"])  # typed by the schema (lrtune.filekinds.ControllerMeta)
        prof, feat_meta = meta["profile"], meta["features"]
        feats = ProblemFeaturizer(feat_meta["tasks"], feat_meta["encoder"])
        predictor = AlphaPredictor.from_dict(meta["model"])
        _check_model(predictor, feats)
        costs = Pricing(c1=float(prof["c1"]), c2=float(prof["c2"]), batch_cost=priced_batch_cost(prof))
        f_sync(0.5, 0.5, 0, costs.batch_cost)  # prices the target alone: checks the curve holds b(1) = 1
        ctl = LearnedController(
            predictor,
            feats,
            b,
            (pricing or Pricing()).with_costs_of(costs),
            prior_strength=float(meta["prior_strength"]),
            mode=mode,
            seed=seed,
            best_fixed=tuple(bf) if (bf := (meta.get("metrics") or {}).get("best_fixed")) else None,
        )
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise ConfigError(f"{path}: incomplete controller metadata ({type(e).__name__}: {e})") from None
    return ctl


__all__ = ["AlphaPredictor", "LearnedController", "ProblemFeaturizer", "load", "priced_batch_cost", "save"]
