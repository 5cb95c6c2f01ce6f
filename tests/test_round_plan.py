"""A round's plan (lrtune.roundplan): fixed before the round runs, γ2 = 0 the only "no SD", kinds an enum,
every value in its range; and one round reads as plain phases (lrtune.round)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lrtune.control import Bounds
from lrtune.decodeconfig import DecodeConfig
from lrtune.errors import ConfigError
from lrtune.roundplan import RoundKind, RoundPlan, plan_round

ROOT = Path(__file__).resolve().parents[1]


class Picks:
    """A controller that returns fixed depths and, optionally, a round kind."""

    def __init__(self, g1, g2, kind=None, horizon=None):
        self.bounds = Bounds(gamma1_min=0, gamma1_max=4, gamma2_min=0, gamma2_max=4, M=16.0)
        self.g1, self.g2, self.kind, self.h = g1, g2, kind, horizon
        if kind is not None:
            self.round_kind = lambda: self.kind

    def choose(self, problem, state):
        return self.g1, self.g2

    def horizon(self):
        return self.h

    def update(self, outcome):
        pass


def plan(cfg, **kw):
    return plan_round(cfg, index=0, base=[1, 2, 3], generated=0, **kw)


@pytest.mark.parametrize(
    ("method", "gamma2", "kind", "gamma1"),
    [
        ("target", 0, RoundKind.TARGET, 0),
        ("sd", 3, RoundKind.TARGET, 0),
        ("lr", 0, RoundKind.LR, 2),
        ("lr+sd", 3, RoundKind.LR, 2),
    ],
)
def test_the_plan_resolves_a_method_into_a_kind_and_gamma2_zero_means_no_sd(method, gamma2, kind, gamma1):
    p = plan(DecodeConfig(method=method, gamma1=2, gamma2=3))
    assert (p.kind, p.gamma1, p.gamma2) == (kind, gamma1, gamma2)
    assert DecodeConfig(method=method, gamma2=3).sd_gamma2 == gamma2


def test_a_controllers_gamma2_is_zero_when_the_method_runs_no_sd():
    p = plan(DecodeConfig(method="lr", gamma1=2, gamma2=3), controller=Picks(3, 4))
    assert (p.kind, p.gamma1, p.gamma2) == (RoundKind.LR, 3, 0)


def test_a_controllers_gamma1_zero_is_a_target_round_to_its_horizon_within_the_budget():
    cfg = DecodeConfig(method="lr+sd", max_new_tokens=40)
    p = plan(cfg, controller=Picks(0, 2, horizon=100))
    assert (p.kind, p.gamma1, p.gamma2, p.horizon) == (RoundKind.TARGET, 0, 2, 40)


def test_a_controller_picks_the_kind_and_the_schedule_follows_the_kind():
    cfg = DecodeConfig(method="lr+sd", schedule="abort")
    score = plan(cfg, controller=Picks(2, 2, kind="score"))
    assert score.kind is RoundKind.SCORE and not score.early_abort and score.width == 1
    lr = plan(DecodeConfig(method="lr+sd", schedule="score"), controller=Picks(2, 2, kind="lr"))
    assert lr.kind is RoundKind.LR and not lr.early_abort and not lr.reuse


def test_a_kind_outside_lr_and_score_or_depths_outside_the_bounds_are_refused():
    cfg = DecodeConfig(method="lr+sd")
    with pytest.raises(ConfigError, match="round kind 'sd'"):
        plan(cfg, controller=Picks(2, 2, kind="sd"))
    with pytest.raises(ConfigError, match="outside its bounds"):
        plan(cfg, controller=Picks(9, 2))


@pytest.mark.parametrize(
    ("kind", "g1", "g2"), [(RoundKind.LR, 0, 2), (RoundKind.TARGET, 2, 2), (RoundKind.LR, 2, -1), (RoundKind.LR, 17, 0)]
)
def test_a_plan_holds_only_values_its_kind_and_ranges_allow(kind, g1, g2):
    with pytest.raises(ConfigError):
        RoundPlan(kind, 0, g1, g2, 1, 10, (1,), None, DecodeConfig())


def test_a_plan_is_frozen():
    p = plan(DecodeConfig())
    with pytest.raises(AttributeError):
        p.gamma2 = 0


def test_round_kinds_are_the_names_stats_and_controllers_use():
    assert {k.value for k in RoundKind} == {"sd", "lr", "score"}
    assert RoundKind.LR == "lr"


def test_one_round_runs_its_phases_as_plain_functions_in_order():
    """run_round calls draft, prefill, target, verify and commit in that order, and nothing
    in the decode core is a mixin over shared round state."""
    tree = ast.parse((ROOT / "lrtune/round.py").read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_round")
    found = [c for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)]
    calls = [c.func.id for c in sorted(found, key=lambda c: (c.lineno, c.col_offset))]  # in source order
    order = [c for c in calls if c in ("draft_chains", "prefill_chains", "target_steps", "verify", "commit")]
    assert order == ["draft_chains", "prefill_chains", "target_steps", "verify", "commit"]
    decoder = ast.parse((ROOT / "lrtune/decoder.py").read_text())
    cls = next(n for n in decoder.body if isinstance(n, ast.ClassDef) and n.name == "LookaheadDecoder")
    assert cls.bases == []
    assert not (ROOT / "lrtune/roundstate.py").exists()
