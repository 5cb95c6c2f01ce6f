"""Controllers: bounds and budget on every call, heuristic moves, bandit convergence, and
the decoder calling choose/update every round."""

from __future__ import annotations

import copy
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lrtune.pricing import Prefill, Pricing
from lrtune.backends.base import SDCounters
from lrtune.control import Bounds, ControlState, ProblemInfo, RoundOutcome, method_for_depths
from lrtune.errors import ConfigError
from lrtune.speedup import h
from lrtune.policies import BanditController, FixedController, HeuristicController, make_controller

P = ProblemInfo(id="p0", text="q")


def simulate_round(rng, g1, g2, a1, a2, passes=6):
    """One round of the i.i.d. model: γ1 verdicts ~ Bernoulli(α1); ``passes`` SD passes
    that accept draft tokens until the first rejection."""
    verdicts = tuple(rng.random() < a1 for _ in range(g1))
    acc = 0
    by_pos = [0] * g2  # passes that accepted position i
    for _ in range(passes if g2 else 0):
        k = 0
        while k < g2 and rng.random() < a2:
            by_pos[k] += 1
            k += 1
        acc += k
    j = next((i for i, v in enumerate(verdicts) if not v), len(verdicts))
    return RoundOutcome(
        gamma1=g1,
        gamma2=g2,
        verdicts=verdicts,
        accepted_steps=j,
        sd=SDCounters(passes if g2 else 0, passes * g2, acc, by_pos),
    )


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 3),
    st.integers(1, 6),
    st.integers(0, 3),
    st.integers(1, 8),
    st.floats(0, 30),
    st.sampled_from(["fixed", "heuristic", "bandit"]),
    st.integers(0, 10_000),
)
def test_every_choice_respects_bounds_and_budget(g1min, g1span, g2min, g2span, M, policy, seed):
    b = Bounds(gamma1_min=g1min, gamma1_max=g1min + g1span, gamma2_min=g2min, gamma2_max=g2min + g2span, M=M)
    if not b.arms():
        with pytest.raises(ConfigError):
            make_controller("bandit", bounds=b)
        return
    g1, g2 = b.arms()[len(b.arms()) // 2]
    ctl = make_controller(policy, gamma1=g1, gamma2=g2, bounds=b, seed=seed)
    rng = random.Random(seed)
    for r in range(25):
        c1, c2 = ctl.choose(P, ControlState(round=r, generated_tokens=r * 10, budget_left=500))
        assert b.allows(c1, c2), (policy, c1, c2, b)
        ctl.update(simulate_round(rng, c1, c2, rng.random(), rng.random()))


@pytest.mark.parametrize(
    "gamma1,gamma2,M,expected",
    [
        (9, 9, 100, (6, 8)),
        (6, 8, 24, (5, 4)),
        (-1, 3, 24, (0, 3)),
        (1, 40, 5, (1, 5)),
    ],
)
def test_bounds_clip_to_the_nearest_allowed_pair(gamma1, gamma2, M, expected):
    b = Bounds(gamma1_max=6, gamma2_max=8, M=M)
    got = b.clip(gamma1, gamma2)
    assert b.allows(*got) and got == expected


def test_heuristic_grows_on_full_acceptance_and_shrinks_on_rejection():
    ctl = HeuristicController(2, 4, Bounds(gamma1_max=6, gamma2_max=8, M=48))
    assert ctl.choose(P, ControlState(0, 0, 100)) == (2, 4)
    ctl.update(RoundOutcome(2, 4, verdicts=(True, True), sd=SDCounters(3, 12, 12, [3, 3, 3, 3])))
    assert ctl.choose(P, ControlState(1, 10, 90)) == (3, 5)
    ctl.update(RoundOutcome(3, 5, verdicts=(False, True, True), sd=SDCounters(3, 15, 3, [2, 1, 0, 0, 0])))
    assert ctl.choose(P, ControlState(2, 20, 80)) == (2, 4)
    assert ctl.choose(ProblemInfo("p1"), ControlState(0, 0, 100)) == (2, 4)  # a new problem restarts


@pytest.mark.parametrize("g1, g2, method", [(0, 0, "target"), (0, 4, "sd"), (3, 0, "lr"), (3, 4, "lr+sd")])
def test_a_zero_depth_selects_the_method_without_that_level(g1, g2, method):
    assert method_for_depths(g1, g2) == method


def test_fixed_never_moves():
    ctl = FixedController(3, 4)
    for r in range(3):
        assert ctl.choose(P, ControlState(r, 0, 100)) == (3, 4)
        ctl.update(RoundOutcome(3, 4, verdicts=(False,)))


@pytest.mark.parametrize("a1,a2,mode", [(0.85, 0.7, "thompson"), (0.3, 0.9, "thompson"), (0.85, 0.7, "ucb")])
def test_bandit_converges_to_the_best_arm_of_a_bernoulli_process(a1, a2, mode):
    bounds = Bounds(gamma1_max=6, gamma2_max=8, M=24)
    c1, c2 = 0.3, 0.2
    best = max(bounds.arms(), key=lambda a: h(a[0], a[1], a1, c1, a2, c2))
    best_h = h(best[0], best[1], a1, c1, a2, c2)
    ctl = BanditController(bounds, Pricing(c1=c1, c2=c2), mode=mode, seed=1)
    rng = random.Random(7)
    late = []
    for r in range(400):
        g1, g2 = ctl.choose(P, ControlState(r, 0, 10_000))
        ctl.update(simulate_round(rng, g1, g2, a1, a2))
        if r >= 300:
            late.append(h(g1, g2, a1, c1, a2, c2) / best_h)
    assert sum(late) / len(late) > 0.97  # the late choices are (near-)optimal under the true α
    e1, e2 = ctl.estimate()  # the α an optimal arm keeps observing is learned
    if best[0] > 0:
        assert abs(e1 - a1) < 0.08
    if best[1] > 0:
        assert abs(e2 - a2) < 0.08


def test_decoder_asks_the_controller_every_round_and_reports_each_round():
    from lrtune.decoder import DecodeConfig, LookaheadDecoder
    from lrtune.verifiers import make_verifier
    from fake_backend import FakeBackend, chain

    class Recorder:
        bounds = Bounds(gamma1_max=4, gamma2_max=0, M=0)

        def __init__(self):
            self.calls, self.outcomes = [], []

        def choose(self, problem, state):
            self.calls.append(state)
            return [2, 0, 3, 1][state.round % 4], 0

        def horizon(self):
            return 16

        def update(self, o):
            self.outcomes.append(o)

    dec = LookaheadDecoder(
        FakeBackend(chain(3)),
        FakeBackend(chain(10)),
        make_verifier("exact"),
        DecodeConfig(method="lr", gamma1=2, max_new_tokens=120, max_step_tokens=8),
    )
    rec = Recorder()
    rounds = []
    res, stats = dec.decode([1, 2, 3], controller=rec, on_round=rounds.append)
    assert len(rec.calls) == len(rec.outcomes) == len(rounds) == stats.rounds > 2
    assert [c.round for c in rec.calls] == list(range(len(rec.calls)))
    for o, r in zip(rec.outcomes, rounds):
        assert len(r.drafts) <= o.gamma1 and len(o.verdicts) == len(r.drafts)  # γ1 = 0: no drafts, a target step
    assert {o.gamma1 for o in rec.outcomes} == {0, 1, 2, 3}
    ref, _ = dec.decode([1, 2, 3], DecodeConfig(method="target", max_new_tokens=120, max_step_tokens=8))
    assert res.token_ids == ref.token_ids  # identical draft and target: output is the target's


def test_a_controller_outside_its_bounds_is_an_error():
    from lrtune.decoder import DecodeConfig, LookaheadDecoder
    from lrtune.verifiers import make_verifier
    from fake_backend import FakeBackend, chain

    class Bad:
        bounds = Bounds(gamma1_max=2, gamma2_max=0, M=0)

        def choose(self, problem, state):
            return 5, 0

        def horizon(self):
            return None

        def update(self, o):
            pass

    dec = LookaheadDecoder(
        FakeBackend(chain(3)), FakeBackend(chain(3)), make_verifier("exact"), DecodeConfig(method="lr")
    )
    with pytest.raises(ConfigError, match="outside its bounds"):
        dec.decode([1, 2], controller=Bad())


@pytest.mark.parametrize("horizon", [None, 5, 23])
def test_a_gamma1_zero_round_runs_the_target_uninterrupted_to_the_controllers_horizon(horizon):
    """γ1 = 0 decodes like SD: one target call per decision point (the horizon, or the whole
    answer), committed step by step, with the target's greedy output."""
    from lrtune.decoder import DecodeConfig, LookaheadDecoder
    from lrtune.verifiers import make_verifier
    from fake_backend import FakeBackend, chain

    class SDOnly:
        bounds = Bounds(gamma1_max=2, gamma2_max=4, M=8)

        def choose(self, problem, state):
            return 0, 3

        def horizon(self):
            return horizon

        def update(self, o):
            assert o.gamma1 == 0 and not o.verdicts

    cfg = DecodeConfig(method="lr+sd", gamma1=2, gamma2=3, max_new_tokens=120, max_step_tokens=2)  # cuts steps
    target = FakeBackend(chain(3))
    dec = LookaheadDecoder(target, FakeBackend(chain(10)), make_verifier("exact"), cfg)
    commits, rounds = [], []
    res, stats = dec.decode(
        [1, 2, 3], controller=SDOnly(), on_commit=lambda src, ids: commits.append(ids), on_round=rounds.append
    )
    ref, _ = dec.decode([1, 2, 3], DecodeConfig(method="target", max_new_tokens=120))
    assert res.token_ids == ref.token_ids
    n = len(res.token_ids)
    assert stats.target_calls == (1 if horizon is None else -(-n // horizon)) == stats.rounds
    assert all(len(r.targets[0].token_ids) <= (horizon or 120) for r in rounds)
    # committed step by step: each piece ends at a step end, at most max_step_tokens long (DESIGN §2;
    # the last may be cut by the horizon)
    assert sum(commits, []) == res.token_ids and len(commits) == stats.committed_target_steps > stats.rounds
    assert all(len(ids) <= cfg.max_step_tokens for ids in commits)
    if horizon is None:
        from lrtune.steps import split_steps

        assert commits == split_steps(
            ref.token_ids,
            target.decode,
            delimiter=cfg.delimiter,
            eos_ids=target.eos_ids,
            max_step_tokens=cfg.max_step_tokens,
        )


def test_the_bandit_doubles_its_horizon_over_consecutive_sd_rounds_and_resets_after_lr():
    from lrtune.control import RoundOutcome

    b = BanditController(
        Bounds(gamma1_max=2, gamma2_max=4, M=8), Pricing(c1=0.3, c2=0.3, batch_cost=(1.0, 1.05, 1.1)), horizon_tokens=10
    )  # uniform prior on α1: LR may still win
    hs = []
    for g1 in (0, 0, 0, 2, 0):
        hs.append(b.horizon())
        b.update(RoundOutcome(gamma1=g1, gamma2=2, verdicts=(True,) * g1))
    assert hs == [10, 20, 40, 80, 10]
    with pytest.raises(ConfigError):
        BanditController(horizon_tokens=0)


def test_grid_ucb_tries_every_arm_then_plays_the_highest_throughput_arm_most():
    from lrtune.policies import GridUCBController

    bounds = Bounds(gamma1_max=2, gamma2_max=2, M=4)
    ucb = GridUCBController(bounds)
    rng = random.Random(0)
    rate = {a: 10.0 + 5 * a[0] - 3 * abs(a[1] - 1) for a in bounds.arms()}  # best: (2, 1)
    best = max(rate, key=rate.get)
    plays = []
    for t in range(600):
        g1, g2 = ucb.choose(
            ProblemInfo(id=f"p{t // 20}"), ControlState(round=t % 20, generated_tokens=0, budget_left=99)
        )
        assert bounds.allows(g1, g2)
        plays.append((g1, g2))
        tok_s = rate[g1, g2] * rng.uniform(0.8, 1.2)
        ucb.update(RoundOutcome(gamma1=g1, gamma2=g2, committed_tokens=40, target_s=40 / tok_s))
    assert set(plays[: len(bounds.arms())]) == set(bounds.arms())  # every arm once first
    late = plays[-200:]
    assert max(set(late), key=late.count) == best and max(set(plays), key=plays.count) == best
    assert ucb.horizon() == 64 and make_controller("grid-ucb", bounds=bounds).name == "grid-ucb"


def test_the_bandit_runs_sd_to_the_end_when_even_an_optimistic_alpha1_cannot_make_lr_win():
    bounds = Bounds(gamma1_max=3, gamma2_max=4, M=12)
    cpu = Pricing(c1=0.4, c2=0.3, batch_cost=(1.0, 1.3, 1.6, 1.9))
    hopeless = BanditController(bounds, cpu, prior=(2.0, 200.0, 80.0, 20.0))
    assert hopeless.horizon() is None  # α1 ≈ 0.01 even at its 95% quantile: nothing to learn
    unsure = BanditController(bounds, cpu, prior=(1.0, 1.0, 80.0, 20.0))
    assert unsure.horizon() == 64


def test_bandit_prices_each_gamma2_on_an_engine_that_drafts_its_own_number():
    """On a shared SD engine that drafts 4 tokens per pass, γ2 = 1 pays for 4 drafts: at a
    low α2 plain decoding then beats it, though γ2 = 1 wins where each γ2 drafts its own."""
    from lrtune.control import Bounds
    from lrtune.policies.bandit import BanditController

    ctl = BanditController(Bounds(gamma1_min=0, gamma1_max=0, gamma2_min=0, gamma2_max=4), Pricing(c1=0.4, c2=0.4))
    assert ctl._value(0.1, 0.5) == (0, 1)
    shared = ctl.derive(pricing=Pricing(c1=0.4, c2=0.4, engine_drafts=4))
    assert shared._value(0.1, 0.5) == (0, 0)
    assert shared._value(0.1, 0.95) == (0, 4)
    assert ctl.engine_drafts == 0 and ctl._value(0.1, 0.5) == (0, 1)  # deriving left the first as it was


def test_a_controller_built_with_a_plan_stops_its_gamma2_at_the_shared_engines_and_is_never_changed_after():
    from dataclasses import FrozenInstanceError

    from lrtune.policies.bandit import BanditController

    plan = Pricing(engine_drafts=6)
    ctl = BanditController(Bounds(gamma2_max=8), plan)
    assert ctl.engine_drafts == 6 and ctl.bounds.gamma2_max == 6
    assert BanditController(Bounds(gamma2_max=8)).bounds.gamma2_max == 8  # no shared engine: no cap
    assert ctl.derive(pricing=Pricing()).bounds.gamma2_max == 8  # derived from the bounds it was given
    with pytest.raises(FrozenInstanceError):
        plan.engine_drafts = 4
    for name in ("c1", "c2", "batch_cost", "engine_drafts"):
        with pytest.raises(AttributeError):
            setattr(ctl, name, 1)


def test_a_pricing_plan_is_validated_when_built():
    for bad in (
        {"c1": 0.0},
        {"c2": float("nan")},
        {"batch_cost": ()},
        {"batch_cost": (1.0, -1.0)},
        {"batch_cost": "1.0"},
        {"engine_drafts": -1},
        {"engine_drafts": 2.0},
        {"scoring_call": 1},
    ):
        with pytest.raises(ConfigError):
            Pricing(**bad)
    with pytest.raises(ConfigError, match="prefill.step_tokens"):
        Prefill(step_tokens=0.0)
    assert Pricing(batch_cost=[1, 1.5]).batch_cost == (1.0, 1.5)


def test_the_old_cost_keywords_still_price_a_controller_with_a_warning_naming_the_removal_version():
    from lrtune.policies.bandit import BanditController

    with pytest.warns(DeprecationWarning, match="0.3.0"):
        ctl = BanditController(c1=0.3, c2=0.2, batch_cost=[1.0, 1.2])
    assert ctl.pricing == Pricing(c1=0.3, c2=0.2, batch_cost=(1.0, 1.2))
    with pytest.raises(TypeError, match="c3"):
        BanditController(c3=0.3)


def test_the_bandit_runs_each_arm_as_the_round_kind_the_speedup_model_prices_higher():
    from lrtune.policies.bandit import BanditController
    from lrtune.speedup import h, h_score

    cheap = Prefill(overhead_tokens=1.0, per_token=0.02, step_tokens=40.0)
    b = (1.0, 1.4, 1.8, 2.2, 2.6, 3.0, 3.4)  # b(n) = b[n - 1]: a batch of rows is far from free (CPU)
    ctl = BanditController(
        Bounds(gamma1_max=4, gamma2_max=4, M=16),
        Pricing(c1=0.4, c2=0.4, batch_cost=b, prefill=cheap),
        round_kinds=("lr", "score"),
    )
    a1, a2 = 0.9, 0.8
    g1, g2 = ctl._value(a1, a2)
    assert ctl.round_kind() == "score" and g1 > 0
    assert h_score(g1, g2, a1, 0.4, ctl.prefill_cost(g1), a2, 0.4) > h(g1, g2, a1, 0.4, a2, 0.4, b)
    lr_only = ctl.derive(round_kinds=("lr",))  # LR only: never score
    lr_only._value(a1, a2)
    assert lr_only.round_kind() == "lr"
    assert ctl.prefill_cost(2) == pytest.approx((1.0 + 0.02 * 2 * 40) / 40)  # P(γ1) = (o + π·γ1·L) / L
    free = ctl.derive(pricing=Pricing(c1=0.4, c2=0.4, batch_cost=b, prefill=cheap, scoring_call=False))
    assert free.prefill_cost(2) == 0.0  # a verifier that reads no target score: no scoring call
    with pytest.raises(ConfigError, match="round kinds"):
        ctl.derive(round_kinds=("tree",))


def test_with_a_low_step_acceptance_the_bandit_falls_back_to_sd_alone_whatever_the_round_kinds():
    from lrtune.policies.bandit import BanditController

    ctl = BanditController(
        Bounds(gamma1_max=4, gamma2_max=4, M=16), Pricing(c1=0.4, c2=0.4), round_kinds=("lr", "score")
    )
    assert ctl._value(0.05, 0.8)[0] == 0


def test_bandit_pooled_starts_a_new_problem_from_the_shrunk_posterior_of_the_ones_before():
    from lrtune.policies import make_controller

    plain, pooled = make_controller("bandit"), make_controller("bandit-pooled")
    for ctl in (plain, pooled):
        ctl.choose(ProblemInfo("a"), ControlState(0, 0, 100))
        for _ in range(20):  # the verifier rejects every step of problem a
            ctl.update(RoundOutcome(gamma1=3, gamma2=0, verdicts=(False, False, False)))
        ctl.choose(ProblemInfo("b"), ControlState(0, 0, 100))
    assert plain.post == [1.0, 1.0, 1.0, 1.0]  # per problem: the flat prior again
    a1, b1 = pooled.post[:2]
    assert a1 + b1 == pytest.approx(16.0) and a1 / (a1 + b1) == pytest.approx(1 / 62)  # Beta(1, 61) shrunk to 16
    assert pooled.post[2:] == [1.0, 1.0]  # no SD evidence: α2 keeps its prior


def test_bandit_pooled_pools_across_the_copies_a_batched_decode_gives_prompts_in_flight():
    """decode_many gives each prompt in flight copy.copy(controller): a problem that starts in one
    copy begins from the posterior another copy's rounds left."""
    import copy

    from lrtune.policies import make_controller

    shared = make_controller("bandit-pooled")
    first, second = copy.copy(shared), copy.copy(shared)
    first.choose(ProblemInfo("a"), ControlState(0, 0, 100))
    second.choose(ProblemInfo("b"), ControlState(0, 0, 100))
    for _ in range(20):  # problem a: every step rejected
        first.update(RoundOutcome(gamma1=3, gamma2=0, verdicts=(False, False, False)))
    second.choose(ProblemInfo("c"), ControlState(0, 0, 100))  # a new problem in the other copy
    a1, b1 = second.post[:2]
    assert a1 / (a1 + b1) == pytest.approx(1 / 62)  # problem a's Beta(1, 61), shrunk to 16
    third = copy.copy(shared)
    third.choose(ProblemInfo("d"), ControlState(0, 0, 100))
    assert third.post[:2] == second.post[:2]


def test_a_profile_whose_costs_cannot_price_a_round_is_refused_naming_the_file(tmp_path):
    import json

    from lrtune.pricing import plan

    bad = tmp_path / "profile.json"
    bad.write_text(json.dumps({"c1": -0.3, "c2": 0.25, "batch_cost": [1.0]}))
    with pytest.raises(ConfigError, match=r"^--profile .*profile.json: not an lrtune profile \(c1 must be"):
        plan(profile=str(bad))
    bad.write_text("[]")
    with pytest.raises(ConfigError, match="not an lrtune profile"):
        plan(profile=str(bad))


# A CPU-like plan where an LR round needs α1 >= ~0.93 to beat SD alone (α2 = 0.5).
_CPU_LIKE = dict(c1=0.5, c2=0.1, batch_cost=[1.0, 1.2, 1.4, 1.6, 1.8])


def test_an_arm_the_verifiers_calibration_rules_out_is_never_tried():
    """With α1_max below what any LR arm needs, every round is SD alone from the first step and
    runs to the end of the answer; with no calibration (α1_max = 1) the flat prior explores LR
    (here with no exploration budget, which would first want an SD rate measured)."""
    capped = BanditController(Bounds(0, 4, 0, 4), Pricing(**_CPU_LIKE, alpha1_max=0.7), seed=1)
    picks = [capped.choose(P, ControlState(r, r * 10, 500)) for r in range(40)]
    assert all(g1 == 0 for g1, _ in picks) and capped.horizon() is None
    free = BanditController(Bounds(0, 4, 0, 4), Pricing(**_CPU_LIKE), seed=1, explore_budget=None)
    assert any(free.choose(P, ControlState(r, r * 10, 500))[0] > 0 for r in range(40))


def test_rounds_seen_above_the_calibrations_ceiling_reopen_lr():
    """The optimistic α1 is min(q95, max(α1_max, posterior mean)): a verifier seen accepting
    more than its calibration admitted is believed."""
    ctl = BanditController(Bounds(0, 4, 0, 4), Pricing(**_CPU_LIKE, alpha1_max=0.7), seed=1)
    ctl.choose(P, ControlState(0, 0, 500))
    ctl.post[0] += 60  # 60 accepted steps, none rejected
    assert ctl.optimistic_alpha1() > 0.9 and ctl.horizon() is not None


def test_the_plan_takes_the_ceiling_from_a_checkpoints_test_acceptance_interval():
    from lrtune.pricing import admitted_acceptance, plan

    class Student:
        threshold = 0.4
        meta = {"threshold": 0.4, "metrics": {"test": {"acceptance": 0.6, "n": 200, "acceptance_ci95": [0.53, 0.67]}}}

    assert admitted_acceptance(Student()) == 0.67 and plan(verifier=Student()).alpha1_max == 0.67
    moved = Student()
    moved.threshold = 0.2  # run at another threshold than it was calibrated at: the card says nothing
    assert admitted_acceptance(moved) == 1.0
    assert admitted_acceptance(object()) == 1.0 and plan().alpha1_max == 1.0
    with pytest.raises(ConfigError, match="alpha1_max"):
        Pricing(alpha1_max=1.5)


def _rated(ctl: BanditController, g1: int, speed: float, rounds: int) -> None:
    """``rounds`` rounds of (γ1, 4) that each commit 64 tokens at ``speed`` times the model's
    rate for that arm at the flat prior's means (16 tokens/s per unit of modelled speedup); no
    verdicts or SD passes, so the posterior and the modelled h stay the prior's."""
    h_arm = ctl.pricing.best(g1, 4, 0.5, 0.5, ctl.round_kinds)[0]
    for _ in range(rounds):
        ctl.update(RoundOutcome(gamma1=g1, gamma2=4, committed_tokens=64, target_s=64 / (16 * h_arm * speed)))


PLAN = Pricing(c1=0.1, c2=0.1, batch_cost=(1.0, 1.02, 1.04, 1.06))


def test_lr_rounds_measured_slower_than_the_model_says_stop_lr_in_every_copy():
    """ρ = Q_LR / Q_SD: LR rounds at a fifth of their modelled rate, next to SD rounds at theirs."""
    import copy

    ctl = BanditController(Bounds(gamma1_max=3, gamma2_max=4, M=12), PLAN)
    ctl.choose(ProblemInfo("a"), ControlState(0, 0, 1000))
    assert ctl.horizon() is not None  # a flat prior: the model lets LR win
    _rated(ctl, 0, 1.0, 1)  # the first round (prefill) is no rate
    _rated(ctl, 0, 1.0, 2)
    _rated(ctl, 3, 0.2, 2)  # only 2 of the k = 3 LR rounds
    assert ctl.lr_correction() == 1.0 and ctl.horizon() is not None
    _rated(ctl, 3, 0.2, 1)
    assert ctl.lr_correction() == pytest.approx(0.2)
    assert ctl.horizon() is None  # SD to the end of the answer
    assert ctl.choose(ProblemInfo("a"), ControlState(5, 600, 400))[0] == 0
    other = copy.copy(ctl)  # another prompt in flight, a later problem: the same measurements
    assert other.choose(ProblemInfo("b"), ControlState(0, 0, 1000))[0] == 0 and other.horizon() is None


def _closed_guard() -> BanditController:
    """A guard closed by 3 LR rounds at a fifth of their modelled rate, the run at 384 tokens."""
    ctl = BanditController(Bounds(gamma1_max=3, gamma2_max=4, M=12), PLAN)
    ctl.choose(ProblemInfo("a"), ControlState(0, 0, 1000))
    _rated(ctl, 0, 1.0, 3)
    _rated(ctl, 3, 0.2, 3)
    assert ctl.horizon() is None and ctl.rates.tokens() == 384
    return ctl


def test_a_closed_guard_re_tests_when_the_runs_tokens_double_and_waits_twice_as_long_after():
    ctl = _closed_guard()  # found closed at N = 384 tokens: the re-test is due at 768
    _rated(ctl, 0, 1.0, 5)  # 704 tokens
    assert ctl.horizon() is None and ctl.measured()["guard_retests"] == 0
    _rated(ctl, 0, 1.0, 1)  # 768
    assert ctl.horizon() is not None and ctl.measured()["guard_retests"] == 1
    _rated(ctl, 3, 0.2, 2)
    assert ctl.horizon() is not None  # a re-test lasts rate_rounds (3) LR rounds
    _rated(ctl, 3, 0.2, 1)  # still slow: closed again at 960 tokens, the next re-test at 1920
    assert ctl.horizon() is None
    _rated(ctl, 0, 1.0, 14)  # 1856
    assert ctl.horizon() is None
    _rated(ctl, 0, 1.0, 1)  # 1920
    assert ctl.horizon() is not None and ctl.measured()["guard_retests"] == 2


def test_lr_rounds_a_re_test_measures_as_the_model_says_reopen_lr():
    ctl = _closed_guard()
    _rated(ctl, 0, 1.0, 6)
    assert ctl.horizon() is not None  # the re-test
    _rated(ctl, 3, 1.0, 30)
    assert ctl.horizon() is not None and ctl.measured()["lr_open"] and ctl.rates.retest_at is None


def test_lr_rounds_that_run_as_the_model_says_keep_lr_open_whatever_arm_they_ran():
    ctl = BanditController(Bounds(gamma1_max=3, gamma2_max=4, M=12), PLAN)
    ctl.choose(ProblemInfo("a"), ControlState(0, 0, 1000))
    _rated(ctl, 0, 1.0, 3)
    for g1 in (1, 3, 2, 1):  # a poor arm measured slow, as the model says it is, is no evidence against LR
        _rated(ctl, g1, 1.0, 1)
    assert ctl.lr_correction() == pytest.approx(1.0) and ctl.horizon() is not None


def test_the_first_round_of_each_problem_is_left_out_of_the_measured_rates():
    ctl = BanditController(Bounds(gamma1_max=3, gamma2_max=4, M=12), PLAN)
    for problem in "abcd":
        ctl.choose(ProblemInfo(problem), ControlState(0, 0, 1000))
        _rated(ctl, 3, 0.01, 1)  # a slow first LR round (the prompt's prefill) in every problem
        _rated(ctl, 0, 1.0, 1)
    assert ctl.rates.rounds == {"lr": 0, "sd": 4} and ctl.lr_correction() == 1.0


def test_rate_rounds_zero_turns_the_measured_rate_guard_off_and_a_bad_value_is_refused():
    ctl = BanditController(Bounds(gamma1_max=3, gamma2_max=4, M=12), PLAN, rate_rounds=0)
    ctl.choose(ProblemInfo("a"), ControlState(0, 0, 1000))
    _rated(ctl, 0, 1.0, 3)
    _rated(ctl, 3, 0.01, 5)
    assert ctl.lr_correction() == 1.0 and ctl.horizon() is not None
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ConfigError, match="rate_rounds"):
            BanditController(rate_rounds=bad)


def test_rhos_upper_bound_is_the_ratio_estimator_raised_by_z_standard_errors():
    import math

    from lrtune.policies.measured import MeasuredRates

    rates = MeasuredRates()
    lr = [(40, 2.0, 1.5), (120, 5.0, 1.2), (80, 3.0, 1.4), (10, 2.5, 1.5)]  # (tokens, seconds, modelled h)
    for n, t, h_r in lr:
        rates.add(True, n, t, h_r)
    rates.add(False, 64, 4.0, 1.6)
    n, m = [r[0] for r in lr], [r[1] * r[2] for r in lr]
    q = sum(n) / sum(m)
    se = math.sqrt(sum((a - q * b) ** 2 for a, b in zip(n, m)) / 12) / (sum(m) / 4)
    q_sd = 64 / (4.0 * 1.6)
    assert rates.rho(3) == pytest.approx(q / q_sd)
    assert rates.rho(3, z=2.0) == pytest.approx((q + 2 * se) / q_sd)
    assert rates.rho(5) == 1.0 and rates.rate("lr") == pytest.approx(250 / 12.5)


def test_lr_rounds_that_ran_as_modelled_are_ruled_out_when_the_runs_acceptance_cannot_beat_sd():
    """ρ = 1 (LR cost what the model said) but the run's verdicts put α1 where SD wins: the guard
    closes LR for the run, though each new problem's own prior would still explore it."""
    cpu = Pricing(c1=0.44, c2=0.44, batch_cost=(1.0, 1.05, 1.3, 1.33, 1.42, 1.48, 1.45))
    low, high = (BanditController(Bounds(gamma1_max=6, gamma2_max=4, M=24), cpu, prior=(1, 1, 30, 3)) for _ in "ab")
    for ctl, verdicts in ((low, (True, False, False)), (high, (True, True, True))):
        ctl.choose(ProblemInfo("a"), ControlState(0, 0, 1000))
        _rated(ctl, 0, 1.0, 2)
        for _ in range(10):  # rounds that judge steps but commit at the model's rate
            ctl.update(RoundOutcome(gamma1=3, gamma2=4, verdicts=verdicts, committed_tokens=64, target_s=1.0))
    assert low.rates.alpha1_quantile(0.8) < 0.45 and not low._lr_can_win() and low.horizon() is None
    assert high.rates.alpha1_quantile(0.8) > 0.95 and high._lr_can_win()
    fresh = copy.copy(low)
    fresh.choose(ProblemInfo("b"), ControlState(0, 0, 1000))  # a new problem, its flat α1 prior
    assert fresh.optimistic_alpha1() > 0.9 and fresh.horizon() is None


def test_once_lr_is_ruled_out_sd_is_chosen_at_the_runs_alpha2_not_a_new_problems_prior():
    """A new problem's posterior starts from the prior (α2 = 0.5, where a short γ2 wins); the SD
    round then runs to the end of the answer, so its γ2 comes from the run's SD passes."""
    ctl = BanditController(Bounds(gamma1_max=3, gamma2_max=8, M=24), PLAN)
    ctl.choose(ProblemInfo("a"), ControlState(0, 0, 1000))
    _rated(ctl, 0, 1.0, 3)
    _rated(ctl, 3, 0.1, 3)  # LR ruled out
    for _ in range(20):  # SD passes that accept 7 of 8 draft tokens on average
        ctl.update(RoundOutcome(gamma1=0, gamma2=8, sd=SDCounters(10, 80, 70, [10] * 7 + [0], 10)))
    assert not ctl._lr_can_win()
    g2 = ctl.choose(ProblemInfo("b"), ControlState(0, 0, 1000))[1]
    assert ctl.post[2:] == [1.0, 1.0] and g2 == ctl._value(0.0, 0.87, [(0, k) for k in range(9)])[1] and g2 >= 6


def _sd_round(ctl: BanditController, tokens: int = 100, seconds: float = 10.0) -> None:
    ctl.update(RoundOutcome(gamma1=0, gamma2=4, committed_tokens=tokens, target_s=seconds))


def test_the_exploration_budget_runs_sd_until_the_chosen_arms_worst_case_fits_in_epsilon_of_the_run():
    """slack = (1 + ε)·N/R − T: a run of SD rounds at R = 10 tokens/s gains ε·T; an LR round
    starts only once the slack covers the worst case of the arm chosen, and SD runs until then."""
    ctl = BanditController(Bounds(gamma1_max=3, gamma2_max=4, M=12), PLAN, explore_budget=0.05, mode="ucb")
    assert ctl.choose(ProblemInfo("a"), ControlState(0, 0, 10**6))[0] == 0 and ctl.horizon() == 64  # no rate yet
    _sd_round(ctl)
    assert ctl.choose(ProblemInfo("a"), ControlState(1, 100, 10**6))[0] == 0
    wanted = ctl._wanted
    assert wanted[0] > 0  # the LR arm the budget deferred
    w = ctl._worst_lr_round(wanted)  # L·g / (R·h0): 64 tokens at the arm's α1 = 0 speed
    m2 = ctl._sd_alpha2()  # no SD pass measured: the posterior's 95% quantile
    g = max(ctl._h(0, g2, 0.0, m2) for g2 in range(5))
    assert w == pytest.approx(64 * g / (10 * ctl._h(*wanted, 0.0, m2)))
    slack = ctl.rates.budget_slack(0.05)
    assert slack == pytest.approx(0.05 * 10.0)
    assert ctl.horizon() == math.ceil((w - slack) * 10 / 0.05)  # SD tokens until the slack covers w
    for r in range(2, 200):  # each 100-token SD round adds 0.05 · 10 s of slack
        _sd_round(ctl)
        arm = ctl.choose(ProblemInfo("a"), ControlState(r, 100 * r, 10**6))
        if arm[0] > 0:
            break
        assert ctl.rates.budget_slack(0.05) < ctl._worst_lr_round(ctl._wanted)  # deferred only while short
    assert arm[0] > 0 and ctl._wanted is None
    assert ctl.rates.budget_slack(0.05) >= ctl._worst_lr_round(arm) >= w


def test_the_worst_case_is_the_chosen_arms_slowed_by_measured_rho_and_at_least_the_longest_lr_round():
    ctl = BanditController(Bounds(gamma1_max=3, gamma2_max=4, M=12), PLAN, explore_budget=0.05)
    ctl.choose(ProblemInfo("a"), ControlState(0, 0, 10**6))
    _sd_round(ctl)
    small, big = ctl._worst_lr_round((1, 4)), ctl._worst_lr_round((3, 4))
    assert small < big  # a deeper arm drafts and verifies more for the one step it commits at α1 = 0
    _rated(ctl, 0, 1.0, 3)
    _rated(ctl, 3, 0.5, 3)  # LR rounds at half their modelled rate: ρ = 0.5
    rho = ctl.lr_correction()
    assert rho == pytest.approx(0.5, rel=1e-6)
    r, m2 = ctl.rates.sd_rate_with_prefills(), ctl._sd_alpha2()
    g = max(ctl._h(0, g2, 0.0, m2) for g2 in range(5))
    modelled = 64 * g / (r * ctl._h(1, 4, 0.0, m2))
    assert ctl._worst_lr_round((1, 4)) == pytest.approx(max(modelled / rho, ctl.rates.longest_lr))
    assert modelled / rho > ctl.rates.longest_lr  # here the model, slowed by ρ, is the worst case
    ctl.update(RoundOutcome(gamma1=1, gamma2=4, committed_tokens=10, target_s=1000.0))
    assert ctl._worst_lr_round((1, 4)) == 1000.0


def test_lr_rounds_that_lose_to_sd_spend_the_budget_and_rounds_that_win_add_to_it():
    ctl = BanditController(Bounds(gamma1_max=3, gamma2_max=4, M=12), PLAN, explore_budget=0.05)
    ctl.choose(ProblemInfo("a"), ControlState(0, 0, 10**6))
    for _ in range(20):
        _sd_round(ctl)  # T = 200 s, slack 10 s
    ctl.update(RoundOutcome(gamma1=3, gamma2=4, verdicts=(False,), committed_tokens=40, target_s=8.0))
    assert ctl.rates.budget_slack(0.05) == pytest.approx(1.05 * 2040 / 10 - 208)  # 4 s of the LR round lost
    assert ctl._worst_lr_round((3, 4)) >= 8.0 and not ctl._budget_allows((3, 4))
    ctl.update(RoundOutcome(gamma1=3, gamma2=4, verdicts=(True,) * 3, committed_tokens=400, target_s=8.0))
    assert ctl.rates.budget_slack(0.05) == pytest.approx(1.05 * 2440 / 10 - 216)  # 32 s gained
    assert ctl._budget_allows((3, 4))


def test_no_budget_is_judged_without_timings_and_a_bad_budget_is_refused():
    ctl = BanditController(Bounds(gamma1_max=3, gamma2_max=4, M=12), PLAN)
    ctl.choose(ProblemInfo("a"), ControlState(0, 0, 1000))
    assert not ctl._budget_allows((1, 4))  # nothing measured: SD first
    ctl.update(RoundOutcome(gamma1=0, gamma2=4, committed_tokens=64))  # a round without seconds
    assert ctl._budget_allows((1, 4)) and BanditController(explore_budget=None)._budget_allows((1, 4))
    for bad in (-0.1, 1.5, True, "0.02"):
        with pytest.raises(ConfigError, match="explore_budget"):
            BanditController(explore_budget=bad)


def test_sd_alone_before_any_sd_pass_is_measured_is_optimistic_about_alpha2_so_it_never_sticks_to_the_target():
    """On a profile where SD at the prior's mean α2 (0.5) is slower than the target alone, an
    SD-alone choice (LR ruled out, or deferred by the budget) would pick γ2 = 0, measure no SD
    pass and keep the target for the run; before any pass it prices SD at the 95% quantile."""
    slow_sd = Pricing(c1=0.8, c2=0.8, batch_cost=(1.0, 1.05, 1.1, 1.15, 1.2), alpha1_max=0.5)
    ctl = BanditController(Bounds(gamma1_max=3, gamma2_max=4, M=12), slow_sd)
    assert ctl._value(0.0, 0.5, [(0, k) for k in range(5)]) == (0, 0)  # at the mean: the target alone
    first = ctl.choose(ProblemInfo("a"), ControlState(0, 0, 1000))
    assert first[0] == 0 and first[1] > 0
    for _ in range(10):  # the run's SD passes accept 1 of 4 tokens: now SD loses, and the run knows it
        ctl.update(RoundOutcome(gamma1=0, gamma2=4, sd=SDCounters(10, 40, 10, [10, 0, 0, 0], 10)))
    assert ctl.choose(ProblemInfo("b"), ControlState(0, 0, 1000)) == (0, 0)


def test_an_sd_round_the_controller_chose_itself_runs_until_the_budget_could_admit_the_cheapest_lr_arm():
    """No LR round can start before the slack covers the cheapest arm's worst case, so an SD
    round ends no sooner (one engine call instead of 64·2^k-token ones)."""
    ctl = BanditController(Bounds(gamma1_max=3, gamma2_max=4, M=12), PLAN, explore_budget=0.05)
    ctl.choose(ProblemInfo("a"), ControlState(0, 0, 10**6))
    _sd_round(ctl)
    ctl._wanted = None  # as after a Thompson draw that chose a γ1 = 0 arm
    cheap = ctl._cheapest_lr_arm()
    assert all(ctl._worst_lr_round(cheap) <= ctl._worst_lr_round(arm) for arm in ctl._arms if arm[0] > 0)
    wait = ctl._budget_wait(cheap)
    assert wait > 128 and ctl.horizon() == wait
    for _ in range(100):
        _sd_round(ctl)  # slack 0.5 s per round: now it covers every arm
    assert ctl._budget_wait(cheap) is None and ctl.horizon() == 64 * 2**20
