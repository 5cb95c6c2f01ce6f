"""The verifier protocol: score (draft step, target step) pairs in [0, 1].

A draft step is *accepted* when ``score >= threshold``. Verifiers never see token ids:
they judge the derived text of the two steps and, optionally, the context before them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class StepPair:
    """One comparison: the draft's step and the target's step after the same prefix."""

    context: str
    draft: str
    target: str


@runtime_checkable
class Verifier(Protocol):
    """``score(pairs) -> list[float]`` in [0, 1]; accept when score >= ``threshold``."""

    name: str
    threshold: float

    def score(self, pairs: Sequence[StepPair]) -> list[float]: ...


def accept(verifier: Verifier, pairs: Sequence[StepPair]) -> tuple[list[bool], list[float]]:
    """Score ``pairs`` in one batch and return ``(verdicts, scores)``."""
    if not pairs:
        return [], []
    scores = [float(s) for s in verifier.score(pairs)]
    if len(scores) != len(pairs):
        raise RuntimeError(f"verifier {verifier.name!r} returned {len(scores)} scores for {len(pairs)} pairs")
    return [s >= verifier.threshold for s in scores], scores
