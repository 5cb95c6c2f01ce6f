"""``grid-ucb``: UCB1 over the (γ1, γ2) grid, model-free (the baseline a model-based policy must match).

Every allowed arm a = (γ1, γ2) keeps the mean reward r̄_a of the rounds it ran, the reward of
a round being its throughput: committed tokens / (draft + target + verify seconds). Before a
round the arm with the largest index

    r̄_a + r_max · sqrt(2 ln t / n_a)      (arms never tried first, in grid order)

is chosen (t = rounds so far, n_a = rounds of arm a, r_max = the largest reward seen, so the
bonus has the rewards' scale). Statistics carry over from problem to problem: it learns the
best fixed arm of the run, not of one problem. A γ1 = 0 round runs ``horizon_tokens``.

A round's reward goes to the arm chosen for it, even when the decoder ran a smaller γ2 (a
method without token-level SD runs γ2 = 0 and reports it): the reward is what choosing
that arm gave, and an arm counted as pulled is never "untried" again. An outcome without
a matching choice counts for the arm it reports (if that is an arm of the grid).
"""

from __future__ import annotations

import math

from lrtune.control import Bounds, ControlState, ProblemInfo, RoundOutcome
from lrtune.errors import ConfigError


class GridUCBController:
    name = "grid-ucb"

    def __init__(self, bounds: Bounds | None = None, horizon_tokens: int = 64) -> None:
        self.bounds = bounds or Bounds()
        self.arms = self.bounds.arms()
        if not self.arms:
            raise ConfigError(f"no (γ1, γ2) satisfies {self.bounds}")
        if horizon_tokens < 1:
            raise ConfigError(f"horizon_tokens must be >= 1, got {horizon_tokens}")
        self.horizon_tokens = horizon_tokens
        self.pulls = {a: 0 for a in self.arms}
        self.total = {a: 0.0 for a in self.arms}
        self.best_reward = 0.0
        self._chosen: tuple[int, int] | None = None  # the arm of the round in flight

    def choose(self, problem: ProblemInfo, state: ControlState) -> tuple[int, int]:
        self._chosen = self._select()
        return self._chosen

    def _select(self) -> tuple[int, int]:
        for a in self.arms:
            if self.pulls[a] == 0:
                return a
        t = sum(self.pulls.values())
        return max(
            self.arms,
            key=lambda a: (
                self.total[a] / self.pulls[a] + self.best_reward * math.sqrt(2.0 * math.log(t) / self.pulls[a])
            ),
        )

    def horizon(self) -> int | None:
        return self.horizon_tokens

    def update(self, o: RoundOutcome) -> None:
        chosen, self._chosen = self._chosen, None
        arm = (o.gamma1, o.gamma2)
        if chosen is not None and chosen[0] == o.gamma1 and o.gamma2 in (chosen[1], 0):
            arm = chosen  # the decoder ran the chosen arm, γ2 dropped where it has no SD
        if arm not in self.pulls:  # neither chosen nor an arm of this grid
            return
        seconds = o.draft_s + o.target_s + o.verify_s
        reward = o.committed_tokens / seconds if seconds > 0 else 0.0
        self.pulls[arm] += 1
        self.total[arm] += reward
        self.best_reward = max(self.best_reward, reward)

    def mean_rewards(self) -> dict[tuple[int, int], float | None]:
        """Mean throughput (tokens/s) of every arm so far (None: never run)."""
        return {a: (self.total[a] / n if n else None) for a, n in self.pulls.items()}
