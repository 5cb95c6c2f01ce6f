"""Monte-Carlo estimators of the speedups in :mod:`lrtune.speedup` and
:mod:`lrtune.speedup_async` (vectorised; ``rng`` is a ``numpy.random.Generator`` or a seed):
:func:`simulate_sync`, :func:`simulate_sd`, :func:`simulate_combined`, :func:`simulate_async`.
The tests hold each closed form to its simulation within 1%."""

from __future__ import annotations

import numpy as np

from lrtune.speedup import BatchCost, b_at, check_alpha, check_c, check_int, geom_sum, sample_leading_accepts, as_rng
from lrtune.speedup_async import async_verify_times

__all__ = ["simulate_sync", "simulate_sd", "simulate_combined", "simulate_async", "simulate_score"]


def simulate_sync(
    alpha: float,
    c: float,
    gamma: int,
    rounds: int,
    rng: np.random.Generator | int | None,
    batch_cost: BatchCost = None,
) -> float:
    """Monte-Carlo sync LR: Σ committed steps / Σ round time over ``rounds`` rounds [steps/T].

    Each round samples J (leading accepts among γ draft steps, i.i.d. α), commits J + 1
    steps and takes γ·c + b(γ + 1) T. Estimates :func:`f_sync`.
    """
    a = check_alpha(alpha)
    cc = check_c(c)
    n = check_int(gamma, "gamma")
    r = check_int(rounds, "rounds", minimum=1)
    j = sample_leading_accepts(a, n, r, as_rng(rng))
    return float((j + 1).sum()) / (r * (cc * n + b_at(batch_cost, n + 1)))


def simulate_sd(alpha: float, c: float, gamma: int, iterations: int, rng: np.random.Generator | int | None) -> float:
    """Monte-Carlo token-level SD: Σ committed tokens / Σ iteration time [tokens/forward].

    Each iteration samples the leading accepts J among γ draft tokens, commits J + 1 tokens
    and takes γ·c + 1 target-forward times. Estimates :func:`g`.
    """
    a = check_alpha(alpha)
    cc = check_c(c)
    n = check_int(gamma, "gamma")
    it = check_int(iterations, "iterations", minimum=1)
    j = sample_leading_accepts(a, n, it, as_rng(rng))
    return float((j + 1).sum()) / (it * (cc * n + 1.0))


def simulate_combined(
    alpha1: float,
    c1: float,
    gamma1: int,
    alpha2: float,
    c2: float,
    gamma2: int,
    rounds: int,
    rng: np.random.Generator | int | None,
    batch_cost: BatchCost = None,
    tokens_per_step: int = 16,
) -> float:
    """Monte-Carlo LR + SD: Σ committed steps / Σ round time over ``rounds`` rounds [steps/T].

    A step is L = ``tokens_per_step`` tokens; one plain target token costs 1/L T, so a plain
    target step costs 1 T and a draft step c1 T (c1 vs plain target decoding). Round i:
    the draft writes γ1 steps (γ1·c1 T); the target batch over γ1 + 1 steps advances by L
    tokens of one SD token stream, paying b(γ1 + 1) × the time of the SD iterations needed.
    SD iterations take (c2·γ2 + 1)/L T and emit J2 + 1 tokens (J2 leading accepts among γ2,
    i.i.d. α2). The stream runs across step boundaries: tokens of an iteration that
    overshoot step i's L tokens count toward step i + 1 (round i is charged up to the
    iteration that completes its L tokens), so no tokens are dropped at boundaries and the
    long-run target time per step is exactly b/g(γ2). The round commits J1 + 1 steps (J1
    leading accepts among γ1, i.i.d. α1). Estimates :func:`h`.
    """
    a1 = check_alpha(alpha1, "alpha1")
    a2 = check_alpha(alpha2, "alpha2")
    cc1 = check_c(c1, "c1")
    cc2 = check_c(c2, "c2")
    n1 = check_int(gamma1, "gamma1")
    n2 = check_int(gamma2, "gamma2")
    r = check_int(rounds, "rounds", minimum=1)
    L = check_int(tokens_per_step, "tokens_per_step", minimum=1)
    gen = as_rng(rng)
    bb = b_at(batch_cost, n1 + 1)

    j1 = sample_leading_accepts(a1, n1, r, gen)

    need = r * L  # tokens the target stream must emit
    mean_tokens = geom_sum(a2, n2 + 1)
    chunks: list[np.ndarray] = []
    total = 0
    while total < need:
        size = int((need - total) / mean_tokens * 1.05) + 64
        chunk = sample_leading_accepts(a2, n2, size, gen) + 1
        chunks.append(chunk)
        total += int(chunk.sum())
    cum = np.cumsum(np.concatenate(chunks))
    # iterations completed when the stream first holds i·L tokens, i = 1..r
    done = np.searchsorted(cum, L * np.arange(1, r + 1), side="left") + 1
    iter_time = (cc2 * n2 + 1.0) / L
    target_time = bb * np.diff(done, prepend=0) * iter_time  # per round
    time = r * n1 * cc1 + float(target_time.sum())
    return float((j1 + 1).sum()) / time


