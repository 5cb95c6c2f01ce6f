"""``auto``: the method a user can turn on blindly; it picks target-only, SD or adaptive
step-level rounds per machine and verifier, before any model loads.

The choice, in order (the first rule that applies decides):

1. **target** when there is no draft model, or when SD does not pay on this machine: the
   profile's measured SD speedup (``sd.speedup`` of ``lrtune profile``) is at most 1, or,
   without a measurement, the speedup model's best SD round max_γ2 g(γ2; α2, c2) is.
2. **sd** when the verifier states no accuracy bound. Step-level rounds replace target steps
   by draft steps the verifier accepts, so they are lossy; ``auto`` runs them only with a
   verifier whose loss is bounded before the run: a distilled checkpoint at its own threshold
   whose false-accept bound is certified (``lrtune train verifier``, ``lrtune calibrate``) or
   that carries a certified accuracy budget (``lrtune calibrate --max-accuracy-loss``), or a
   lossless one (``exact``, ``never``).
3. **sd** when no step-level round beats SD by :data:`MIN_GAIN` even at the most α1 the
   verifier admits: max over the allowed (γ1 ≥ 1, γ2) and round kinds of
   speedup(kind, γ1, γ2; α1_max, α2) < MIN_GAIN · max_γ2 speedup(lr, 0, γ2; ·, α2)
   (:meth:`lrtune.pricing.Pricing.speedup`; α1_max = ``pricing.alpha1_max``, the upper end of
   the checkpoint's test-split acceptance interval).
4. **adaptive** otherwise: the controller prices each round and explores only the arms the
   model allows (:mod:`policies.bandit`); without a ``--controller``, :data:`CONTROLLER`.

α2 is the profile's measured SD acceptance where there is one, else :data:`ALPHA2_PRIOR`.
"""

from __future__ import annotations

from dataclasses import dataclass

from lrtune.control import Bounds
from lrtune.pricing import Pricing

# a step-level round must be modelled this much faster than SD before auto lets a controller
# explore it (the bar of benchmarks/score_rounds/score_bound.json: alpha1 for 1.10x SD)
MIN_GAIN = 1.10
ALPHA2_PRIOR = 0.8  # a same-family draft's token acceptance when nothing was measured (README pair: 0.72-0.88)
METHODS = ("target", "sd", "adaptive")
# the controller of an adaptive choice without --controller: the bandit whose new problem starts
# from the posterior earlier problems left (benchmarks/controller_sim: 0.99 of the oracle on
# 13-step answers, where a flat prior per problem gives 0.86-0.89; equal on long ones)
CONTROLLER = "bandit-pooled"


@dataclass(frozen=True)
class AutoChoice:
    """What ``auto`` runs and why (one sentence), with the figures the rule compared."""

    method: str  # target | sd | adaptive
    reason: str
    sd_speedup: float | None = None  # measured (profile) or modelled best SD speedup over the target
    lr_speedup: float | None = None  # modelled best step-level round at α1_max (None: not priced)
    alpha1_max: float | None = None
    alpha2: float | None = None
    promise: str | None = None  # the verifier's accuracy bound, None when it states none

    @property
    def decode_method(self) -> str:
        """The decoding method that runs the choice: adaptive is lr+sd under a controller."""
        return "lr+sd" if self.method == "adaptive" else self.method

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def best_sd(pricing: Pricing, bounds: Bounds, alpha2: float) -> float:
    """max_γ2 g(γ2; α2, c2): the best SD-alone round the bounds allow, modelled (1: the target alone)."""
    arms = [g2 for g1, g2 in pricing.cap(bounds).arms() if g1 == 0 and g2 > 0]
    return max([1.0] + [pricing.speedup("lr", 0, g2, 0.0, alpha2) for g2 in arms])


def best_step_round(pricing: Pricing, bounds: Bounds, alpha1: float, alpha2: float, kinds: tuple[str, ...]) -> float:
    """The best modelled speedup of a round with γ1 >= 1 draft steps over the allowed (γ1, γ2)
    (:meth:`lrtune.control.Bounds.arms`, the controller's arms) and ``kinds``; 0 without one."""
    arms = [(g1, g2) for g1, g2 in pricing.cap(bounds).arms() if g1 > 0]
    return max([0.0] + [pricing.best(g1, g2, alpha1, alpha2, kinds)[0] for g1, g2 in arms])


