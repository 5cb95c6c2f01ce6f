"""``fixed``: the same (γ1, γ2) every round (the baseline every policy must beat)."""

from __future__ import annotations

from lrtune.control import Bounds, ControlState, ProblemInfo, RoundOutcome
from lrtune.errors import ConfigError


class FixedController:
    """Always ``(gamma1, gamma2)``."""

    name = "fixed"

    def __init__(self, gamma1: int = 3, gamma2: int = 4, bounds: Bounds | None = None) -> None:
        self.bounds = bounds or Bounds(gamma1_max=max(gamma1, 1), gamma2_max=max(gamma2, 0), M=float(gamma1 * gamma2))
        if not self.bounds.allows(gamma1, gamma2):
            raise ConfigError(f"fixed (γ1, γ2) = ({gamma1}, {gamma2}) is outside {self.bounds}")
        self.gamma1, self.gamma2 = gamma1, gamma2

    def choose(self, problem: ProblemInfo, state: ControlState) -> tuple[int, int]:
        return self.gamma1, self.gamma2

    def horizon(self) -> int | None:
        """Nothing to learn: a γ1 = 0 choice runs to the end of the answer."""
        return None

    def update(self, outcome: RoundOutcome) -> None:
        return None
