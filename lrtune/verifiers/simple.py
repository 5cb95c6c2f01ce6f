"""Verifiers that need no model: exact (normalised text match), never, always, random(p)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from lrtune.verifiers.base import StepPair, normalize_step

__all__ = ["ConstantVerifier", "ExactVerifier", "RandomVerifier", "normalize_step"]


class ExactVerifier:
    """score = 1 if the normalised draft and target texts are equal, else 0."""

    name = "exact"

    def __init__(self, threshold: float = 0.5) -> None:
        self.threshold = threshold

    def score(self, pairs: Sequence[StepPair]) -> list[float]:
        return [float(normalize_step(p.draft) == normalize_step(p.target)) for p in pairs]


class ConstantVerifier:
    """``never`` (score 0: every draft rejected) or ``always`` (score 1: every draft accepted)."""

    threshold = 0.5

    def __init__(self, value: bool) -> None:
        self.value = float(value)
        self.name = "always" if value else "never"

    def score(self, pairs: Sequence[StepPair]) -> list[float]:
        return [self.value] * len(pairs)


class RandomVerifier:
    """Accept each draft step independently with probability ``p`` (seeded).

    score ~ U(0, 1) and threshold = 1 - p, so P(score >= threshold) = p.
    """

    def __init__(self, p: float = 0.5, seed: int = 0) -> None:
        if not 0.0 <= p <= 1.0:
            from lrtune.errors import ConfigError

            raise ConfigError(f"random verifier needs 0 <= p <= 1, got {p}")
        self.p = p
        self.name = f"random({p:g})"
        self.threshold = 1.0 - p
        self._rng = random.Random(seed)

    def score(self, pairs: Sequence[StepPair]) -> list[float]:
        return [self._rng.random() for _ in pairs]
