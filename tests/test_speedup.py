"""Tests for lrtune.speedup: closed forms against Monte-Carlo simulations of the processes.

Time unit T = one plain target step. Every Monte-Carlo comparison uses a fixed seed and a
sample size whose standard error is <= ~0.15 %, so the 1 % tolerance is several standard
errors wide. Grids: α, c ∈ {0.1, 0.3, 0.5, 0.7, 0.9}, γ ∈ 1..8 (a smaller grid for h).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from lrtune.errors import ConfigError
from lrtune.simulate import simulate_async, simulate_combined, simulate_sd, simulate_sync
from lrtune.speedup import BestGammas, best_gammas, expected_accepted_per_round, f_sync, g, h
from lrtune.speedup_async import S1, S2, S2_paper, async_event_sim, async_verify_times, speedup_async

ALPHAS = (0.1, 0.3, 0.5, 0.7, 0.9)
CS = (0.1, 0.3, 0.5, 0.7, 0.9)
GAMMAS = tuple(range(1, 9))
REL_TOL = 0.01

CURVE = [1.0 + 0.08 * (n - 1) for n in range(1, 20)]  # b(n) = CURVE[n - 1], b(1) = 1


def curve_fn(n: int) -> float:
    return 1.0 + 0.08 * (n - 1)


def rel_err(x: float, ref: float) -> float:
    return abs(x / ref - 1.0)


def ceil_inv(c: float) -> int:
    """⌈1/c⌉, robust to 1/c landing a hair above an integer in floating point."""
    return math.ceil(1.0 / c - 1e-9)


# --------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize(
    "alpha, gamma, expected",
    [
        (0.5, 0, 1.0),
        (0.5, 1, 1.5),
        (0.5, 2, 1.75),
        (0.0, 5, 1.0),
        (1.0, 3, 4.0),
        (0.9, 4, (1 - 0.9**5) / 0.1),
    ],
)
def test_expected_accepted_per_round_is_geometric_partial_sum(alpha, gamma, expected):
    assert expected_accepted_per_round(alpha, gamma) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.9, 1.0])
@pytest.mark.parametrize("c", [0.1, 0.7, 1.5])
def test_gamma_zero_gives_exactly_one(alpha, c):
    assert f_sync(alpha, c, 0) == 1.0
    assert f_sync(alpha, c, 0, CURVE) == 1.0
    assert g(alpha, c, 0) == 1.0
    assert h(0, 0, alpha, c, alpha, c) == 1.0
    assert speedup_async(alpha, c, 0) == 1.0
    assert simulate_sync(alpha, c, 0, 1000, 0) == 1.0
    assert simulate_sd(alpha, c, 0, 1000, 0) == 1.0
    assert simulate_async(alpha, c, 0, 1000, 0) == 1.0


@pytest.mark.parametrize("batch_cost, b", [(None, lambda n: 1.0), (CURVE, curve_fn), (curve_fn, curve_fn)])
@pytest.mark.parametrize("c", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("gamma", [1, 2, 5, 8])
def test_f_sync_alpha_one_limit_equals_gamma_plus_one_over_c_gamma_plus_b(batch_cost, b, c, gamma):
    limit = (gamma + 1) / (c * gamma + b(gamma + 1))
    assert f_sync(1.0, c, gamma, batch_cost) == pytest.approx(limit, rel=1e-12)
    assert f_sync(1.0 - 1e-9, c, gamma, batch_cost) == pytest.approx(limit, rel=1e-7)
    assert f_sync(0.0, c, gamma, batch_cost) == pytest.approx(1 / (c * gamma + b(gamma + 1)), rel=1e-12)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_f_sync_and_g_equal_their_textbook_formulas(alpha):
    for c, gamma in itertools.product(CS, GAMMAS):
        num = (1 - alpha ** (gamma + 1)) / (1 - alpha)
        assert f_sync(alpha, c, gamma) == pytest.approx(num / (c * gamma + 1), rel=1e-12)
        assert f_sync(alpha, c, gamma, CURVE) == pytest.approx(num / (c * gamma + CURVE[gamma]), rel=1e-12)
        assert g(alpha, c, gamma) == pytest.approx(num / (c * gamma + 1), rel=1e-12)


def test_f_sync_with_paper_gamma_counts_target_batch_size():
    """Paper form (1-α^γp)/((1-α)(1-c+cγp)) with γp = drafts + 1 equals our f_sync(drafts)."""
    for alpha, c, gamma in itertools.product(ALPHAS, CS, GAMMAS):
        gp = gamma + 1
        paper = (1 - alpha**gp) / ((1 - alpha) * (1 - c + c * gp))
        assert f_sync(alpha, c, gamma) == pytest.approx(paper, rel=1e-12)


def test_batch_cost_curve_lowers_f_sync():
    for alpha, c in itertools.product(ALPHAS, CS):
        assert f_sync(alpha, c, 0, CURVE) == f_sync(alpha, c, 0)
        for gamma in GAMMAS:
            free = f_sync(alpha, c, gamma)
            as_seq = f_sync(alpha, c, gamma, CURVE)
            as_fn = f_sync(alpha, c, gamma, curve_fn)
            assert as_seq == pytest.approx(as_fn, rel=1e-12)
            assert as_seq < free


@pytest.mark.parametrize("alpha", ALPHAS)
def test_f_sync_matches_simulation_within_1_percent(alpha):
    rng = np.random.default_rng(1234)
    bad = []
    for c, gamma in itertools.product(CS, GAMMAS):
        for bc in (None, CURVE) if c in (0.1, 0.5, 0.9) else (None,):
            est = simulate_sync(alpha, c, gamma, 200_000, rng, batch_cost=bc)
            err = rel_err(est, f_sync(alpha, c, gamma, bc))
            if err > REL_TOL:
                bad.append((c, gamma, bc is not None, err))
    assert not bad


@pytest.mark.parametrize("alpha", ALPHAS)
def test_g_matches_simulation_within_1_percent(alpha):
    rng = np.random.default_rng(5678)
    bad = []
    for c, gamma in itertools.product(CS, GAMMAS):
        err = rel_err(simulate_sd(alpha, c, gamma, 200_000, rng), g(alpha, c, gamma))
        if err > REL_TOL:
            bad.append((c, gamma, err))
    assert not bad


# --------------------------------------------------------------------------- combined h

H_GRID = list(
    itertools.product(
        (0.3, 0.7, 0.9),  # α1
        (0.1, 0.5),  # c1
        (0, 2, 6),  # γ1
        (0.5, 0.8),  # α2
        (0.1, 0.4),  # c2
        (2, 5),  # γ2 (γ2 = 0 is plain f_sync: see test_h_reduces_to_g_and_f_sync)
    )
)


def test_h_reduces_to_g_and_f_sync():
    for a1, c1, g1, a2, c2, g2 in H_GRID:
        assert h(0, g2, a1, c1, a2, c2) == pytest.approx(g(a2, c2, g2), rel=1e-12)
        assert h(g1, 0, a1, c1, a2, c2) == pytest.approx(f_sync(a1, c1, g1), rel=1e-12)
        assert h(g1, 0, a1, c1, a2, c2, CURVE) == pytest.approx(f_sync(a1, c1, g1, CURVE), rel=1e-12)


def test_h_is_g_times_f_sync_with_draft_cost_rescaled_by_g():
    """h = g·f(γ1; α1, c1·g): the paper's h = f·g once c1 is measured against the SD target."""
    for a1, c1, g1, a2, c2, g2 in H_GRID:
        for bc, b in ((None, 1.0), (CURVE, CURVE[g1])):
            gg = (1 - a2 ** (g2 + 1)) / ((1 - a2) * (c2 * g2 + 1))
            direct = (1 - a1 ** (g1 + 1)) / ((1 - a1) * (c1 * g1 + b / gg))
            assert h(g1, g2, a1, c1, a2, c2, bc) == pytest.approx(direct, rel=1e-12)
            assert h(g1, g2, a1, c1, a2, c2, bc) == pytest.approx(
                g(a2, c2, g2) * f_sync(a1, c1 * gg, g1, bc), rel=1e-12
            )


