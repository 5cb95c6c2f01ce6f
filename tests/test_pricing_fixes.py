"""Controllers, training, the oracle and the report price (γ1, γ2) as the decoder runs them."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from lrtune.pricing import Pricing
from lrtune.api import build_controller
from lrtune.control import Bounds, ControlState, ProblemInfo, RoundOutcome
from lrtune.decoder import DecodeConfig
from lrtune.errors import ConfigError
from lrtune.speedup import best_gammas, f_sync, g, h
from lrtune.speedup_async import S1, h_async, speedup_async
from lrtune.policies.bandit import BanditController
from lrtune.policies.grid_ucb import GridUCBController

C1, C2 = 0.338, 0.220  # benchmarks/engine_costs/profile_sd.json
ENGINE = Bounds(gamma1_min=0, gamma1_max=6, gamma2_min=0, gamma2_max=4, M=24.0)


def _run_like_the_decoder(ctl, cfg: DecodeConfig, rounds: int, alpha1: float = 0.7, seed: int = 1) -> list:
    """Drive ``ctl`` as LookaheadDecoder does: the round runs γ2 only with SD and reports it."""
    rng, chosen = random.Random(seed), []
    for rnd in range(rounds):
        g1, g2 = ctl.choose(ProblemInfo("p"), ControlState(rnd, 0, 10**6))
        assert ctl.bounds.allows(g1, g2)
        chosen.append((g1, g2))
        ctl.update(
            RoundOutcome(
                gamma1=g1,
                gamma2=g2 if cfg.uses_sd else 0,
                verdicts=tuple(rng.random() < alpha1 for _ in range(g1)),
                committed_tokens=20 * (g1 + 1),
                draft_s=0.1 * g1,
                target_s=1.0,
            )
        )
    return chosen


# ---- defect 3: γ2 > 0 arms under a method without token-level SD -------------------------
@pytest.mark.parametrize("policy", ["fixed", "heuristic", "bandit", "grid-ucb"])
def test_build_controller_pins_gamma2_to_zero_when_the_method_has_no_sd(policy):
    lr = build_controller(policy, DecodeConfig(method="lr", gamma1=3, gamma2=4))
    assert lr.bounds.gamma2_max == 0
    assert lr.choose(ProblemInfo("p"), ControlState(0, 0, 100))[1] == 0
    both = build_controller(policy, DecodeConfig(method="lr+sd", gamma1=3, gamma2=4))
    assert both.bounds == Bounds.covering(3, 4)


def test_grid_ucb_driving_lr_tries_every_arm_once_then_never_loops_on_one():
    cfg = DecodeConfig(method="lr", gamma1=3, gamma2=4)
    ctl = build_controller("grid-ucb", cfg)
    chosen = _run_like_the_decoder(ctl, cfg, 50)
    assert set(chosen[: len(ctl.arms)]) == set(ctl.arms)  # untried arms first, each exactly once
    assert sum(ctl.pulls.values()) == 50


def test_grid_ucb_counts_the_arm_it_chose_when_the_decoder_drops_gamma2():
    """Bounds that still allow γ2 > 0 (a caller's own) on a decoder without SD: every round
    counts for the chosen arm, so every arm is tried once in the first len(arms) rounds."""
    ctl = GridUCBController(Bounds.covering(3, 4))
    chosen = _run_like_the_decoder(ctl, DecodeConfig(method="lr", gamma1=3, gamma2=4), len(ctl.arms) + 5)
    assert len(set(chosen[: len(ctl.arms)])) == len(ctl.arms)
    assert sum(ctl.pulls.values()) == len(ctl.arms) + 5 and all(n >= 1 for n in ctl.pulls.values())


def test_grid_ucb_counts_a_reported_arm_without_a_choice_and_ignores_one_off_the_grid():
    ctl = GridUCBController(Bounds(gamma1_max=2, gamma2_max=1, M=2))
    ctl.update(RoundOutcome(gamma1=1, gamma2=1, committed_tokens=10, target_s=1.0))
    ctl.update(RoundOutcome(gamma1=5, gamma2=0, committed_tokens=10, target_s=1.0))
    assert ctl.pulls[(1, 1)] == 1 and sum(ctl.pulls.values()) == 1


def test_bandit_driving_lr_chooses_only_gamma2_zero_arms():
    cfg = DecodeConfig(method="lr", gamma1=3, gamma2=4)
    ctl = build_controller("bandit", cfg)
    assert ctl.derive().bounds.gamma2_max == 0  # derived copies keep the pin
    chosen = _run_like_the_decoder(ctl.derive(explore_budget=None), cfg, 200)  # explores from round 1
    assert all(g2 == 0 for _, g2 in chosen)
    assert sum(g1 == 0 for g1, _ in chosen) <= 10  # at α1 = 0.7 LR wins: few bare-target rounds


def test_learned_controller_directory_driving_lr_pins_gamma2_to_zero(tmp_path):
    from lrtune.policies.learned import AlphaPredictor, ProblemFeaturizer, save

    feats = ProblemFeaturizer(["gsm"], encoder=None)
    X = feats.transform([ProblemInfo("a", "x" * 10, task="gsm"), ProblemInfo("b", "x" * 1000, task="gsm")])
    pred = AlphaPredictor(alpha=0.0).fit(X, np.array([[0.7, 0.9], [0.6, 0.9]]))
    save(
        tmp_path,
        pred,
        feats,
        bounds=Bounds(gamma1_max=6, gamma2_max=8, M=24),
        profile={"c1": 0.3, "c2": 0.2, "batch_cost": None},
        prior_strength=8.0,
        metrics={},
        data={},
    )
    ctl = build_controller(str(tmp_path), DecodeConfig(method="lr", gamma1=3, gamma2=4))
    assert (
        ctl.bounds.gamma2_max == 0
        and ctl.choose(ProblemInfo("p", "x" * 50, task="gsm"), ControlState(0, 0, 100))[1] == 0
    )
    assert build_controller(str(tmp_path), DecodeConfig(method="lr+sd")).bounds.gamma2_max == 8


# ---- defect 4: training and the oracle price γ2 on the engine, as run time does ----------
def test_best_gammas_with_the_engines_drafts_picks_what_the_run_time_controller_picks():
    ctl = BanditController(ENGINE, Pricing(c1=C1, c2=C2, engine_drafts=4))  # the plan on a shared SD engine
    for a1 in np.linspace(0.05, 0.95, 10):
        for a2 in np.linspace(0.05, 0.95, 10):
            best = best_gammas(a1, C1, a2, C2, ENGINE.M, ENGINE.gamma1_max, ENGINE.gamma2_max, None, 4)
            assert (best.gamma1, best.gamma2) == ctl._value(a1, a2)
            assert best.h == pytest.approx(h(best.gamma1, best.gamma2, a1, C1, a2, C2, None, 4))


def test_training_prices_gamma2_on_an_engine_drafting_gamma2_max():
    """α1 = 0.05, α2 = 0.3: on an engine drafting 4 tokens per pass γ2 = 1 pays for 4
    (h = 0.69 < 1), so neither the learned choice nor the oracle is worth more than plain decoding."""
    from lrtune.train.controller import TrainControllerConfig, cross_validate, training_pricing

    cfg = TrainControllerConfig(gamma1_max=6, gamma2_max=4, folds=2)
    prof = {"c1": C1, "c2": C2, "batch_cost": None}
    assert (
        training_pricing(prof, ENGINE).engine_drafts == 4
        and training_pricing(prof, Bounds(gamma2_max=0)).engine_drafts == 0
    )
    X = np.random.default_rng(0).normal(size=(8, 2))
    Y = np.tile([0.05, 0.3], (8, 1))
    cv = cross_validate(X, Y, 1.0, cfg, ENGINE, {"c1": C1, "c2": C2, "batch_cost": None})
    for k in ("model_speedup_learned", "model_speedup_best_fixed", "model_speedup_oracle"):
        assert cv[k] == pytest.approx(1.0), k


@pytest.mark.parametrize("engine_drafts, expected", [(4, "target"), (0, "sd")])
def test_oracle_prices_gamma2_on_the_engine_of_its_controller(engine_drafts, expected):
    from lrtune.eval.evaluate import EvalConfig, parse_method
    from lrtune.eval.loops import _controlled

    ctl = BanditController(ENGINE, Pricing(c1=C1, c2=C2, engine_drafts=engine_drafts))  # 0: each γ2 drafts its own
    dcfg, _ = _controlled(ctl, EvalConfig(), parse_method("oracle", 3, 4), None, None, {"alpha1": 0.05, "alpha2": 0.3})
    assert dcfg.method == expected  # (0, 0) plain target on the shared engine, else (0, 1) SD


def test_oracle_without_a_priced_controller_prices_on_the_runs_shared_sd_engine():
    """No controller: default c1 = c2 = 0.4 on the run's shared vLLM SD engine (drafting
    --gamma2 = 4): at α1 = 0.6, α2 = 0.5, γ2 = 1 would pay for 4 drafts, so LR alone wins."""
    from lrtune.eval.evaluate import EvalConfig, parse_method
    from lrtune.eval.loops import _controlled, run_pricing

    cfg = EvalConfig()
    assert cfg.decode.gamma2 == 4 and cfg.models.backend == "vllm" and cfg.models.engine.shared_engine
    spec = parse_method("oracle", 3, 4)
    plan = run_pricing(cfg, [spec, parse_method("lr+sd", 3, 4)])
    assert plan.engine_drafts == 4  # the shared engine drafts --gamma2, decided by the rule the decoder uses
    dcfg, _ = _controlled(None, cfg, spec, None, None, {"alpha1": 0.6, "alpha2": 0.5}, plan)
    assert (dcfg.method, dcfg.gamma1) == ("lr", 1)  # each γ2 drafting its own: (1, 1), lr+sd


# ---- defects 6 and 7: the report's predictions ------------------------------------------
def _record(problem, method, wall, **stats):
    from lrtune.stats import DecodeStats

    s = DecodeStats(wall_s=wall, generated_tokens=100, **stats)
    return {
        "problem": problem,
        "method": method,
        "wall_s": wall,
        "correct": True,
        "finish": "eos",
        "stats": s.to_dict(),
    }


@pytest.fixture
def report(tmp_path, monkeypatch):
    """write_reports over synthetic records: α1 = 0.6, c = 0.3, b measured at n = 1, 2, 4."""
    from lrtune.eval import evaluate
    from lrtune.eval.evaluate import EvalConfig, EvalOptions, parse_methods

    monkeypatch.setattr(evaluate, "machine_info", lambda: {})
    cfg = EvalConfig(options=EvalOptions(plots=False, out=str(tmp_path)))
    specs = parse_methods("lr,lr/async,lr/w=2", None, 8, 4)
    lr = dict(draft_s=3.0, draft_step_tokens=100, drafted_by_pos=[10], accepted_by_pos=[6])
    records = [_record("p0", "target", 10.0)] + [_record("p0", s.label, 5.0, **lr) for s in specs[1:]]
    curve = {1: 1.0, 2: 1.5, 4: 2.0}
    data = evaluate.write_reports(cfg, specs, [SimpleNamespace(id="p0", meta={})], records, tmp_path, {}, curve)
    assert data["c_measured"] == pytest.approx(0.3)
    return data["methods"]


def test_report_prices_unmeasured_batch_sizes_by_interpolation_and_the_last_measured(report):
    b = [1.0, 1.5, 1.75, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]  # b(3) between b(2), b(4); b(5..9) = b(4)
    assert report["lr"]["predicted_speedup"] == pytest.approx(f_sync(0.6, 0.3, 8, b))


def test_report_predicts_async_rows_with_the_async_model(report):
    assert report["lr/async"]["predicted_speedup"] == pytest.approx(speedup_async(0.6, 0.3, 8))


def test_report_gives_no_prediction_for_several_branches(report):
    assert report["lr/w=2"]["predicted_speedup"] is None and report["lr/w=2"]["measured_over_predicted"] is None


def test_h_async_composes_sd_inside_async_lr_target_steps():
    for a1, c1, g1, a2, c2, g2 in [(0.6, 0.3, 3, 0.8, 0.2, 4), (0.9, 0.5, 1, 0.5, 0.4, 2), (0.3, 0.1, 8, 0.7, 0.3, 1)]:
        gg = g(a2, c2, g2)
        assert h_async(g1, g2, a1, c1, a2, c2) == pytest.approx(gg * speedup_async(a1, c1 * gg, g1))
        assert h_async(g1, 0, a1, c1, a2, c2) == pytest.approx(speedup_async(a1, c1, g1))
        assert h_async(0, g2, a1, c1, a2, c2) == pytest.approx(gg)
        assert h_async(g1, g2, a1, c1, a2, c2, drafted=8) == pytest.approx(
            g(a2, c2, g2, 8) * speedup_async(a1, c1 * g(a2, c2, g2, 8), g1)
        )


# ---- S1's domain ------------------------------------------------------------------------
@pytest.mark.parametrize("c", [1.5, 2.0, 0.0, -0.1])
def test_s1_refuses_a_cost_ratio_outside_zero_to_one(c):
    with pytest.raises(ConfigError):
        S1(0.5, c)


def test_s1_accepts_c_equal_to_one():
    assert S1(0.5, 1.0) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "kind, gammas, alphas",
    [
        ("lr", (3, 0), (0.7, 0.0)),
        ("lr", (2, 3), (0.6, 0.8)),
        ("score", (3, 0), (0.8, 0.0)),
        ("score", (2, 2), (0.7, 0.7)),
    ],
)
def test_the_simulator_run_on_a_plan_agrees_with_the_plans_price(kind, gammas, alphas):
    """One plan prices a round (Pricing.speedup) and drives the Monte-Carlo of the same process."""
    from lrtune.pricing import Prefill, Pricing
    from lrtune.simulate import simulate_priced

    plan = Pricing(c1=0.2, c2=0.15, batch_cost=[1.0, 1.1, 1.25, 1.4], prefill=Prefill(1.5, 0.1, 30.0))
    closed = plan.speedup(kind, *gammas, *alphas)
    sim = simulate_priced(plan, kind, *gammas, *alphas, rounds=60_000, rng=3)
    assert sim == pytest.approx(closed, rel=0.03)


# ---- LR+SD rounds priced by the batch cost of SD rows ---------------------------------------
STEEP_SD = [1.0, 1.6, 2.2, 2.8, 3.4, 4.0, 4.6]  # b_SD(n): SD rows that batch poorly (a CPU's)


def test_an_lr_round_with_sd_is_priced_by_the_batch_cost_of_sd_rows_where_measured():
    flat = Pricing(c1=0.3, c2=0.3, batch_cost=[1.0] * 7)
    both = Pricing(c1=0.3, c2=0.3, batch_cost=[1.0] * 7, batch_cost_sd=STEEP_SD)
    assert both.speedup("lr", 3, 4, 0.8, 0.8) == pytest.approx(h(3, 4, 0.8, 0.3, 0.8, 0.3, STEEP_SD))
    assert both.speedup("lr", 3, 4, 0.8, 0.8) < flat.speedup("lr", 3, 4, 0.8, 0.8)
    assert both.speedup("lr", 3, 0, 0.8, 0.8) == flat.speedup("lr", 3, 0, 0.8, 0.8)  # no SD: plain b(n)
    assert both.speedup("lr", 0, 4, 0.8, 0.8) == flat.speedup("lr", 0, 4, 0.8, 0.8)  # one row: b(1) = 1


def test_the_oracles_best_gammas_are_the_argmax_of_the_plans_own_price():
    plan = Pricing(c1=0.3, c2=0.3, batch_cost=[1.0] * 7, batch_cost_sd=STEEP_SD)
    bounds = Bounds(gamma1_max=6, gamma2_max=6, M=24)
    best = plan.best_gammas(0.9, 0.8, bounds)
    top = max(plan.speedup("lr", a, b, 0.9, 0.8) for a, b in bounds.arms())
    assert best.h == pytest.approx(top) and plan.speedup("lr", best.gamma1, best.gamma2, 0.9, 0.8) == pytest.approx(top)


def test_a_profile_with_sd_rows_batch_cost_prices_the_controller_with_it():
    from lrtune.pricing import from_profile

    prof = {"c1": 0.3, "c2": 0.3, "batch_cost": [1.0] * 7, "batch_cost_sd": STEEP_SD}
    assert from_profile(prof).batch_cost_sd == tuple(STEEP_SD)
    assert from_profile({k: v for k, v in prof.items() if k != "batch_cost_sd"}).batch_cost_sd is None
    with pytest.raises(ConfigError, match="batch_cost_sd"):
        Pricing(batch_cost_sd={"2": 1.5})


def test_where_sd_rows_do_not_batch_the_bandit_runs_sd_alone_from_the_first_round():
    """Plain rows batch for free (b(n) = 1) but SD rows do not (b_SD(n) = n): priced by b(n) alone,
    LR+SD looks like a win at the most optimistic α1 and the bandit explores it; priced by b_SD(n)
    no LR+SD round can beat SD alone, so the bandit never tries a γ1 > 0 arm."""
    flat = Pricing(c1=0.3, c2=0.3, batch_cost=[1.0] * 7)
    linear = Pricing(c1=0.3, c2=0.3, batch_cost=[1.0] * 7, batch_cost_sd=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    chosen = {}
    for name, plan in (("flat", flat), ("steep", linear)):
        ctl = BanditController(Bounds(gamma1_max=6, gamma2_min=1, gamma2_max=8, M=24), plan, seed=0)
        picks = []
        for r in range(30):
            g1, g2 = ctl.choose(ProblemInfo("p"), ControlState(round=r, generated_tokens=40 * r, budget_left=10_000))
            picks.append(g1)
            verdicts = tuple(random.Random(r * 7 + k).random() < 0.9 for k in range(g1))
            ctl.update(RoundOutcome(gamma1=g1, gamma2=g2, verdicts=verdicts))
        chosen[name] = picks
    assert any(g1 > 0 for g1 in chosen["flat"])
    assert all(g1 == 0 for g1 in chosen["steep"])
