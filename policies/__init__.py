"""Controllers that pick (γ1, γ2) per round (protocol: :mod:`lrtune.control`).

``fixed`` · ``heuristic`` (grow on full acceptance, shrink on rejection) · ``bandit``
(Beta posteriors + the speedup model) · ``bandit-pooled`` (the bandit, its posterior carried
from problem to problem) · ``grid-ucb`` (model-free UCB1 over the (γ1, γ2)
grid, rewarded by measured throughput) · ``learned`` (a fitted per-problem α predictor as
the bandit's prior; see :mod:`lrtune.policies.learned`).
"""

from __future__ import annotations

from lrtune.control import Bounds
from lrtune.errors import ConfigError

from lrtune.policies.bandit import BanditController
from lrtune.policies.fixed import FixedController
from lrtune.policies.grid_ucb import GridUCBController
from lrtune.policies.heuristic import HeuristicController
from lrtune.pricing import Pricing

POLICIES = ("fixed", "heuristic", "bandit", "bandit-pooled", "grid-ucb")

__all__ = [
    "BanditController",
    "FixedController",
    "GridUCBController",
    "HeuristicController",
    "POLICIES",
    "make_controller",
]


def make_controller(
    name: str,
    *,
    gamma1: int = 3,
    gamma2: int = 4,
    bounds: Bounds | None = None,
    pricing: Pricing | None = None,
    seed: int = 0,
    **legacy,
):
    """A controller by policy name (``learned`` ones load from a directory instead); the bandits
    are priced by ``pricing`` (the others price nothing). ``legacy``: the deprecated c1/c2/batch_cost."""
    if name == "fixed":
        return FixedController(gamma1, gamma2, bounds)
    if name == "heuristic":
        return HeuristicController(gamma1, gamma2, bounds)
    if name in ("bandit", "bandit-pooled"):
        return BanditController(bounds, pricing, seed=seed, pooled=name == "bandit-pooled", **legacy)
    if name == "grid-ucb":
        return GridUCBController(bounds)
    raise ConfigError(
        f"unknown controller policy {name!r}; choose from {', '.join(POLICIES)} or a controller directory"
    )