def test_h_matches_combined_simulation_within_1_percent():
    """simulate_combined: a step is L tokens; the draft writes γ1 steps (c1 T each, c1
    measured against plain target decoding); the target batch of γ1+1 steps costs b(γ1+1)
    times the time one SD lane needs to emit L tokens. SD iterations ((c2·γ2+1)/L T, J2+1
    tokens) stream across step boundaries: tokens that overshoot a step's end count toward
    the next step (in a decoder they are valid continuation tokens of the committed text),
    so truncating at step boundaries cannot bias the per-step time away from b/g.
    """
    rng = np.random.default_rng(2024)
    bad = []
    for a1, c1, g1, a2, c2, g2 in H_GRID:
        est = simulate_combined(a1, c1, g1, a2, c2, g2, 100_000, rng, tokens_per_step=4)
        err = rel_err(est, h(g1, g2, a1, c1, a2, c2))
        if err > REL_TOL:
            bad.append((a1, c1, g1, a2, c2, g2, err))
    assert not bad


@pytest.mark.parametrize("tokens_per_step", [1, 7, 32])
def test_combined_simulation_with_batch_cost_and_other_step_lengths(tokens_per_step):
    rng = np.random.default_rng(tokens_per_step)
    cases = [(0.8, 0.2, 3, 0.7, 0.1, 4), (0.6, 0.4, 5, 0.9, 0.3, 2), (0.7, 0.3, 4, 0.6, 0.2, 0)]
    for a1, c1, g1, a2, c2, g2 in cases:
        est = simulate_combined(
            a1,
            c1,
            g1,
            a2,
            c2,
            g2,
            200_000 // tokens_per_step + 20_000,
            rng,
            batch_cost=CURVE,
            tokens_per_step=tokens_per_step,
        )
        assert rel_err(est, h(g1, g2, a1, c1, a2, c2, CURVE)) < REL_TOL


