"""The ridge regressor the ``learned`` controller fits (:mod:`lrtune.policies.learned`): problem
features to (α1, α2). A module of its own so that scikit-learn is imported only where a model is
fitted or loaded."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from lrtune.errors import ConfigError


class AlphaPredictor(RegressorMixin, BaseEstimator):
    """Ridge regression on standardised features: ŷ = ((x − μ)/s)·W + b.

    Hyperparameters: ``alpha`` (L2 penalty, ≥ 0). Learned: ``coef_`` (n_features × n_targets,
    or n_features for a 1-d y), ``intercept_``, ``x_mean_``, ``x_scale_``, ``n_features_in_``.
    """

    def __init__(self, alpha: float = 1.0) -> None:
        self.alpha = alpha

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # predicts (α1, α2) jointly
        return tags

    def fit(self, X, y):
        X, y = validate_data(self, X, y, multi_output=True, y_numeric=True)
        if not (isinstance(self.alpha, (int, float)) and self.alpha >= 0):
            raise ValueError(f"alpha must be a number >= 0, got {self.alpha!r}")
        X = X.astype(np.float64)
        y = np.asarray(y, dtype=np.float64)
        self.x_mean_ = X.mean(axis=0)
        scale = X.std(axis=0)
        self.x_scale_ = np.where(scale > 1e-12, scale, 1.0)
        Z = (X - self.x_mean_) / self.x_scale_
        y_mean = y.mean(axis=0)
        A = Z.T @ Z + self.alpha * np.eye(Z.shape[1])
        self.coef_ = np.linalg.lstsq(A, Z.T @ (y - y_mean), rcond=None)[0]
        self.intercept_ = y_mean
        return self

    def predict(self, X):
        check_is_fitted(self, "coef_")
        X = validate_data(self, X, reset=False).astype(np.float64)
        return ((X - self.x_mean_) / self.x_scale_) @ self.coef_ + self.intercept_

    def to_dict(self) -> dict:
        check_is_fitted(self, "coef_")
        return {
            "alpha": self.alpha,
            "coef": np.asarray(self.coef_).tolist(),
            "intercept": np.asarray(self.intercept_).tolist(),
            "x_mean": self.x_mean_.tolist(),
            "x_scale": self.x_scale_.tolist(),
            "n_features_in": int(self.n_features_in_),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "AlphaPredictor":
        m = cls(alpha=float(d["alpha"]))
        m.coef_ = np.asarray(d["coef"], dtype=np.float64)
        m.intercept_ = np.asarray(d["intercept"], dtype=np.float64)
        m.x_mean_ = np.asarray(d["x_mean"], dtype=np.float64)
        m.x_scale_ = np.asarray(d["x_scale"], dtype=np.float64)
        m.n_features_in_ = int(d["n_features_in"])
        if m.x_mean_.shape != (m.n_features_in_,) or m.coef_.shape[0] != m.n_features_in_:
            raise ConfigError("controller weights do not match their feature count")
        return m


__all__ = ["AlphaPredictor"]
