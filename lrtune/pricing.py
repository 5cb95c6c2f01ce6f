"""The pricing plan: what a round costs on this machine and engine, decided once.

A :class:`Pricing` is one frozen value built from the run's profile, engine and verifier
(:func:`plan`) and handed to a controller when it is built; the controller, the evaluate
oracle and anything else that prices a (γ1, γ2) read it and never change it.

Units: every cost is in target steps (T, one plain target decode step).
    c1 = draft step / target step,   c2 = draft token / target token,
    b(n) = batch_cost[n − 1]: n target steps in one batch / one step,
    b_SD(n) = batch_cost_sd[n − 1]: the same for rows decoded with token-level SD (the profile's
    ``batch_cost_sd``, measured at its ``sd.gamma2``); an LR round with γ2 > 0 is priced with it
    where given, since SD rows verify γ2 + 1 tokens each and a CPU's batch of them is not as cheap
    as a batch of plain rows (plain b(n) where not given),
    a score round's prefill of γ1 draft steps P(γ1) = (o + π·γ1·L) / L (o, π, L: :class:`Prefill`),
    zero when the verifier reads no target score of a draft step (no scoring call),
    engine_drafts: tokens the shared SD engine drafts per pass whatever γ2 a round asks
    (0: each γ2 drafts its own); a γ2 above it would start another engine, so bounds stop there,
    alpha1_max: the highest α1 the verifier's calibration admits (the upper end of a distilled
    checkpoint's test-split acceptance interval; 1 when unknown); a controller's exploration
    never assumes more.
An LR round is priced by :func:`lrtune.speedup.h`, a score round by :func:`lrtune.speedup.h_score`,
both in :meth:`Pricing.speedup`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from lrtune.control import DEFAULT_COST_RATIO, Bounds
from lrtune.speedup import BatchCost, batch_cost_for
from lrtune.errors import ConfigError

ROUND_KINDS = ("lr", "score")


@dataclass(frozen=True)
class Prefill:
    """A score round's prefill call: overhead o (target tokens), π per prefilled token (a decoded
    token's time), L tokens per draft step. Defaults: ``lrtune profile`` on the default pair with
    the int8 draft, AVX-512 CPU (``benchmarks/score_rounds/profile_int8.json``)."""

    overhead_tokens: float = 1.7
    per_token: float = 0.11
    step_tokens: float = 40.0

    def __post_init__(self) -> None:
        for name in ("overhead_tokens", "per_token"):
            _number(getattr(self, name), f"prefill.{name}", low=0.0)
        _number(self.step_tokens, "prefill.step_tokens", low=0.0, strict=True)


@dataclass(frozen=True)
class Pricing:
    """The costs a controller prices (γ1, γ2) with (module docstring); validated when built."""

    c1: float = DEFAULT_COST_RATIO
    c2: float = DEFAULT_COST_RATIO
    batch_cost: BatchCost = None  # b(n) = batch_cost[n - 1] (or batch_cost(n)); None: b(n) = 1
    batch_cost_sd: BatchCost = None  # b_SD(n) of rows with SD, for γ2 > 0 rounds; None: batch_cost
    prefill: Prefill = field(default_factory=Prefill)
    engine_drafts: int = 0
    scoring_call: bool = True  # False: the verifier reads no target score, a score round's P = 0
    prefill_steps: float | None = None  # a measured P (T) for every γ1, in place of the prefill model
    alpha1_max: float = 1.0  # the highest α1 the verifier's calibration admits (exploration never assumes more)

    def __post_init__(self) -> None:
        _number(self.c1, "c1", low=0.0, strict=True)
        _number(self.c2, "c2", low=0.0, strict=True)
        for name in ("batch_cost", "batch_cost_sd"):
            object.__setattr__(self, name, _curve(getattr(self, name), name))
        if not isinstance(self.prefill, Prefill):
            raise ConfigError(f"prefill must be a Prefill, got {type(self.prefill).__name__}")
        if type(self.engine_drafts) is not int or self.engine_drafts < 0:
            raise ConfigError(f"engine_drafts must be an int >= 0, got {self.engine_drafts!r}")
        if type(self.scoring_call) is not bool:
            raise ConfigError(f"scoring_call must be True or False, got {self.scoring_call!r}")
        if self.prefill_steps is not None:
            _number(self.prefill_steps, "prefill_steps", low=0.0)
        _number(self.alpha1_max, "alpha1_max", low=0.0, strict=True)
        if self.alpha1_max > 1:
            raise ConfigError(f"alpha1_max must be at most 1, got {self.alpha1_max!r}")

    # ---- the prices -------------------------------------------------------------------------
    def score_prefill(self, gamma1: int) -> float:
        """P(γ1) in target steps: 0 without a scoring call, the measured ``prefill_steps`` where
        given (evaluate prices the run it measured), else the model (module docstring)."""
        if not self.scoring_call:
            return 0.0
        if self.prefill_steps is not None:
            return float(self.prefill_steps)
        from lrtune.speedup import score_prefill

        p = self.prefill
        return score_prefill(gamma1, p.overhead_tokens, p.per_token, p.step_tokens)

    def speedup(self, kind: str, gamma1: int, gamma2: int, alpha1: float, alpha2: float) -> float:
        """The modelled speedup over the plain target of one round of ``kind`` (lr or score) at
        (γ1, γ2) and acceptance (α1, α2), on this plan's engine (the one place a round is priced)."""
        from lrtune.speedup import h, h_score

        drafted = self.engine_drafts or None
        if kind == "score":
            return h_score(gamma1, gamma2, alpha1, self.c1, self.score_prefill(gamma1), alpha2, self.c2, drafted)
        if kind == "lr":
            return h(gamma1, gamma2, alpha1, self.c1, alpha2, self.c2, self.batch_for(gamma2), drafted)
        raise ConfigError(f"round kind must be one of {', '.join(ROUND_KINDS)}, got {kind!r}")

    def batch_for(self, gamma2: int) -> BatchCost:
        """The batch cost of a round's target rows: b_SD(n) with SD (γ2 > 0) where measured, else b(n)."""
        return batch_cost_for(gamma2, self.batch_cost, self.batch_cost_sd)

    def best(
        self, gamma1: int, gamma2: int, alpha1: float, alpha2: float, kinds: tuple[str, ...] = ("lr",)
    ) -> tuple[float, str]:
        """(speedup, kind) of the best of ``kinds`` at (γ1, γ2); ties go to the first kind."""
        top = (-math.inf, kinds[0])
        for kind in kinds:
            v = self.speedup(kind, gamma1, gamma2, alpha1, alpha2)
            if v > top[0] * (1 + 1e-12):
                top = (v, kind)
        return top

    def best_gammas(self, alpha1: float, alpha2: float, bounds: Bounds):
        """argmax of the LR price over ``bounds`` capped to this engine (:func:`lrtune.speedup.best_gammas`)."""
        from lrtune.speedup import best_gammas

        b = self.cap(bounds)
        return best_gammas(
            alpha1,
            self.c1,
            alpha2,
            self.c2,
            b.M,
            b.gamma1_max,
            b.gamma2_max,
            self.batch_cost,
            self.engine_drafts or None,
            self.batch_cost_sd,
        )

    def cap(self, bounds: Bounds) -> Bounds:
        """``bounds`` stopped at the shared engine's γ2: a larger γ2 would start another engine (a
        whole target and drafter, gigabytes, tens of seconds) mid-decode."""
        d = self.engine_drafts
        if not d or bounds.gamma2_max <= d:
            return bounds
        return replace(bounds, gamma2_max=d, gamma2_min=min(bounds.gamma2_min, d))

    def with_costs_of(self, other: Pricing) -> Pricing:
        """This plan with ``other``'s machine costs (c1, c2, b(n), b_SD(n)): a learned controller
        keeps the costs it was trained with and takes the run's engine, prefill and verifier."""
        return replace(self, c1=other.c1, c2=other.c2, batch_cost=other.batch_cost, batch_cost_sd=other.batch_cost_sd)


