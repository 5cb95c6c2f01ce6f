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

Exploration the speedup model allows. The optimistic α1 is
α̂1 = min(q95(α1 posterior), max(α1_max, E[α1 | rounds seen])), where α1_max is the highest
acceptance the verifier's calibration admits (``pricing.alpha1_max``: a distilled checkpoint's
upper 95% bound on its test-split acceptance; 1 when unknown). When no γ1 > 0 arm beats the best
γ1 = 0 arm at α̂1, max_{γ1>0} h(γ1, γ2; α̂1, α2) <= max_{γ2} g(γ2), no γ1 > 0 arm is ever tried:
the controller picks the best γ1 = 0 arm from the first round and the round runs to the end of
the answer. Otherwise γ1 = 0 rounds teach nothing about α1, so the k-th consecutive one lasts
``horizon_tokens · 2^k`` tokens and k changes of mind cost O(log) engine calls.
"""

from __future__ import annotations

import math
import random

from lrtune.control import Bounds, ControlState, ProblemInfo, RoundOutcome
from lrtune.errors import ConfigError
from lrtune.pricing import ROUND_KINDS, Prefill, Pricing

_LEGACY_PRICES = ("c1", "c2", "batch_cost", "prefill")


class BanditController:
    """Hyperparameters are fixed here; the costs come in one :class:`~lrtune.pricing.Pricing`
    (``pricing``), and :meth:`derive` builds a new controller with other settings."""

    name = "bandit"

    def __init__(
        self,
        bounds: Bounds | None = None,
        pricing: Pricing | None = None,
        prior: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0),
        mode: str = "thompson",
        seed: int = 0,
        horizon_tokens: int = 64,
        round_kinds: tuple[str, ...] = ("lr",),
        pooled: bool = False,
        pool_strength: float = 16.0,
        **legacy,
    ) -> None:
        pricing = _legacy_pricing(pricing, legacy)
        if mode not in ("thompson", "ucb"):
            raise ConfigError(f"bandit mode must be thompson or ucb, got {mode!r}")
        if horizon_tokens < 1:
            raise ConfigError(f"horizon_tokens must be >= 1, got {horizon_tokens}")
        kinds = tuple(round_kinds)
        if not kinds or set(kinds) - set(ROUND_KINDS):
            raise ConfigError(f"round kinds must be some of {', '.join(ROUND_KINDS)}, got {kinds!r}")
        self.pricing = pricing
        # a γ2 above the shared SD engine's would start another engine mid-decode: stop there
        self.bounds = pricing.cap(bounds or Bounds())
        self.prior = prior
        self.mode = mode
        self.seed = seed
        self.horizon_tokens = horizon_tokens
        self.pooled, self.pool_strength = pooled, float(pool_strength)
        self.round_kinds = kinds
        self._given = {
            "bounds": bounds,
            "pricing": pricing,
            "prior": prior,
            "mode": mode,
            "seed": seed,
            "horizon_tokens": horizon_tokens,
            "round_kinds": kinds,
            "pooled": pooled,
            "pool_strength": pool_strength,
        }
        self._kind = kinds[0]  # the kind of the arm chosen last
        self.sd_rounds = 0  # consecutive γ1 = 0 rounds just before this one
        self._rng = random.Random(seed)
        self._problem: str | None = None
        self.post = list(prior)
        # pooled: the posterior of the latest round of any problem, shared with every copy of this
        # controller (a batched decode gives each prompt in flight a copy.copy of it)
        self._pool = _Pool(list(prior))
        self.rounds = 0
        if not self._arms:
            raise ConfigError(f"no (γ1, γ2) satisfies {self.bounds}")

    def derive(self, **changes):
        """A new controller of this class with these settings and ``changes`` (e.g. ``pricing``,
        ``round_kinds``); this one is left as it is."""
        return type(self)(**{**self._given, **changes})

    # the plan's costs, read where a caller used to read the controller's own attributes
    c1 = property(lambda self: self.pricing.c1)
    c2 = property(lambda self: self.pricing.c2)
    batch_cost = property(lambda self: self.pricing.batch_cost)
    engine_drafts = property(lambda self: self.pricing.engine_drafts)

    @property
    def _arms(self) -> list[tuple[int, int]]:
        """The allowed (γ1, γ2), from the current bounds (narrowed e.g. to γ2 = 0 without SD)."""
        return self.bounds.arms()

    def reset(self, prior: tuple[float, float, float, float] | None = None) -> None:
        self.post = list(prior or self.prior)
        self.rounds = 0
        self.sd_rounds = 0

    def prefill_cost(self, g1: int) -> float:
        """P(γ1): a score round's prefill of γ1 draft steps, in target steps (the plan's)."""
        return self.pricing.score_prefill(g1)

    def _priced(self, g1: int, g2: int, a1: float, a2: float) -> tuple[float, str]:
        """(modelled speedup, round kind) of (γ1, γ2) at (α1, α2) on this controller's engine:
        the best of the allowed kinds (γ1 = 0 is SD alone, the same for every kind)."""
        return self.pricing.best(g1, g2, a1, a2, self.round_kinds)

    def _h(self, g1: int, g2: int, a1: float, a2: float) -> float:
        """The modelled speedup of (γ1, γ2) at (α1, α2) on this controller's engine (best kind)."""
        return self._priced(g1, g2, a1, a2)[0]

    def _value(self, a1: float, a2: float, arms: list[tuple[int, int]] | None = None) -> tuple[int, int]:
        """The arm of ``arms`` (default: every allowed one) the speedup model prices highest at
        (α1, α2); ties go to the first."""
        arms = arms or self._arms
        best, arg, kind = -math.inf, arms[0], self.round_kinds[0]
        for g1, g2 in arms:
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
        if not self._lr_can_win():  # no γ1 > 0 arm is worth trying: SD alone, never explored
            a2, b2 = self.post[2:]
            return self._value(0.0, min(a2 / (a2 + b2), 0.999), [arm for arm in self._arms if arm[0] == 0])
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
        if not self._lr_can_win():
            return None
        return self.horizon_tokens * 2 ** min(self.sd_rounds, 20)

    def optimistic_alpha1(self) -> float:
        """The most α1 exploration assumes: the posterior's 95% quantile, but no more than what
        the verifier's calibration admits (``pricing.alpha1_max``) unless the rounds seen so far
        put the posterior mean above it: min(q95, max(α1_max, mean))."""
        a1, b1 = self.post[:2]
        cap = max(self.pricing.alpha1_max, a1 / (a1 + b1))
        return min(_beta_quantile(a1, b1, 0.95), cap, 0.999)

    def _lr_can_win(self) -> bool:
        """Whether some γ1 > 0 arm beats the best γ1 = 0 arm at the optimistic α1 (and the
        posterior mean of α2): max_{γ1>0} h(γ1, γ2; α̂1) > max_{γ2} g(γ2)."""
        a2, b2 = self.post[2:]
        hi1, m2 = self.optimistic_alpha1(), min(a2 / (a2 + b2), 0.999)
        lr = [self._h(g1, g2, hi1, m2) for g1, g2 in self._arms if g1 > 0]
        sd = [self._h(0, g2, hi1, m2) for g1, g2 in self._arms if g1 == 0]
        return bool(lr) and (not sd or max(lr) > max(sd))

    def problem_prior(self, problem: ProblemInfo) -> tuple[float, float, float, float]:
        """The prior of a new problem (a learned controller overrides this): ``prior``, or with
        ``pooled`` the posterior the problems before it left, each Beta shrunk to at most
        ``pool_strength`` pseudo-observations (a + b) so that the new problem's own rounds
        still move it."""
        if not self.pooled:
            return self.prior
        out = []
        post = self._pool.post
        for a, b in (post[:2], post[2:]):
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
        if self.pooled:
            self._pool.post = list(self.post)