# --------------------------------------------------------------------------- async LR


def test_async_event_sim_hand_worked_example():
    """γ=1, c=0.25: ŝ1 at .25, τ2 ends 1.25; s1 verified at 1; the draft (1 slot) waits for
    it, ŝ2 at 1.25, verified at max(1.25, 1.25); ŝ3 at 1.5, τ3 ends 2.25 → v3 = 2.25."""
    np.testing.assert_allclose(async_verify_times(0.25, 1, 5), [1.0, 1.25, 2.25, 2.5, 3.5])
    # accept s1 (t=1), reject s2 (t=1.25: commit ŝ1, s2; new segment), accept s1' (t=2.25)
    assert async_event_sim([True, False, True], 0.25, 1) == (pytest.approx(2.25), 3)
    # every step rejected: each segment commits the target's s1 after 1 T
    assert async_event_sim([False] * 7, 0.25, 3) == (pytest.approx(7.0), 7)
    assert async_event_sim([], 0.25, 3) == (0.0, 0)


@pytest.mark.parametrize("c", CS + (1.0, 1.3, 2.0))
def test_async_all_accept_timeline_matches_closed_form(c):
    """Event simulator's v_k vs v_k = max(1,c) + (k−1)c + ⌊(k−1)/(γ+1)⌋·(1−γc)⁺."""
    k = np.arange(1, 121)
    for gamma in GAMMAS:
        expect = max(1.0, c) + (k - 1) * c + np.floor((k - 1) / (gamma + 1)) * max(0.0, 1 - gamma * c)
        np.testing.assert_allclose(async_verify_times(c, gamma, k.size), expect, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("alpha, c, gamma", [(0.3, 0.2, 2), (0.8, 0.15, 3), (0.9, 0.5, 4), (0.6, 0.7, 1)])
def test_async_event_sim_time_is_sum_of_segment_timelines(alpha, c, gamma):
    """Random outcomes through the event simulator = Σ over segments of v_K (what
    simulate_async uses), including an unfinished trailing segment."""
    rng = np.random.default_rng(7)
    outcomes = list(rng.random(3000) < alpha)
    time, committed = async_event_sim(outcomes, c, gamma)
    v = async_verify_times(c, gamma, 3001)
    expect, run = 0.0, 0
    for ok in outcomes:
        run += 1
        if not ok:
            expect += v[run - 1]
            run = 0
    if run:
        expect += v[run - 1]
    assert committed == len(outcomes)
    assert time == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_speedup_async_matches_simulation_within_1_percent(alpha):
    rng = np.random.default_rng(99)
    bad = []
    for c, gamma in itertools.product(CS, GAMMAS):
        err = rel_err(simulate_async(alpha, c, gamma, 400_000, rng), speedup_async(alpha, c, gamma))
        if err > REL_TOL:
            bad.append((c, gamma, err))
    assert not bad


def test_S1_equals_speedup_async_when_gamma_at_least_ceil_inv_c():
    checked = 0
    for alpha, c, gamma in itertools.product(ALPHAS, CS, GAMMAS):
        if gamma >= ceil_inv(c):
            assert S1(alpha, c) == pytest.approx(speedup_async(alpha, c, gamma), rel=1e-12)
            checked += 1
    assert checked > 50


def test_S2_equals_speedup_async_when_lookahead_limit_binds():
    for alpha, c, gamma in itertools.product(ALPHAS, CS, GAMMAS):
        if gamma < ceil_inv(c):
            s = speedup_async(alpha, c, gamma)
            assert S2(alpha, c, gamma) == pytest.approx(s, rel=1e-12)
            assert s < S1(alpha, c)  # stalls cost time


def test_paper_S2_disagrees_with_the_async_process():
    """The paper's S2 gives 1/c at α=0 (true: 1; with every step rejected nothing beats the
    target) and γ/c as α→1 (true: (γ+1)/(1+c); γ/c even exceeds the draft's 1/c bound)."""
    for c, gamma in itertools.product(CS, GAMMAS):
        if gamma >= ceil_inv(c):
            continue
        assert S2_paper(0.0, c, gamma) == pytest.approx(1 / c)
        assert speedup_async(0.0, c, gamma) == 1.0
        assert S2_paper(1.0, c, gamma) == pytest.approx(gamma / c)
        assert speedup_async(1.0, c, gamma) == pytest.approx((gamma + 1) / (1 + c))
        for alpha in ALPHAS:  # off by > 5 % everywhere in the stall regime of the grid
            assert rel_err(S2_paper(alpha, c, gamma), speedup_async(alpha, c, gamma)) > 0.05


@pytest.mark.parametrize("c", CS + (1.0, 1.5))
@pytest.mark.parametrize("gamma", [1, 2, 3, 8])
def test_speedup_async_limits_alpha_zero_and_one(c, gamma):
    assert speedup_async(0.0, c, gamma) == pytest.approx(1 / max(1.0, c))
    at_one = 1 / c if gamma * c >= 1 else (gamma + 1) / (1 + c)
    assert speedup_async(1.0, c, gamma) == pytest.approx(at_one, rel=1e-12)
    assert speedup_async(1 - 1e-9, c, gamma) == pytest.approx(at_one, rel=1e-6)
    assert simulate_async(0.0, c, gamma, 1000, 0) == pytest.approx(1 / max(1.0, c), rel=1e-12)


@pytest.mark.parametrize("c, gamma", [(0.1, 1), (0.1, 8), (0.3, 2), (0.3, 4), (0.7, 1), (1.5, 2)])
def test_simulate_async_without_rejections_approaches_alpha_one_limit(c, gamma):
    """α = 1: one endless segment; n/v_n → 1/(c + (1−γc)⁺/(γ+1)) with O(1/n) start-up bias."""
    at_one = 1 / c if gamma * c >= 1 else (gamma + 1) / (1 + c)
    assert simulate_async(1.0, c, gamma, 20_000, 0) == pytest.approx(at_one, rel=2e-3)


def test_speedup_async_is_nondecreasing_in_gamma_and_flat_from_ceil_inv_c():
    for alpha, c in itertools.product(ALPHAS, CS):
        s = [speedup_async(alpha, c, gm) for gm in range(1, 13)]
        assert all(b >= a - 1e-12 for a, b in zip(s, s[1:]))
        for gm in range(ceil_inv(c), 13):
            assert s[gm - 1] == pytest.approx(S1(alpha, c), rel=1e-12)


# --------------------------------------------------------------------------- best_gammas

M_VALUES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 16, 20, 24, 30, 32, 40, 48, 63, 64, 100)
BEST_CASES = [
    (0.9, 0.1, 0.8, 0.1, None),
    (0.7, 0.3, 0.6, 0.2, None),
    (0.5, 0.05, 0.9, 0.05, None),
    (0.95, 0.02, 0.5, 0.3, CURVE),
    (0.3, 0.5, 0.85, 0.1, curve_fn),
]


