"""The controller simulation (benchmarks/controller_sim.py): its rounds are the speedup model's,
report what the decoder reports, and the same seed gives the same result."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.controller_sim import (
    Scenario,
    build_bandit,
    decode_all,
    decode_problem,
    gpu_pricing,
    oracle_arm,
    run_scenario,
)
from lrtune.control import Bounds
from lrtune.policies import FixedController
from lrtune.pricing import Pricing

CPU = Pricing(c1=0.335, c2=0.335, batch_cost=(1.0, 1.07, 1.08, 1.21, 1.28, 1.28, 1.40))


def _scenario(pricing, a1, a2, steps):
    return Scenario("test", pricing, a1, a2, steps, "test", "test")


@pytest.mark.parametrize(
    "pricing, arm, a1, a2",
    [
        (gpu_pricing(0.05), (2, 8), 0.6, 0.8),
        (CPU, (1, 4), 0.74, 0.86),
        (CPU, (0, 4), 0.55, 0.86),
        (CPU, (3, 0), 0.6, 0.0),
    ],
)
def test_a_fixed_arms_simulated_speedup_is_the_closed_form_speedup(pricing, arm, a1, a2):
    sc = _scenario(pricing, a1, a2, 400)
    runs = decode_all(lambda: FixedController(*arm, Bounds()), sc, 0, 12, seed=3)
    sim = sum(r.steps for r in runs) / sum(r.time for r in runs)
    assert sim == pytest.approx(pricing.speedup("lr", *arm, a1, a2), rel=0.03)


def test_the_oracle_arm_is_the_arm_the_model_prices_highest():
    arms = Bounds().arms()
    best = oracle_arm(CPU, arms, 0.74, 0.86)
    assert all(CPU.speedup("lr", *best, 0.74, 0.86) >= CPU.speedup("lr", *a, 0.74, 0.86) for a in arms)


class _Scripted:
    """A controller that plays a fixed list of arms and records what update receives."""

    bounds = Bounds()

    def __init__(self, arms, horizon=100):
        self.arms, self.h, self.outcomes = arms, horizon, []

    def choose(self, problem, state):
        return self.arms[state.round % len(self.arms)]

    def horizon(self):
        return self.h

    def update(self, o):
        self.outcomes.append(o)


def test_each_round_reports_the_verdicts_commits_and_sd_counters_the_decoder_reports():
    L = 40
    ctl = _Scripted([(3, 4), (0, 4), (2, 0)], horizon=100)
    run = decode_problem(ctl, "p", _scenario(CPU, 0.6, 0.8, 300), np.random.default_rng(0), L=L)
    acc = stopped = 0
    for o in ctl.outcomes[:-1]:  # the last round is cut at the budget
        assert len(o.verdicts) == o.gamma1
        j = next((i for i, v in enumerate(o.verdicts) if not v), o.gamma1)
        assert o.accepted_steps == j
        assert o.committed_tokens == ((j + 1) * L if o.gamma1 else 100)  # a γ1 = 0 round runs the horizon
        assert o.extra["kind"] == ("lr" if o.gamma1 else "sd")
        assert o.sd.drafted_tokens == o.sd.drafts * o.gamma2
        if o.gamma2 == 0:
            assert o.sd.drafts == 0
        if o.gamma1 and o.gamma2:  # every target row's passes, each of γ1 + 1 rows at least L / (γ2 + 1)
            assert o.sd.drafts >= o.gamma1 * L / (o.gamma2 + 1)
        acc, stopped = acc + o.token_successes[0], stopped + o.token_successes[1]
    assert acc / (acc + stopped) == pytest.approx(0.8, abs=0.02)  # the counters' α2 is the true one
    assert run.steps == 300


def test_the_same_seed_gives_the_same_result_and_another_seed_another():
    sc = _scenario(gpu_pricing(0.05), 0.6, 0.8, 20)
    a = run_scenario(sc, 0, 4, seed=1, boot=50)
    assert a == run_scenario(sc, 0, 4, seed=1, boot=50)
    assert a["controller"] != run_scenario(sc, 0, 4, seed=2, boot=50)["controller"]


def test_the_simulated_controller_is_the_one_adaptive_decoding_builds():
    ctl = build_bandit(gpu_pricing(0.05))
    assert type(ctl).__name__ == "BanditController"
    assert ctl.bounds == Bounds() and ctl.round_kinds == ("lr",) and not ctl.pooled