class _Pool:
    """The posterior a pooled bandit's next problem starts from (one object, shared by copies)."""

    def __init__(self, post: list[float]) -> None:
        self.post = post


def _beta_quantile(a: float, b: float, q: float) -> float:
    """The q-quantile of Beta(a, b) by bisection on the regularised incomplete beta."""
    from scipy.special import betaincinv

    return float(betaincinv(a, b, q))


def _legacy_pricing(pricing: Pricing | None, legacy: dict) -> Pricing:
    """``pricing``, or one built from the keyword costs of lrtune 0.1 (``c1``, ``c2``,
    ``batch_cost``, ``prefill``; deprecated, removed in 0.3.0)."""
    unknown = set(legacy) - set(_LEGACY_PRICES)
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    if not legacy:
        return pricing or Pricing()
    import warnings
    from dataclasses import replace

    from lrtune.decodeconfig import LEGACY_REMOVED_IN

    warnings.warn(
        f"{', '.join(sorted(legacy))}= on a controller is deprecated and will be removed in "
        f"{LEGACY_REMOVED_IN}: pass pricing=lrtune.pricing.Pricing(...)",
        DeprecationWarning,
        stacklevel=3,
    )
    if pricing is not None:
        raise ConfigError("give the costs either in pricing= or as c1/c2/batch_cost/prefill, not both")
    kw = dict(legacy)
    if kw.get("prefill") is not None:
        kw["prefill"] = Prefill(**kw["prefill"])
    return replace(Pricing(), **{k: v for k, v in kw.items() if v is not None})