def _h_reference(g1, g2, a1, c1, a2, c2, b):
    gg = (1 - a2 ** (g2 + 1)) / ((1 - a2) * (c2 * g2 + 1))
    return (1 - a1 ** (g1 + 1)) / ((1 - a1) * (c1 * g1 + b(g1 + 1) / gg))


@pytest.mark.parametrize("a1, c1, a2, c2, bc", BEST_CASES)
def test_best_gammas_respects_budget_and_returns_argmax_of_h(a1, c1, a2, c2, bc):
    b = (lambda n: 1.0) if bc is None else curve_fn
    for M in M_VALUES:
        res = best_gammas(a1, c1, a2, c2, M, batch_cost=bc)
        assert isinstance(res, BestGammas)
        g1, g2, val = res
        assert 0 <= g1 <= 8 and 0 <= g2 <= 8 and g1 * g2 <= M
        feasible = [(x, y) for x in range(9) for y in range(9) if x * y <= M]
        best = max(_h_reference(x, y, a1, c1, a2, c2, b) for x, y in feasible)
        assert val == pytest.approx(best, rel=1e-12)
        assert val == pytest.approx(h(g1, g2, a1, c1, a2, c2, bc), rel=1e-12)


def test_best_gammas_optimum_never_gets_worse_with_more_budget():
    for a1, c1, a2, c2, bc in BEST_CASES:
        vals = [best_gammas(a1, c1, a2, c2, M, batch_cost=bc).h for M in M_VALUES]
        assert all(b >= a for a, b in zip(vals, vals[1:]))


