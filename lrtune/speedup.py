"""Speedup models for Lookahead Reasoning (LR) and token-level speculative decoding (SD).

Pure functions (numpy only), named in the notation of arXiv 2506.19830.

Units
-----
Time is measured in **T**, the time of one plain target reasoning step (one target step
generated token by token without SD), so T = 1. A *speedup* is committed work divided by
the time the target alone needs for it: steps per T for LR, tokens per target forward for
SD. Every speedup here is dimensionless and the target alone scores exactly 1.

Symbols
-------
- ``alpha`` (α): probability that one draft unit (a step for LR, a token for SD) is
  accepted; units are accepted independently.
- ``c``: draft cost of one unit relative to the target's cost of the same unit.
- ``gamma`` (γ): number of drafted units per round (LR: γ1 steps, SD: γ2 tokens); for
  async LR, the lookahead limit.
- ``b(n)`` (``batch_cost``): time of one batched target pass over n steps relative to one
  step; b(1) = 1. ``None`` means b ≡ 1 (free batching); a sequence gives
  ``batch_cost[n - 1] = b(n)``; a callable is called as ``batch_cost(n)``.

Public functions
----------------
Closed forms: :func:`expected_accepted_per_round`, :func:`f_sync`, :func:`g`, :func:`h`,
:func:`best_gammas`. Pricing a batch by its longest step: :func:`expected_longest`,
:func:`longest_step_batch_cost`, :func:`early_abort_batch_cost`, :func:`reuse_batch_cost`.
Async LR: :mod:`lrtune.speedup_async`. Monte-Carlo estimators: :mod:`lrtune.simulate`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import NamedTuple, Union

import numpy as np

from lrtune.errors import ConfigError

__all__ = [
    "BatchCost",
    "BestGammas",
    "expected_accepted_per_round",
    "f_sync",
    "g",
    "h",
    "best_gammas",
    "expected_longest",
    "c_from_sd",
    "longest_step_batch_cost",
]

BatchCost = Union[None, Sequence[float], Callable[[int], float]]

_B1_TOL = 1e-6  # how far b(1) may sit from 1


class BestGammas(NamedTuple):
    """Result of :func:`best_gammas`; unpacks as ``(gamma1, gamma2, h)``."""

    gamma1: int
    gamma2: int
    h: float


# ---------------------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------------------


def check_alpha(alpha: float, name: str = "alpha") -> float:
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number in [0, 1], got {alpha!r}") from None
    if not 0.0 <= a <= 1.0:  # also rejects NaN
        raise ConfigError(f"{name} must be in [0, 1], got {alpha!r}")
    return a


def check_c(c: float, name: str = "c") -> float:
    try:
        v = float(c)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a positive number, got {c!r}") from None
    if not (v > 0.0 and math.isfinite(v)):
        raise ConfigError(f"{name} must be a finite number > 0, got {c!r}")
    return v


def check_int(value: int, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    v = int(value)
    if v < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value!r}")
    return v


def as_rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def b_at(batch_cost: BatchCost, n: int) -> float:
    """b(n): time of a batched target pass over ``n`` steps, in T (b(1) must be 1)."""
    if batch_cost is None:
        return 1.0
    if n != 1:
        b_at(batch_cost, 1)  # a curve is only valid if it is normalised: b(1) = 1
    if callable(batch_cost):
        value = batch_cost(n)
    else:
        if n > len(batch_cost):
            raise ConfigError(
                f"batch_cost has {len(batch_cost)} entries but b({n}) is needed (batch_cost[n - 1] = b(n))"
            )
        value = batch_cost[n - 1]
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"batch_cost b({n}) must be a number, got {value!r}") from None
    if not (v > 0.0 and math.isfinite(v)):
        raise ConfigError(f"batch_cost b({n}) must be finite and > 0, got {value!r}")
    if n == 1 and abs(v - 1.0) > _B1_TOL:
        raise ConfigError(f"batch_cost must satisfy b(1) = 1 (normalise by the one-step time), got {v}")
    return v


def geom_sum(alpha: float, n: int) -> float:
    """Σ_{j=0}^{n-1} α^j = (1 − α^n)/(1 − α), evaluated without dividing by 1 − α."""
    if n <= 0:
        return 0.0
    return float(np.sum(alpha ** np.arange(n, dtype=float)))


def sample_leading_accepts(alpha: float, gamma: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """Samples of J = number of leading accepts among γ i.i.d. Bernoulli(α) trials."""
    if gamma == 0 or alpha <= 0.0:
        return np.zeros(size, dtype=np.int64)
    if alpha >= 1.0:
        return np.full(size, gamma, dtype=np.int64)
    # G ~ Geometric(1 − α) on {1, 2, ...}: P(G − 1 >= j) = α^j, so J = min(G − 1, γ).
    return np.minimum(rng.geometric(1.0 - alpha, size=size) - 1, gamma)


# ---------------------------------------------------------------------------------------
# synchronous LR, token-level SD, and their combination
# ---------------------------------------------------------------------------------------


def expected_accepted_per_round(alpha: float, gamma: int) -> float:
    """E[J + 1] = Σ_{j=0}^{γ} α^j = (1 − α^(γ+1))/(1 − α)   [units committed per round].

    J is the number of leading accepts among γ drafted units (each accepted i.i.d. with
    probability α); the +1 is the target's own unit (its step s_{J+1} for LR, the
    bonus/correction token for SD). Equals γ + 1 at α = 1 and 1 at α = 0.
    """
    a = check_alpha(alpha)
    n = check_int(gamma, "gamma")
    return geom_sum(a, n + 1)


def f_sync(alpha: float, c: float, gamma: int, batch_cost: BatchCost = None) -> float:
    """Synchronous LR speedup over the target alone   [steps per T, dimensionless].

    f(γ) = E[J + 1] / E[round time] = (1 − α^(γ+1)) / ((1 − α)(c·γ + b(γ + 1)))

    One round: the draft writes γ steps one after another (γ·c T), then the target runs
    ONE batch of γ + 1 steps (s1|P, s2|P+ŝ1, ..., s_{γ+1}|P+ŝ1..ŝγ) taking b(γ + 1) T; the
    round commits the J leading accepted draft steps plus the target's step s_{J+1}.
    γ = 0 is the target alone: f = 1 exactly. α = 1 gives (γ + 1)/(c·γ + b(γ + 1)) and
    α = 0 gives 1/(c·γ + b(γ + 1)); the numerator is summed as Σ α^j, so neither limit
    divides by zero.

    The paper writes the denominator as (1 − c + c·γ), where γ counts the target batch size
    (drafts + 1); substituting γ_paper = γ + 1 gives
    our (1 + c·γ) with b ≡ 1, since this process drafts γ steps before the batch.
    """
    a = check_alpha(alpha)
    cc = check_c(c)
    n = check_int(gamma, "gamma")
    if n == 0:
        b_at(batch_cost, 1)  # validate the curve; b(1) = 1, so the target alone scores 1
        return 1.0
    return geom_sum(a, n + 1) / (cc * n + b_at(batch_cost, n + 1))


def c_from_sd(speedup: float, alpha: float, gamma: int) -> float:
    """The draft cost ratio c that makes :func:`g` equal a measured SD speedup   [dimensionless].

    Inverts g(γ) = (1 − α^(γ+1)) / ((1 − α)(c·γ + 1)):  c = (Σ_{j≤γ} α^j / S − 1) / γ, where
    S = t_target / t_SD per generated token and α the measured token acceptance. This is
    the c2 that SD really pays on an engine (its drafting loop, batching and overheads),
    which can differ from a plain draft-vs-target per-token ratio.
    """
    a = check_alpha(alpha)
    n = check_int(gamma, "gamma", 1)
    s = check_c(speedup, "speedup")
    return (geom_sum(a, n + 1) / s - 1.0) / n


def alpha_from_rate(rate: float, gamma: int) -> float:
    """The per-token acceptance α whose passes of γ drafts accept the fraction ``rate`` of
    them under the i.i.d. model   [probability].

    Inverts r(α) = E[min(X, γ)] / γ = (Σ_{j=1..γ} α^j) / γ, increasing from r(0) = 0 to
    r(1) = 1 (bisection to 1e-12). For SD counters that report only accepted/drafted
    tokens (profiles written before ``SDCounters.stopped`` was counted).
    """
    r = check_alpha(rate, "rate")
    n = check_int(gamma, "gamma", 1)
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-12:
        mid = (lo + hi) / 2
        if (geom_sum(mid, n + 1) - 1.0) / n < r:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _sorted_steps(step_tokens: Sequence[float]) -> np.ndarray:
    """The step lengths sorted ascending (ConfigError unless a non-empty list of finite lengths >= 0)."""
    x = np.sort(np.asarray(step_tokens, dtype=float))
    if x.size == 0 or not np.all(np.isfinite(x)) or np.any(x < 0):
        raise ConfigError("step_tokens must be a non-empty list of finite lengths >= 0")
    return x


def expected_longest(step_tokens: Sequence[float], n: int) -> float:
    """E[max of n i.i.d. draws] from the empirical distribution of ``step_tokens``   [tokens].

    With the sample sorted, x_(1) ≤ ... ≤ x_(m): P(max ≤ x_(k)) = (k/m)^n, so
    E[max] = Σ_k x_(k)·((k/m)^n − ((k − 1)/m)^n). n = 1 gives the mean.
    """
    n = check_int(n, "n", 1)
    x = _sorted_steps(step_tokens)
    k = np.arange(1, x.size + 1, dtype=float) / x.size
    return float(np.sum(x * (k**n - (k - 1.0 / x.size) ** n)))


def _mean_step(step_tokens: Sequence[float]) -> float:
    """E[step] > 0 of the empirical step lengths (ConfigError otherwise)."""
    mean = expected_longest(step_tokens, 1)
    if mean <= 0:
        raise ConfigError("step_tokens must hold at least one step longer than 0 tokens")
    return mean


def _first_rejection(a: float, n: int) -> list[float]:
    """P(J = j), j = 0..n−1, J the first rejected of n − 1 drafted positions (n − 1: none)."""
    return [a**j * (1 - a) for j in range(n - 1)] + [a ** (n - 1)]


def longest_step_batch_cost(batch_cost: BatchCost, step_tokens: Sequence[float]) -> Callable[[int], float]:
    """b'(n) = b(n) · E[max of n step lengths] / E[step length]   [T].

    A batched target call over n steps ends when its longest step ends, so it costs b(n)
    (the per-token cost of n rows, measured on equal-length rows) times the expected
    longest of n steps, in units of the mean step. b'(1) = b(1) = 1.
    """
    mean = _mean_step(step_tokens)
    return lambda n: b_at(batch_cost, n) * (1.0 if n == 1 else expected_longest(step_tokens, n) / mean)


def early_abort_batch_cost(
    batch_cost: BatchCost,
    step_tokens: Sequence[float],
    alpha: float,
) -> Callable[[int], float]:
    """b_abort(n) = b(n) · Σ_{j=0}^{n−1} P(J = j) · E[max of j + 1 steps] / E[step]   [T].

    A round of n target rows (γ1 = n − 1 drafted positions, then the bonus row) with early
    abort: J is the first rejected position (J = n − 1 when every draft is accepted),
    P(J = j) = α^j (1 − α) for j < n − 1 and α^(n−1) for j = n − 1. The rows after J stop
    when row J ends, so the round lasts as long as the longest of its first J + 1 rows,
    at the n-row per-token cost b(n) until then. Without abort it is the longest of all n
    (:func:`longest_step_batch_cost`). b_abort(1) = b(1) = 1.
    """
    a = check_alpha(alpha)
    mean = _mean_step(step_tokens)

    def cost(n: int) -> float:
        if n == 1:
            return b_at(batch_cost, 1)
        p = _first_rejection(a, n)
        return b_at(batch_cost, n) * sum(pj * expected_longest(step_tokens, j + 1) / mean for j, pj in enumerate(p))

    return cost


def expected_longest_mixed(step_tokens: Sequence[float], full: int, shortened: int, keep: float) -> float:
    """E[max of ``full`` draws of L and ``shortened`` draws of keep·L]   [tokens], L from the
    empirical distribution of ``step_tokens``, all draws independent.

    P(max ≤ x) = F(x)^full · F(x / keep)^shortened with F the empirical CDF, and
    E[max] = Σ_i (1 − P(max ≤ x_i)) · (x_(i+1) − x_i) over the sorted jump points x_i of
    both (from 0). shortened = 0 gives :func:`expected_longest`.
    """
    full, shortened = check_int(full, "full"), check_int(shortened, "shortened")
    if full + shortened < 1:
        raise ConfigError("expected_longest_mixed needs at least one draw")
    if not 0.0 <= keep <= 1.0:
        raise ConfigError(f"keep must be in [0, 1], got {keep}")
    x = _sorted_steps(step_tokens)
    grid = np.unique(np.concatenate([[0.0], x, keep * x]))
    cdf = np.searchsorted(x, grid, side="right") / x.size
    cdf_short = np.searchsorted(keep * x, grid, side="right") / x.size
    below = cdf**full * cdf_short**shortened
    return float(np.sum((1.0 - below[:-1]) * np.diff(grid)))


def reuse_batch_cost(
    batch_cost: BatchCost, step_tokens: Sequence[float], keep: float, alpha: float | None = None
) -> Callable[[int], float]:
    """Draft-prefix reuse (:mod:`lrtune.reuse`): b_reuse(n) = b(n) · E[longest row] / E[step]   [T].

    Of a round's n target rows, the n − 1 rows of drafted positions generate keep·L tokens
    (keep = 1 − the reused share of the target's tokens there, measured), the bonus row a
    whole step L. Without early abort (``alpha`` None) the round lasts
    E[max(L, keep·L_1, .., keep·L_(n−1))]; with it, J the first rejected position
    (P(J = j) as in :func:`early_abort_batch_cost`), it lasts the longest of the first J + 1
    rows: J + 1 shortened rows for J < n − 1, all n rows for J = n − 1. keep = 1 without
    abort gives :func:`longest_step_batch_cost`. b_reuse(1) = b(1) = 1.
    """
    a = None if alpha is None else check_alpha(alpha)
    mean = _mean_step(step_tokens)

    def cost(n: int) -> float:
        if n == 1:
            return b_at(batch_cost, 1)
        if a is None:
            return b_at(batch_cost, n) * expected_longest_mixed(step_tokens, 1, n - 1, keep) / mean
        p = _first_rejection(a, n)
        rows = [expected_longest_mixed(step_tokens, 0, j + 1, keep) for j in range(n - 1)]
        rows.append(expected_longest_mixed(step_tokens, 1, n - 1, keep))
        return b_at(batch_cost, n) * sum(pj * r / mean for pj, r in zip(p, rows))

    return cost


def g(alpha: float, c: float, gamma: int, drafted: int | None = None) -> float:
    """Token-level SD speedup (Leviathan et al.)   [tokens per target forward, dimensionless].

    g(γ) = (1 − α^(γ+1)) / ((1 − α)(c·d + 1)),  d = max(γ, drafted) for γ > 0, else 0

    One iteration: d draft tokens at c each, then one target forward (time 1) verifies
    the first γ of them; tokens are accepted i.i.d. with probability α and the iteration
    commits the leading accepts plus one bonus/correction token. ``drafted``: what the
    engine drafts per iteration whatever the request's γ (a shared SD engine cut to γ per
    request drafts its own number; None: γ). γ = 0 gives exactly 1.
    """
    a = check_alpha(alpha)
    cc = check_c(c)
    n = check_int(gamma, "gamma")
    d = max(n, int(drafted or 0)) if n > 0 else 0
    return geom_sum(a, n + 1) / (cc * d + 1.0)


def h(
    gamma1: int,
    gamma2: int,
    alpha1: float,
    c1: float,
    alpha2: float,
    c2: float,
    batch_cost: BatchCost = None,
    drafted: int | None = None,
) -> float:
    """LR (γ1 steps) with SD (γ2 tokens) inside each target step   [speedup, dimensionless].

    h = g(γ2) · f_sync(γ1; α1, c1·g(γ2))
      = (1 − α1^(γ1+1)) / ((1 − α1)(c1·γ1 + b(γ1 + 1)/g(γ2)))

    With SD the target's step time drops from 1 to 1/g(γ2) T (the whole SD iteration,
    draft tokens included, is scaled by b for a batch), while a draft step still costs c1 T
    because c1 is measured against *plain* target decoding. Relative to the SD-accelerated
    target the draft step costs c1_eff = c1·g(γ2); f_sync with c1_eff is the speedup over
    SD, and multiplying by g converts it to a speedup over the plain target. If c1 is
    instead measured against the SD-accelerated target (as in the paper) this is exactly
    the paper's h = f·g. γ1 = 0 gives g(γ2); γ2 = 0 gives f_sync(γ1; α1, c1).
    ``drafted``: draft tokens the SD engine proposes per iteration (see :func:`g`).
    """
    n1 = check_int(gamma1, "gamma1")
    gg = g(alpha2, c2, gamma2, drafted)
    return gg * f_sync(alpha1, check_c(c1, "c1") * gg, n1, batch_cost)


# ---------------------------------------------------------------------------------------
# asynchronous (pipelined) LR
# ---------------------------------------------------------------------------------------


def score_prefill(gamma1: int, overhead_tokens: float, per_token: float, step_tokens: float) -> float:
    """A score round's prefill of γ1 draft steps, in target steps   [T].

    P(γ1) = (o + π·γ1·L) / L: call overhead o (target tokens), π per prefilled token (a decoded
    token's time), L tokens per draft step (``lrtune profile`` measures o and π)."""
    return (overhead_tokens + per_token * gamma1 * step_tokens) / step_tokens


def h_score(
    gamma1: int,
    gamma2: int,
    alpha1: float,
    c1: float,
    prefill: float,
    alpha2: float = 0.0,
    c2: float = 0.0,
    drafted: int | None = None,
) -> float:
    """Score rounds (:mod:`lrtune.score_round`), SD inside the target's step   [speedup, dimensionless].

    h_score = (1 − α1^(γ1+1)) / ((1 − α1)(c1·γ1 + P + 1/g(γ2)))

    One round: the draft writes γ1 steps (c1·γ1 T), one prefill of the chain scores them
    (``prefill`` = P T: the call's fixed cost plus π per draft step, measured), a one-sided
    verifier accepts each step with probability α1 and the J leading accepts are committed,
    then the target writes its own step after them with SD (1/g(γ2) T). E[J + 1] =
    Σ_{j≤γ1} α1^j. No batch of γ1 + 1 target steps, so no b(n). γ1 = 0 is SD alone: g(γ2)
    (no chain, no prefill); γ2 = 0: g = 1.
    """
    n1 = check_int(gamma1, "gamma1")
    gg = g(alpha2, c2, gamma2, drafted) if gamma2 else 1.0
    if n1 == 0:
        return gg
    a = check_alpha(alpha1, "alpha1")
    cc = check_c(c1, "c1")
    if not math.isfinite(prefill) or prefill < 0:
        raise ConfigError(f"prefill must be a number >= 0, got {prefill!r}")
    return geom_sum(a, n1 + 1) / (cc * n1 + prefill + 1.0 / gg)


# ---------------------------------------------------------------------------------------
# budgeted search
# ---------------------------------------------------------------------------------------


def batch_cost_for(gamma2: int, batch_cost: BatchCost, batch_cost_sd: BatchCost) -> BatchCost:
    """The batch cost of a round's target rows: b_SD(n) when they run SD (γ2 > 0) and it is
    given, else b(n)."""
    return batch_cost_sd if (gamma2 > 0 and batch_cost_sd is not None) else batch_cost


def best_gammas(
    alpha1: float,
    c1: float,
    alpha2: float,
    c2: float,
    M: float,
    gamma1_max: int = 8,
    gamma2_max: int = 8,
    batch_cost: BatchCost = None,
    drafted: int | None = None,
    batch_cost_sd: BatchCost = None,
) -> BestGammas:
    """argmax over γ1 ∈ 0..gamma1_max, γ2 ∈ 0..gamma2_max of h, subject to γ1·γ2 ≤ M.

    Exhaustive search; returns ``(γ1, γ2, h)`` (a :class:`BestGammas`). γ1 = 0 means no LR,
    γ2 = 0 means no SD (so either one alone always has product 0 and is always feasible).
    ``drafted``: draft tokens the SD engine proposes per pass whatever γ2 (see :func:`g`), so
    each γ2 is priced on that engine; None: each γ2 drafts its own. ``batch_cost_sd``: b_SD(n),
    the batch cost of rows decoded with SD, for every γ2 > 0 (None: ``batch_cost``).
    Ties in h (relative 1e-12) go to the smaller budget γ1·γ2, then the smaller γ1 + γ2,
    then the smaller γ1. Raises :class:`~lrtune.errors.ConfigError` for α outside [0, 1],
    c ≤ 0, M < 0, negative γ bounds, or a batch_cost that does not cover b(gamma1_max + 1).
    """
    a1 = check_alpha(alpha1, "alpha1")
    a2 = check_alpha(alpha2, "alpha2")
    cc1 = check_c(c1, "c1")
    cc2 = check_c(c2, "c2")
    try:
        budget = float(M)
    except (TypeError, ValueError):
        raise ConfigError(f"M must be a number >= 0, got {M!r}") from None
    if not budget >= 0.0:
        raise ConfigError(f"M must be >= 0, got {M!r}")
    n1 = check_int(gamma1_max, "gamma1_max")
    n2 = check_int(gamma2_max, "gamma2_max")
    best: tuple[float, int, int, int] | None = None  # (h, budget, total, γ1)
    result = BestGammas(0, 0, 1.0)
    for g1 in range(n1 + 1):
        for g2 in range(n2 + 1):
            if g1 * g2 > budget:
                continue
            value = h(g1, g2, a1, cc1, a2, cc2, batch_cost_for(g2, batch_cost, batch_cost_sd), drafted)
            key = (g1 * g2, g1 + g2, g1)
            if best is None:
                better = True
            elif value > best[0] * (1.0 + 1e-12):
                better = True
            elif value >= best[0] * (1.0 - 1e-12):
                better = key < best[1:]
            else:
                better = False
            if better:
                best = (value, *key)
                result = BestGammas(g1, g2, value)
    return result


# ---------------------------------------------------------------------------------------
# Monte-Carlo estimators
# ---------------------------------------------------------------------------------------
