"""``bandit``: per-problem Beta posteriors on α1 and α2, (γ1, γ2) maximising the speedup model.

State per problem: α1 ~ Beta(a1, b1), α2 ~ Beta(a2, b2), starting from the prior (a
learned controller sets it from a prediction). After a round, every verdict updates α1
(success = accepted) and the SD passes update α2 (accepted tokens are successes; each pass
that stopped early is one failure — the i.i.d. model's likelihood). Before a round:

* ``thompson``: draw α̃1, α̃2 from the posteriors and pick argmax h(γ1, γ2; α̃1, c1, α̃2, c2, b)
  over the allowed arms;
* ``ucb``: use the posterior quantile 1 − 1/(t+1) of each α instead of a draw (optimism).

h is :func:`lrtune.speedup.h` with the measured c1, c2 and batch-cost curve b(n).

Round kinds: ``round_kinds`` names the rounds a γ1 > 0 arm may run, ``lr`` (the target
generates its own steps, priced by h) and ``score`` (one prefill of the chain judges the
draft steps, :func:`lrtune.speedup.h_score` with the prefill priced as
P(γ1) = (o + π·γ1·L) / L target steps: call overhead o and π per token from ``lrtune
profile``, L tokens per step); each arm is run as the kind that prices it higher, and
:meth:`round_kind` tells the decoder which. α1 is shared: the same verifier judges both.

``bandit-pooled`` (``pooled=True``): a new problem starts from the posterior the problems
before it left, shrunk to at most ``pool_strength`` (16) pseudo-observations per α, instead of
the flat prior. An answer of a few hundred tokens holds only a handful of rounds, too few for a
flat prior to learn what this verifier accepts; pooled, the controller learns it over the run.

γ1 = 0 rounds teach nothing about α1. When even an optimistic α1 (the posterior's 95%
quantile) would not make any γ1 > 0 arm beat the best γ1 = 0 arm under h, there is nothing to
learn and the round runs to the end of the answer; otherwise the k-th consecutive γ1 = 0
round lasts ``horizon_tokens · 2^k`` tokens, so k changes of mind cost O(log) engine calls.
"""

from __future__ import annotations

import math
import random

from lrtune.control import DEFAULT_COST_RATIO, Bounds, ControlState, ProblemInfo, RoundOutcome
from lrtune.errors import ConfigError
from lrtune.speedup import h, h_score, score_prefill

ROUND_KINDS = ("lr", "score")
# a score round's prefill where no profile measured it (lrtune profile, default pair with the int8
# draft, AVX-512 CPU: benchmarks/score_rounds/profile_int8.json)
DEFAULT_PREFILL = {"overhead_tokens": 1.7, "per_token": 0.11, "step_tokens": 40.0}