@pytest.mark.parametrize(
    "args, expected",
    [
        # c = 1 with α = 1 makes f ≡ 1 and g ≡ 1: everything ties → the empty budget (0, 0)
        ((1.0, 1.0, 1.0, 1.0, 64), (0, 0)),
        # LR useless (α1 = 0), SD ties everywhere: smaller γ2 wins
        ((0.0, 0.1, 1.0, 1.0, 64), (0, 0)),
        # M = 0: only γ1 = 0 or γ2 = 0 is allowed
        ((0.9, 0.05, 0.9, 0.05, 0), None),
    ],
)
def test_best_gammas_ties_go_to_the_smaller_budget(args, expected):
    g1, g2, val = best_gammas(*args)
    if expected is not None:
        assert (g1, g2) == expected
        assert val == pytest.approx(1.0)
    else:
        assert g1 * g2 == 0


@pytest.mark.parametrize("g1max, g2max", [(0, 0), (3, 0), (0, 5), (2, 6)])
def test_best_gammas_honours_search_bounds(g1max, g2max):
    g1, g2, _ = best_gammas(0.9, 0.05, 0.9, 0.05, 100, gamma1_max=g1max, gamma2_max=g2max)
    assert g1 <= g1max and g2 <= g2max


# --------------------------------------------------------------------------- bad inputs