def _curve(value, name: str):
    """A batch-cost curve as a tuple of positive numbers (a callable or None as it is)."""
    if value is None or callable(value):
        return value
    if isinstance(value, (str, bytes, dict, set, frozenset)) or not hasattr(value, "__iter__"):
        raise ConfigError(f"{name} must be a list of numbers, got {value!r:.40}")
    curve = tuple(value)
    if not curve:
        raise ConfigError(f"{name} must hold b(1) at least")
    for x in curve:
        _number(x, name, low=0.0, strict=True)
    return tuple(float(x) for x in curve)


def _number(x, what: str, *, low: float, strict: bool = False) -> None:
    ok = (
        isinstance(x, (int, float))
        and not isinstance(x, bool)
        and math.isfinite(x)
        and (x > low if strict else x >= low)
    )
    if not ok:
        raise ConfigError(f"{what} must be a number {'>' if strict else '>='} {low:g}, got {x!r:.40}")


# ---- building the plan ----------------------------------------------------------------------
def from_profile(prof: dict, *, costs: bool = True) -> Pricing:
    """A plan from an ``lrtune profile`` JSON object: the score round's prefill (o and π) where
    measured, and with ``costs`` c1, c2 and b(n) where all three are there (b_SD(n) too where
    measured)."""
    kw: dict = {}
    pre = prof.get("prefill")
    if isinstance(pre, dict) and pre.get("overhead_tokens") is not None and pre.get("ratio_per_token"):
        from lrtune.profiling import prefill_per_token

        kw["prefill"] = Prefill(overhead_tokens=float(pre["overhead_tokens"]), per_token=prefill_per_token(pre))
    if costs and {"c1", "c2", "batch_cost"} <= set(prof):
        kw.update(c1=prof["c1"], c2=prof["c2"], batch_cost=prof["batch_cost"])
        if prof.get("batch_cost_sd"):
            kw["batch_cost_sd"] = prof["batch_cost_sd"]
    try:
        return Pricing(**kw)
    except ConfigError as e:
        raise ConfigError(f"not an lrtune profile ({e})") from None  # the caller names the file