def simulate_async(alpha: float, c: float, gamma: int, n_segments: int, rng: np.random.Generator | int | None) -> float:
    """Monte-Carlo async LR: Σ committed steps / Σ segment time over segments [steps/T].

    Samples each segment's length K ~ Geometric(1 − α) (K − 1 accepts then a rejection)
    and charges it v_K from the event-driven timeline (:func:`async_verify_times`); this is
    exact because a segment is deterministic until its first rejection. α = 1 (no
    rejection ever): one segment of ``n_segments`` accepted steps, n / v_n. γ = 0: the
    target alone, 1. Estimates :func:`speedup_async`.
    """
    a = check_alpha(alpha)
    cc = check_c(c)
    n = check_int(gamma, "gamma")
    ns = check_int(n_segments, "n_segments", minimum=1)
    if n == 0:
        return 1.0
    if a >= 1.0:
        v = async_verify_times(cc, n, ns)
        return ns / float(v[-1])
    if a <= 0.0:
        k = np.ones(ns, dtype=np.int64)  # every first step is rejected
    else:
        k = as_rng(rng).geometric(1.0 - a, size=ns)  # K − 1 accepts, then a rejection
    v = async_verify_times(cc, n, int(k.max()))
    return float(k.sum()) / float(v[k - 1].sum())


def simulate_score(
    alpha: float, c: float, prefill: float, gamma: int, step_time: float = 1.0, *, rounds: int = 200_000, rng=None
) -> float:
    """Monte-Carlo speedup of score rounds (:func:`lrtune.speedup.h_score`): each round drafts
    ``gamma`` steps (``c`` each), prefills them (``prefill``), draws their one-sided verdicts
    (i.i.d. accept with ``alpha``), commits the leading accepts and the target's own step
    (``step_time``: 1/g(γ2) with SD); committed steps over time."""
    a = check_alpha(alpha)
    cc = check_c(c)
    n = check_int(gamma, "gamma")
    r = as_rng(rng)
    accepted = sample_leading_accepts(a, n, rounds, r) if n else np.zeros(rounds)
    steps = float(np.sum(accepted + 1))
    time = rounds * (cc * n + (prefill if n else 0.0) + step_time)
    return steps / time


def simulate_priced(
    pricing,
    kind: str,
    gamma1: int,
    gamma2: int,
    alpha1: float,
    alpha2: float,
    *,
    rounds: int = 200_000,
    rng: np.random.Generator | int | None = None,
) -> float:
    """Monte-Carlo of one round of ``kind`` (lr or score) priced by ``pricing`` (a
    :class:`lrtune.pricing.Pricing`: c1, c2, b(n), a score round's P(γ1)), the process that
    :meth:`~lrtune.pricing.Pricing.speedup` prices in closed form [steps/T]. An LR round is
    :func:`simulate_combined`; a score round is :func:`simulate_score` with the target's own step
    at 1/g(γ2) T (g from :func:`simulate_sd`)."""
    if kind == "lr":
        return simulate_combined(
            alpha1, pricing.c1, gamma1, alpha2, pricing.c2, gamma2, rounds, rng, batch_cost=pricing.batch_for(gamma2)
        )
    if kind == "score":
        from lrtune.speedup import g

        step = 1.0 / g(alpha2, pricing.c2, gamma2, pricing.engine_drafts or None) if gamma2 else 1.0
        return simulate_score(alpha1, pricing.c1, pricing.score_prefill(gamma1), gamma1, step, rounds=rounds, rng=rng)
    raise ValueError(f"round kind must be lr or score, got {kind!r}")
