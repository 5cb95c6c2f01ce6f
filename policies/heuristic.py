"""``heuristic``: grow a depth after full acceptance, shrink it after a rejection.

Per round, for each depth independently (then clipped to the bounds and budget M):
    γ1 ← γ1 + 1 if every drafted step was accepted, γ1 − 1 if the first one was rejected;
    γ2 ← γ2 + 1 if every SD pass accepted all its draft tokens, γ2 − 1 if the round's
         token acceptance accepted/drafted < ``shrink_below``.
γ1 never drops below 1 here (a rejected first step still yields the target's step), so the
policy keeps probing; depths restart from the initial values on each new problem.
"""

from __future__ import annotations

from lrtune.control import Bounds, ControlState, ProblemInfo, RoundOutcome


class HeuristicController:
    name = "heuristic"

    def __init__(
        self, gamma1: int = 2, gamma2: int = 4, bounds: Bounds | None = None, shrink_below: float = 0.5
    ) -> None:
        self.bounds = bounds or Bounds()
        self.init = self.bounds.clip(gamma1, gamma2)
        self.shrink_below = shrink_below
        self._problem: str | None = None
        self.gamma1, self.gamma2 = self.init

    def choose(self, problem: ProblemInfo, state: ControlState) -> tuple[int, int]:
        if problem.id != self._problem or state.round == 0:
            self._problem = problem.id
            self.gamma1, self.gamma2 = self.init
        return self.gamma1, self.gamma2

    def horizon(self) -> int | None:
        """γ1 never drops to 0 here (only bounds with γ1_max = 0 force it): to the end."""
        return None

    def update(self, o: RoundOutcome) -> None:
        g1, g2 = o.gamma1, o.gamma2
        if o.verdicts:
            if all(o.verdicts):
                g1 += 1
            elif not o.verdicts[0]:
                g1 -= 1
        g1 = max(g1, 1)
        if o.gamma2 > 0 and o.sd_iterations:
            if not o.sd.stopped:  # every pass accepted all it drafted
                g2 += 1
            elif o.sd_drafted and o.sd_accepted / o.sd_drafted < self.shrink_below:
                g2 -= 1
        lo = max(1, self.bounds.gamma1_min)
        self.gamma1, self.gamma2 = self.bounds.clip(max(g1, lo), g2)