def plan(*, profile: str | None = None, engine_drafts: int = 0, verifier=None) -> Pricing:
    """The run's pricing plan, built once: costs and prefill from the ``lrtune profile`` JSON at
    ``profile`` (defaults where none), the shared SD engine's ``engine_drafts``, and whether
    ``verifier`` needs a scoring call (None: assume it does)."""
    base = Pricing()
    if profile:
        from lrtune.batchcost import read_profile_json

        data = read_profile_json(profile)
        try:
            base = from_profile(data)
        except ConfigError as e:
            raise ConfigError(f"--profile {profile}: {e}") from None
    return replace(
        base,
        engine_drafts=int(engine_drafts),
        scoring_call=needs_scoring_call(verifier),
        alpha1_max=admitted_acceptance(verifier),
    )


def needs_scoring_call(verifier) -> bool:
    """Whether a score round with ``verifier`` prefills the chain to score it (a draft-only
    router reads no target score: the accepted steps are prefilled inside the target's own step)."""
    if verifier is None:
        return True
    from lrtune.verifiers.base import wants_target_scores

    return bool(wants_target_scores(verifier))


def admitted_acceptance(verifier) -> float:
    """The highest α1 ``verifier``'s calibration admits: a distilled checkpoint's upper 95% bound
    on its test-split acceptance (:func:`lrtune.verifiers.distilled.acceptance_ceiling`) while it
    runs at the threshold it was calibrated at; else 1 (unknown). ``verifier``: a built verifier
    or a parsed spec (read from the checkpoint's metadata, before any model loads)."""
    from lrtune.verifiers import VerifierSpec
    from lrtune.verifiers.distilled import acceptance_ceiling, read_meta

    if isinstance(verifier, VerifierSpec):
        if verifier.kind != "checkpoint" or verifier.threshold is not None:
            return 1.0
        meta = read_meta(verifier.path)
        threshold = meta.get("threshold")
    else:
        meta, threshold = getattr(verifier, "meta", None), getattr(verifier, "threshold", None)
    if not isinstance(meta, dict) or threshold is None or threshold != meta.get("threshold"):
        return 1.0
    return acceptance_ceiling(meta) or 1.0


def priced(controller, pricing: Pricing):
    """``controller`` built again with ``pricing`` (:meth:`derive`), or ``controller`` itself when
    it prices nothing (fixed, heuristic, grid-ucb, an object handed in, None). Never changes
    ``controller``."""
    derive = getattr(controller, "derive", None)
    return derive(pricing=pricing) if callable(derive) else controller


__all__ = [
    "Prefill",
    "Pricing",
    "ROUND_KINDS",
    "admitted_acceptance",
    "from_profile",
    "needs_scoring_call",
    "plan",
    "priced",
]