BAD_CALLS = {
    "alpha<0": lambda: f_sync(-0.1, 0.5, 2),
    "alpha>1": lambda: g(1.1, 0.5, 2),
    "alpha nan": lambda: speedup_async(float("nan"), 0.5, 2),
    "alpha str": lambda: f_sync("x", 0.5, 2),
    "c=0": lambda: f_sync(0.5, 0.0, 2),
    "c<0": lambda: g(0.5, -0.2, 2),
    "c inf": lambda: speedup_async(0.5, float("inf"), 2),
    "gamma<0": lambda: f_sync(0.5, 0.5, -1),
    "gamma float": lambda: g(0.5, 0.5, 1.5),
    "gamma bool": lambda: speedup_async(0.5, 0.5, True),
    "h alpha2": lambda: h(1, 1, 0.5, 0.5, 2.0, 0.5),
    "h c1": lambda: h(1, 1, 0.5, 0.0, 0.5, 0.5),
    "h gamma2<0": lambda: h(1, -1, 0.5, 0.5, 0.5, 0.5),
    "M<0": lambda: best_gammas(0.5, 0.5, 0.5, 0.5, -1),
    "M nan": lambda: best_gammas(0.5, 0.5, 0.5, 0.5, float("nan")),
    "best alpha1": lambda: best_gammas(1.5, 0.5, 0.5, 0.5, 4),
    "best c2": lambda: best_gammas(0.5, 0.5, 0.5, 0.0, 4),
    "gamma1_max<0": lambda: best_gammas(0.5, 0.5, 0.5, 0.5, 4, gamma1_max=-1),
    "gamma2_max<0": lambda: best_gammas(0.5, 0.5, 0.5, 0.5, 4, gamma2_max=-2),
    "curve too short": lambda: best_gammas(0.5, 0.5, 0.5, 0.5, 4, batch_cost=[1.0, 1.1]),
    "b(1)!=1": lambda: f_sync(0.5, 0.5, 2, [2.0, 2.1, 2.2]),
    "b(n)<=0": lambda: f_sync(0.5, 0.5, 2, lambda n: 1.0 if n == 1 else 0.0),
    "rounds=0": lambda: simulate_sync(0.5, 0.5, 2, 0, 0),
    "iterations<0": lambda: simulate_sd(0.5, 0.5, 2, -5, 0),
    "combined L=0": lambda: simulate_combined(0.5, 0.5, 2, 0.5, 0.5, 2, 10, 0, tokens_per_step=0),
    "segments=0": lambda: simulate_async(0.5, 0.5, 2, 0, 0),
    "event sim gamma=0": lambda: async_event_sim([True], 0.5, 0),
    "S2 gamma=0": lambda: S2(0.5, 0.5, 0),
    "expected gamma<0": lambda: expected_accepted_per_round(0.5, -1),
}


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_bad_inputs_raise_config_error(name):
    with pytest.raises(ConfigError):
        BAD_CALLS[name]()
    assert issubclass(ConfigError, ValueError)


def test_expected_longest_matches_monte_carlo_and_the_mean_at_one():
    from lrtune.speedup import expected_longest

    rng = np.random.default_rng(0)
    sample = rng.integers(5, 97, size=200)
    assert expected_longest(sample, 1) == pytest.approx(sample.mean())
    for n in (2, 3, 5):
        draws = rng.choice(sample, size=(200_000, n)).max(axis=1)
        assert expected_longest(sample, n) == pytest.approx(draws.mean(), rel=0.01)
    assert expected_longest([7, 7, 7], 4) == pytest.approx(7.0)  # no spread: the longest is the mean


def test_a_batch_priced_by_its_longest_step_costs_more_than_equal_rows_and_keeps_b1():
    from lrtune.speedup import longest_step_batch_cost

    b = [1.0, 1.05, 1.1]
    priced = longest_step_batch_cost(b, [10, 20, 60])
    assert priced(1) == 1.0
    assert priced(3) == pytest.approx(1.1 * expected_max_3_of([10, 20, 60]) / 30)
    assert f_sync(0.8, 0.3, 2, batch_cost=priced) < f_sync(0.8, 0.3, 2, batch_cost=b)
    with pytest.raises(ConfigError):
        longest_step_batch_cost(b, [])


def expected_max_3_of(xs):
    import itertools

    return np.mean([max(t) for t in itertools.product(xs, repeat=3)])


@pytest.mark.parametrize("alpha,c,gamma", [(0.8, 0.3, 4), (0.5, 0.1, 2), (0.95, 0.6, 8), (0.0, 0.2, 3)])
def test_c_from_sd_inverts_g(alpha, c, gamma):
    from lrtune.speedup import c_from_sd

    assert c_from_sd(g(alpha, c, gamma), alpha, gamma) == pytest.approx(c)


def test_sd_on_an_engine_that_drafts_more_pays_for_every_draft_token():
    from lrtune.speedup import g, h

    a, c = 0.5, 0.4
    for gamma in (1, 2, 3, 4):
        assert g(a, c, gamma, drafted=4) == pytest.approx((1 - a ** (gamma + 1)) / ((1 - a) * (c * 4 + 1)))
    assert g(a, c, 3, drafted=1) == g(a, c, 3)  # an engine never drafts fewer than the request verifies
    assert g(a, c, 0, drafted=4) == 1.0  # no SD: no drafter runs
    assert h(2, 2, 0.6, 0.3, a, c, drafted=4) < h(2, 2, 0.6, 0.3, a, c)