class BanditController:
    name = "bandit"

    def __init__(self, bounds: Bounds | None = None, c1: float = DEFAULT_COST_RATIO, c2: float = DEFAULT_COST_RATIO,
                 batch_cost=None,
                 prior: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0), mode: str = "thompson",
                 seed: int = 0, horizon_tokens: int = 64, round_kinds: tuple[str, ...] = ("lr",),
                 prefill: dict | None = None, pooled: bool = False, pool_strength: float = 16.0) -> None:
        if mode not in ("thompson", "ucb"):
            raise ConfigError(f"bandit mode must be thompson or ucb, got {mode!r}")
        self.bounds = bounds or Bounds()
        self.c1, self.c2, self.batch_cost = c1, c2, batch_cost
        self.prior = prior
        self.mode = mode
        self.seed = seed
        if horizon_tokens < 1:
            raise ConfigError(f"horizon_tokens must be >= 1, got {horizon_tokens}")
        self.horizon_tokens = horizon_tokens
        self.pooled, self.pool_strength = pooled, float(pool_strength)
        self.round_kinds = round_kinds
        self.prefill = dict(prefill or DEFAULT_PREFILL)
        self._kind = round_kinds[0]  # the kind of the arm chosen last
        self.sd_rounds = 0  # consecutive γ1 = 0 rounds just before this one
        # draft tokens the SD engine proposes per pass whatever γ2 a round asks for (a shared
        # engine cut per request: a smaller γ2 verifies fewer but pays for all); 0: γ2 itself
        self.engine_drafts = 0
        self._rng = random.Random(seed)
        self._problem: str | None = None
        self.post = list(prior)
        self.rounds = 0
        if not self._arms:
            raise ConfigError(f"no (γ1, γ2) satisfies {self.bounds}")

    @property
    def _arms(self) -> list[tuple[int, int]]:
        """The allowed (γ1, γ2), from the current bounds (narrowed e.g. to γ2 = 0 without SD)."""
        return self.bounds.arms()

    def reset(self, prior: tuple[float, float, float, float] | None = None) -> None:
        self.post = list(prior or self.prior)
        self.rounds = 0
        self.sd_rounds = 0

    @property
    def round_kinds(self) -> tuple[str, ...]:
        return self._round_kinds

    @round_kinds.setter
    def round_kinds(self, kinds) -> None:
        kinds = tuple(kinds)
        if not kinds or set(kinds) - set(ROUND_KINDS):
            raise ConfigError(f"round kinds must be some of {', '.join(ROUND_KINDS)}, got {kinds!r}")
        self._round_kinds = kinds

    def prefill_cost(self, g1: int) -> float:
        """P(γ1) = (o + π·γ1·L) / L: a score round's prefill of γ1 draft steps, in target steps."""
        p = self.prefill
        return score_prefill(g1, p["overhead_tokens"], p["per_token"], p["step_tokens"])

    def _priced(self, g1: int, g2: int, a1: float, a2: float) -> tuple[float, str]:
        """(modelled speedup, round kind) of (γ1, γ2) at (α1, α2) on this controller's engine:
        the best of the allowed kinds (γ1 = 0 is SD alone, the same for every kind)."""
        drafted = self.engine_drafts or None
        best = (-math.inf, self.round_kinds[0])
        for kind in self.round_kinds:
            v = (h_score(g1, g2, a1, self.c1, self.prefill_cost(g1), a2, self.c2, drafted) if kind == "score"
                 else h(g1, g2, a1, self.c1, a2, self.c2, self.batch_cost, drafted))
            if v > best[0] * (1 + 1e-12):
                best = (v, kind)
        return best

    def _h(self, g1: int, g2: int, a1: float, a2: float) -> float:
        """The modelled speedup of (γ1, γ2) at (α1, α2) on this controller's engine (best kind)."""
        return self._priced(g1, g2, a1, a2)[0]

    def _value(self, a1: float, a2: float) -> tuple[int, int]:
        best, arg, kind = -math.inf, self._arms[0], self.round_kinds[0]
        for g1, g2 in self._arms:
            v, k = self._priced(g1, g2, a1, a2)
            if v > best * (1 + 1e-12):
                best, arg, kind = v, (g1, g2), k
        self._kind = kind
        return arg

    def round_kind(self) -> str:
        """The kind of round the last chosen arm runs as (``lr`` or ``score``)."""
        return self._kind

    def estimate(self) -> tuple[float, float]:
        """Posterior means of (α1, α2)."""
        a1, b1, a2, b2 = self.post
        return a1 / (a1 + b1), a2 / (a2 + b2)

    def choose(self, problem: ProblemInfo, state: ControlState) -> tuple[int, int]:
        if problem.id != self._problem or state.round == 0:
            self._problem = problem.id
            self._rng = random.Random(f"{self.seed}:{problem.id}")
            self.reset(self.problem_prior(problem))
        a1, b1, a2, b2 = self.post
        if self.mode == "thompson":
            x1, x2 = self._rng.betavariate(a1, b1), self._rng.betavariate(a2, b2)
        else:
            q = 1.0 - 1.0 / (self.rounds + 2)
            x1, x2 = _beta_quantile(a1, b1, q), _beta_quantile(a2, b2, q)
        return self._value(min(x1, 0.999), min(x2, 0.999))

    def horizon(self) -> int | None:
        """Tokens of a γ1 = 0 round (module docstring): None when LR cannot win even at the
        optimistic α1, else ``horizon_tokens · 2^k`` after k consecutive γ1 = 0 rounds."""
        a1, b1, a2, b2 = self.post
        hi1, m2 = min(_beta_quantile(a1, b1, 0.95), 0.999), min(a2 / (a2 + b2), 0.999)
        lr = [self._h(g1, g2, hi1, m2) for g1, g2 in self._arms if g1 > 0]
        sd = [self._h(0, g2, hi1, m2) for g1, g2 in self._arms if g1 == 0]
        if sd and (not lr or max(sd) >= max(lr)):
            return None
        return self.horizon_tokens * 2 ** min(self.sd_rounds, 20)

    def problem_prior(self, problem: ProblemInfo) -> tuple[float, float, float, float]:
        """The prior of a new problem (a learned controller overrides this): ``prior``, or with
        ``pooled`` the posterior the problems before it left, each Beta shrunk to at most
        ``pool_strength`` pseudo-observations (a + b) so that the new problem's own rounds
        still move it."""
        if not self.pooled:
            return self.prior
        out = []
        for a, b in (self.post[:2], self.post[2:]):
            k = min(1.0, self.pool_strength / (a + b))
            out += [a * k, b * k]
        return tuple(out)

    def update(self, o: RoundOutcome) -> None:
        acc, rej = o.step_successes
        self.post[0] += acc
        self.post[1] += rej
        if o.gamma2 > 0:
            tacc, trej = o.token_successes
            self.post[2] += tacc
            self.post[3] += trej
        self.rounds += 1
        self.sd_rounds = self.sd_rounds + 1 if o.gamma1 == 0 else 0


def _beta_quantile(a: float, b: float, q: float) -> float:
    """The q-quantile of Beta(a, b) by bisection on the regularised incomplete beta."""
    from scipy.special import betaincinv

    return float(betaincinv(a, b, q))