def choose(
    pricing: Pricing,
    *,
    has_draft: bool,
    promise: str | None,
    bounds: Bounds | None = None,
    measured_sd_speedup: float | None = None,
    alpha2: float | None = None,
    round_kinds: tuple[str, ...] = ("lr",),
    alpha1_max: float | None = None,
) -> AutoChoice:
    """The method ``auto`` runs (module docstring: rules 1-4, first match); ``alpha1_max``
    overrides the plan's (0 for a verifier that accepts nothing)."""
    bounds = bounds or Bounds()
    a2 = ALPHA2_PRIOR if alpha2 is None else alpha2
    if not has_draft:
        return AutoChoice("target", "no draft model: the target decodes alone", promise=promise)
    sd = measured_sd_speedup if measured_sd_speedup is not None else best_sd(pricing, bounds, a2)
    where = "measured by the profile" if measured_sd_speedup is not None else "modelled"
    if sd <= 1.0:
        return AutoChoice(
            "target", f"SD does not pay here ({sd:.2f}x the target, {where})", sd, alpha2=a2, promise=promise
        )
    if promise is None:
        return AutoChoice(
            "sd",
            "the verifier states no accuracy bound, so auto keeps to lossless SD",
            sd,
            alpha2=a2,
            promise=None,
        )
    a1 = pricing.alpha1_max if alpha1_max is None else alpha1_max
    lr = best_step_round(pricing, bounds, a1, a2, round_kinds)
    sd_model = best_sd(pricing, bounds, a2)
    if lr < MIN_GAIN * sd_model:
        return AutoChoice(
            "sd",
            f"no step-level round beats SD by {MIN_GAIN:g}x on this profile even at alpha1 {a1:.2f} "
            f"({lr:.2f}x vs {sd_model:.2f}x)",
            sd,
            lr,
            a1,
            a2,
            promise,
        )
    return AutoChoice(
        "adaptive",
        f"step-level rounds may win ({lr:.2f}x vs SD {sd_model:.2f}x at alpha1 {a1:.2f}); the controller decides",
        sd,
        lr,
        a1,
        a2,
        promise,
    )


def accuracy_promise(verifier) -> str | None:
    """The accuracy bound ``verifier`` (a parsed spec or a built verifier) states before the run,
    as one clause; None when it states none (module docstring, rule 2)."""
    from lrtune.verifiers import VerifierSpec

    kind = verifier.kind if isinstance(verifier, VerifierSpec) else getattr(verifier, "name", "")
    if kind in ("exact", "never"):
        return "lossless (identical steps only)" if kind == "exact" else "lossless (no draft step accepted)"
    if not isinstance(verifier, VerifierSpec) or kind != "checkpoint" or verifier.threshold is not None:
        return None
    from lrtune.verifiers.distilled import read_meta

    meta = read_meta(verifier.path)
    budget = meta.get("accuracy_budget") or {}
    if budget.get("certified") and budget.get("threshold") == meta["threshold"]:
        return (
            f"answers differ from target-only on <= {budget['max_accuracy_loss']:g} of problems "
            f"at {budget['confidence']:g}"
        )
    calib = meta.get("calibration") or {}
    if calib.get("certified") and calib.get("threshold") == meta["threshold"]:
        return f"false-accept rate <= {calib['max_false_accept']:g} at {calib['confidence']:g}"
    return None


def measured_sd(profile: str | None) -> tuple[float | None, float | None]:
    """(SD speedup, α2) the ``lrtune profile`` JSON at ``profile`` measured; (None, None) without one."""
    if not profile:
        return None, None
    from lrtune.batchcost import read_profile_json

    sd = read_profile_json(profile).get("sd") or {}
    speed, a2 = sd.get("speedup"), sd.get("alpha2")
    ok = [isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in (speed, a2)]
    return (float(speed) if ok[0] else None), (min(float(a2), 1.0) if ok[1] else None)


__all__ = [
    "ALPHA2_PRIOR",
    "MIN_GAIN",
    "AutoChoice",
    "accuracy_promise",
    "best_sd",
    "best_step_round",
    "choose",
    "measured_sd",
]
