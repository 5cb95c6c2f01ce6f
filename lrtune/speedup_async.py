"""Speedup of asynchronous (pipelined) LR, in the notation and units of :mod:`lrtune.speedup`
(time in T, one plain target step; α, c, γ as there).

Closed forms: :func:`S1`, :func:`S2`, :func:`S2_paper`, :func:`speedup_async`, :func:`h_async`.
Async timeline: :func:`async_event_sim`, :func:`async_verify_times`.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from lrtune.errors import ConfigError
from lrtune.speedup import check_alpha, check_c, check_int, geom_sum, g

__all__ = ["S1", "S2", "S2_paper", "speedup_async", "h_async", "async_event_sim", "async_verify_times"]


def S1(alpha: float, c: float) -> float:
    """Async LR speedup when the lookahead limit never binds (γ ≥ ⌈1/c⌉), 0 < c ≤ 1.

    S1 = 1 / (c + (1 − c)(1 − α))   [steps per T]

    (the paper's formula; confirmed by the event simulator.) Without stalls step k of a
    segment is verified at 1 + (k − 1)c, a segment commits K ~ Geometric(1 − α) steps, so
    S1 = E[K] / E[1 + (K − 1)c]. α = 1 gives 1/c, α = 0 gives 1. c > 1 (a draft slower
    than the target) is outside the formula: ConfigError (use :func:`speedup_async`).
    """
    a = check_alpha(alpha)
    cc = check_c(c)
    if cc > 1.0:
        raise ConfigError(f"S1 needs 0 < c <= 1 (a draft slower than the target stalls it), got {c!r}")
    return 1.0 / (cc + (1.0 - cc) * (1.0 - a))


def S2_paper(alpha: float, c: float, gamma: int) -> float:
    """The paper's formula for async LR when γ < ⌈1/c⌉, verbatim — known to be WRONG.

    S2_paper = (1 − α^γ) / ((1 − α)(c + α − α^(γ+1) − γ(1 − α)α^γ))

    Kept for reference only. It does not describe the process of :func:`speedup_async`
    (nor any stall rule of it): at α = 0 it gives 1/c although every segment then commits
    one step after at least one target step (speedup ≤ 1), at α → 1 it gives γ/c, above
    the draft's throughput bound 1/c, and at γ = 1 it is 1/c for every α. Use
    :func:`S2` / :func:`speedup_async`.
    """
    a = check_alpha(alpha)
    cc = check_c(c)
    n = check_int(gamma, "gamma", minimum=1)
    den = cc + a - a ** (n + 1) - n * (1.0 - a) * a**n
    return geom_sum(a, n) / den


def S2(alpha: float, c: float, gamma: int) -> float:
    """Async LR speedup when the lookahead limit binds (γ < ⌈1/c⌉), derived exactly.

    S2 = 1 / ((1 − α) + α·c + (1 − γc)·α^(γ+1)/Σ_{j=0}^{γ} α^j)   [steps per T]

    (α^(γ+1)/Σ_{j≤γ} α^j = (1 − α)α^(γ+1)/(1 − α^(γ+1)).) This replaces the paper's S2
    (:func:`S2_paper`), which disagrees with the process; see :func:`speedup_async` for
    the process, the stall rule and the derivation. For γ ≥ 1/c the correction term is
    dropped and S2 equals S1. α = 1 gives (γ + 1)/(1 + c); α = 0 gives 1.
    """
    return speedup_async(alpha, c, check_int(gamma, "gamma", minimum=1))


def speedup_async(alpha: float, c: float, gamma: int) -> float:
    """Asynchronous (pipelined) LR speedup with lookahead limit γ   [steps per T].

    S(α, c, γ) = 1 / ((1 − α)·max(1, c) + α·c + (1 − γc)⁺ · α^(γ+1) / Σ_{j=0}^{γ} α^j)

    Process (unlimited target parallelism; each target task takes 1 T, each draft step c):

    - A segment starts at t0 with a committed prefix P and nothing in flight. Target task
      τ1 (s1|P) starts at t0. The draft writes ŝ1, ŝ2, ... one at a time; when ŝm is done
      (time d_m) target task τ_{m+1} (s_{m+1}|P+ŝ1..ŝm) starts and ends at e_{m+1} = d_m + 1
      (e_1 = t0 + 1).
    - Step k is verified at v_k = max(d_k, e_k, v_{k−1}) (in order). Accepted: go on.
      Rejected: commit ŝ1..ŝ_{k−1} and s_k (k steps), cancel everything in flight and
      start a new segment at v_k.
    - Stall rule: the draft may start ŝm only when it is idle and m − V ≤ γ, V = steps
      verified so far in the segment; i.e. at most γ drafted-but-unverified steps, the
      step being drafted counted. So ŝm starts at max(d_{m−1}, v_{m−γ}) (v_j = t0 for
      j ≤ 0), and the draft never holds more than γ unverified steps.

    Derivation: within a segment everything is deterministic until the first rejection,
    and for c ≤ 1 the all-accept timeline is
        v_k − t0 = 1 + (k − 1)c + ⌊(k − 1)/(γ + 1)⌋ · (1 − γc)⁺
    (k ≤ γ + 1: no stall, v_k = 1 + (k − 1)c; afterwards stalls bind and
    v_{k+γ+1} = v_k + 1 + c, since d_k = v_{k−γ} + c and v_{k+1} = d_k + 1). For c > 1 the
    draft is the bottleneck and v_k − t0 = k·c. A segment commits K ~ Geometric(1 − α)
    steps, E[K] = 1/(1 − α), E[⌊(K − 1)/(γ + 1)⌋] = α^(γ+1)/(1 − α^(γ+1)), and the
    renewal-reward ratio E[K]/E[v_K − t0] gives the formula. Limits: γ ≥ ⌈1/c⌉ (and c ≤ 1)
    gives the paper's S1; α = 1 gives 1/(c + (1 − γc)⁺/(γ + 1)), i.e. (γ + 1)/(1 + c) when
    the limit binds; α = 0 gives 1/max(1, c). γ = 0 means no lookahead: the target alone,
    speedup 1. The paper's S2 does not match this process (see :func:`S2_paper`).
    """
    a = check_alpha(alpha)
    cc = check_c(c)
    n = check_int(gamma, "gamma")
    if n == 0:
        return 1.0
    stall = max(0.0, 1.0 - n * cc) * a ** (n + 1) / geom_sum(a, n + 1)
    return 1.0 / ((1.0 - a) * max(1.0, cc) + a * cc + stall)


def h_async(
    gamma1: int, gamma2: int, alpha1: float, c1: float, alpha2: float, c2: float, drafted: int | None = None
) -> float:
    """Async LR (lookahead γ1) with SD (γ2 tokens) inside each target step   [speedup].

    h_async = g(γ2) · S(α1, c1·g(γ2), γ1)      (S: :func:`speedup_async`)

    The composition of :func:`h`: SD makes a target step last 1/g(γ2) T while a draft step
    still costs c1 T, so against the SD target the draft costs c1·g(γ2); g converts back to
    a speedup over the plain target. γ2 = 0 gives speedup_async(α1, c1, γ1), γ1 = 0 gives
    g(γ2). ``drafted``: as in :func:`g`.
    """
    n1 = check_int(gamma1, "gamma1")
    gg = g(alpha2, c2, gamma2, drafted)
    return gg * speedup_async(alpha1, check_c(c1, "c1") * gg, n1)


def _async_events(outcomes: Sequence[bool], c: float, gamma: int) -> tuple[float, int, list[float]]:
    """Event loop of the async LR process; returns (time, committed, verification times)."""
    outcomes = [bool(o) for o in outcomes]
    n_out = len(outcomes)
    time_now = 0.0
    committed = 0
    verify_times: list[float] = []
    used = 0
    if n_out == 0:
        return 0.0, 0, verify_times
    seq = 0
    while used < n_out:  # one iteration per segment
        t0 = time_now
        heap: list[tuple[float, int, str, int]] = []
        drafted: set[int] = set()
        targeted: set[int] = set()
        verified = 0  # V
        next_draft = 1  # m of the next draft step to start
        drafting = False

        def push(t: float, kind: str, k: int) -> None:
            nonlocal seq
            heapq.heappush(heap, (t, seq, kind, k))
            seq += 1

        push(t0 + 1.0, "target", 1)
        segment_over = False

        def try_start_draft(now: float) -> None:
            nonlocal drafting, next_draft
            if not drafting and next_draft - verified <= gamma:
                drafting = True
                push(now + c, "draft", next_draft)
                next_draft += 1

        try_start_draft(t0)
        while not segment_over:
            now, _, kind, k = heapq.heappop(heap)
            if kind == "draft":
                drafted.add(k)
                drafting = False
                push(now + 1.0, "target", k + 1)
            else:
                targeted.add(k)
            while verified + 1 in drafted and verified + 1 in targeted:
                ok = outcomes[used]
                used += 1
                verify_times.append(now)
                time_now = now
                committed += 1  # accepted: ŝk committed; rejected: s_k committed
                if not ok:
                    segment_over = True  # cancel everything in flight (heap dropped)
                    break
                verified += 1
                if used == n_out:
                    segment_over = True
                    break
            if not segment_over:
                try_start_draft(now)
    return time_now, committed, verify_times


def async_event_sim(outcomes: Sequence[bool], c: float, gamma: int) -> tuple[float, int]:
    """Event-driven simulation of async LR (process and stall rule in :func:`speedup_async`).

    ``outcomes[i]`` is the verdict (True = accept) of the i-th verification, counted
    across segments. Runs until the outcomes are used up and returns ``(time, committed)``:
    time [T] of the last verification (from 0) and steps committed by then (an accepted
    draft step is committed when verified; a rejection commits the target's step and
    starts a new segment). Requires γ ≥ 1 (γ = 0 is the target alone) and c > 0.
    """
    cc = check_c(c)
    n = check_int(gamma, "gamma", minimum=1)
    t, k, _ = _async_events(outcomes, cc, n)
    return t, k


def async_verify_times(c: float, gamma: int, n: int) -> np.ndarray:
    """Verification times v_1..v_n [T] of one all-accept segment starting at 0.

    Produced by the event simulator (:func:`async_event_sim`) on n accepts. Since a segment
    is deterministic until its first rejection, a segment ending with a rejection at step K
    lasts exactly v_K.
    """
    cc = check_c(c)
    g_ = check_int(gamma, "gamma", minimum=1)
    nn = check_int(n, "n", minimum=1)
    _, _, times = _async_events([True] * nn, cc, g_)
    return np.asarray(times, dtype=float)