def test_early_abort_prices_a_round_by_its_rows_up_to_the_first_rejection():
    from lrtune.speedup import early_abort_batch_cost, longest_step_batch_cost

    steps = [4, 10, 18, 30, 55, 96]
    b = [1.0, 1.1, 1.2, 1.3]
    full = longest_step_batch_cost(b, steps)
    assert early_abort_batch_cost(b, steps, 1.0)(4) == pytest.approx(full(4))  # nothing rejected: every row runs
    assert early_abort_batch_cost(b, steps, 0.0)(4) == pytest.approx(1.3)  # position 0 rejected: one row's length
    assert early_abort_batch_cost(b, [20, 20, 20], 0.5)(3) == pytest.approx(1.2)  # equal steps: abort saves nothing
    assert early_abort_batch_cost(b, steps, 0.6)(1) == 1.0
    # against a simulation of the rule: rows after the first rejection stop when its row ends
    rng = np.random.default_rng(0)
    alpha, n, reps = 0.6, 4, 200_000
    lens = rng.choice(steps, size=(reps, n))
    rejected = rng.random((reps, n - 1)) >= alpha
    first = np.where(rejected.any(axis=1), rejected.argmax(axis=1), n - 1)
    longest = np.array([lens[i, : first[i] + 1].max() for i in range(reps)])
    assert early_abort_batch_cost(b, steps, alpha)(n) == pytest.approx(1.3 * longest.mean() / np.mean(steps), rel=0.01)


# ---- draft-prefix reuse ----------------------------------------------------------------
STEPS = [12, 30, 31, 45, 60, 64, 90, 96]


def test_mixed_longest_reduces_to_expected_longest_without_or_with_unshortened_rows():
    from lrtune.speedup import expected_longest, expected_longest_mixed

    for n in (1, 2, 4):
        assert expected_longest_mixed(STEPS, n, 0, 0.3) == pytest.approx(expected_longest(STEPS, n))
        assert expected_longest_mixed(STEPS, 1, n, 1.0) == pytest.approx(expected_longest(STEPS, n + 1))
        assert expected_longest_mixed(STEPS, 0, n, 0.5) == pytest.approx(0.5 * expected_longest(STEPS, n))


def test_mixed_longest_matches_a_monte_carlo_draw():
    import numpy as np

    from lrtune.speedup import expected_longest_mixed

    rng = np.random.default_rng(0)
    draws = rng.choice(STEPS, size=(200_000, 4))
    mc = np.maximum(draws[:, 0], 0.4 * draws[:, 1:].max(axis=1)).mean()
    assert expected_longest_mixed(STEPS, 1, 3, 0.4) == pytest.approx(mc, rel=0.01)


def test_reuse_pricing_equals_the_plain_and_abort_pricing_when_nothing_is_reused_and_falls_with_reuse():
    from lrtune.speedup import early_abort_batch_cost, longest_step_batch_cost, reuse_batch_cost

    b = [1.0, 1.2, 1.06, 1.16]
    for n in (1, 2, 3, 4):
        assert reuse_batch_cost(b, STEPS, 1.0)(n) == pytest.approx(longest_step_batch_cost(b, STEPS)(n))
        assert reuse_batch_cost(b, STEPS, 1.0, 0.6)(n) == pytest.approx(early_abort_batch_cost(b, STEPS, 0.6)(n))
    costs = [reuse_batch_cost(b, STEPS, keep, 0.6)(4) for keep in (1.0, 0.7, 0.4, 0.0)]
    assert costs == sorted(costs, reverse=True) and costs[-1] > 0  # the bonus row is never shortened


def test_mixed_longest_rejects_bad_input():
    from lrtune.errors import ConfigError
    from lrtune.speedup import expected_longest_mixed

    with pytest.raises(ConfigError):
        expected_longest_mixed(STEPS, 0, 0, 0.5)
    with pytest.raises(ConfigError):
        expected_longest_mixed(STEPS, 1, 1, 1.5)
    with pytest.raises(ConfigError):
        expected_longest_mixed([], 1, 1, 0.5)
