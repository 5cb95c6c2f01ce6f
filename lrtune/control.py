"""The controller protocol: who picks (γ1, γ2) before every LR round.

The decoder calls ``choose(problem, state)`` before each round and ``update(outcome)``
after it, so a controller may change either depth mid-problem. Implementations live in
``policies/`` (fixed, heuristic, bandit, learned); the core only defines the protocol,
the records it exchanges, and :class:`Bounds` (which every choice must respect).

A controller may also pick the kind of each γ1 > 0 round (optional ``round_kind()``, asked
after ``choose``): ``lr`` (the target generates its own steps) or ``score`` (one prefill of the
draft chain judges them, :mod:`lrtune.score_round`; the verifier must then be one-sided). A
controller whose ``round_kinds`` holds ``score`` has its verifier checked before decoding.

γ1 = 0 is a legal choice for LR methods: that round drafts nothing and the target (with SD
when γ2 > 0) runs uninterrupted for ``horizon()`` tokens, its next decision point (None: to
the end of the answer), so falling back to SD costs one engine call per decision, not one per
step (SD does not restart at every step boundary).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from lrtune.backends.base import SDCounters
from lrtune.errors import ConfigError


DEFAULT_COST_RATIO = 0.4  # c1 = c2 (draft : target seconds per token) where nothing measured it (lrtune profile does)


GAMMA_BOUND = 16  # = lrtune.decodeconfig.GAMMA_MAX: no round drafts more steps or tokens


@dataclass(frozen=True)
class Bounds:
    """Allowed depths: γ1 ∈ [gamma1_min, gamma1_max], γ2 ∈ [gamma2_min, gamma2_max] and the
    parallel budget γ1·γ2 ≤ M (target work in flight per round, in draft tokens)."""

    gamma1_min: int = 0
    gamma1_max: int = 6
    gamma2_min: int = 0
    gamma2_max: int = 8
    M: float = 24.0

    def __post_init__(self) -> None:
        if not 0 <= self.gamma1_min <= self.gamma1_max or not 0 <= self.gamma2_min <= self.gamma2_max:
            raise ConfigError(f"bad controller bounds: {self}")
        if self.M < 0:
            raise ConfigError(f"the budget M must be >= 0, got {self.M}")
        if self.gamma1_max > GAMMA_BOUND or self.gamma2_max > GAMMA_BOUND or self.M > GAMMA_BOUND**2:
            raise ConfigError(
                f"bad controller bounds: depths at most {GAMMA_BOUND} and M at most {GAMMA_BOUND**2} "
                f"(the decoder's largest gamma), got gamma1_max {self.gamma1_max}, gamma2_max {self.gamma2_max}, "
                f"M {self.M:g}"
            )

    @classmethod
    def covering(cls, gamma1: int, gamma2: int) -> Bounds:
        """The default bounds, widened to allow the configured (γ1, γ2)."""
        d = cls()
        return cls(
            gamma1_min=0,
            gamma1_max=max(d.gamma1_max, gamma1),
            gamma2_min=0,
            gamma2_max=max(d.gamma2_max, gamma2),
            M=float(max(d.M, gamma1 * gamma2)),
        )

    def allows(self, gamma1: int, gamma2: int) -> bool:
        return (
            self.gamma1_min <= gamma1 <= self.gamma1_max
            and self.gamma2_min <= gamma2 <= self.gamma2_max
            and gamma1 * gamma2 <= self.M
        )

    def arms(self) -> list[tuple[int, int]]:
        """Every allowed (γ1, γ2)."""
        return [
            (a, b)
            for a in range(self.gamma1_min, self.gamma1_max + 1)
            for b in range(self.gamma2_min, self.gamma2_max + 1)
            if a * b <= self.M
        ]

    def clip(self, gamma1: int, gamma2: int) -> tuple[int, int]:
        """The nearest allowed pair: clamp each depth, then shrink the larger factor
        until γ1·γ2 ≤ M."""
        g1 = min(max(int(gamma1), self.gamma1_min), self.gamma1_max)
        g2 = min(max(int(gamma2), self.gamma2_min), self.gamma2_max)
        while g1 * g2 > self.M:
            if g2 > self.gamma2_min and (g2 >= g1 or g1 <= self.gamma1_min):
                g2 -= 1
            elif g1 > self.gamma1_min:
                g1 -= 1
            else:
                g2 -= 1
        return g1, g2


@dataclass(frozen=True)
class ProblemInfo:
    """What a controller may know about the problem before decoding it."""

    id: str
    text: str = ""
    prompt_tokens: int = 0
    task: str = ""


@dataclass(frozen=True)
class ControlState:
    """Progress of the current problem when a round is about to start."""

    round: int
    generated_tokens: int
    budget_left: int


@dataclass(frozen=True)
class RoundOutcome:
    """What one round did. ``verdicts`` are the verifier's decisions for every drafted
    position (all of them are observations of α1); ``sd`` holds the token-level SD counters
    of this round's target call (verification passes, drafted / accepted tokens, accepted
    tokens per draft position), from which the ``sd_*`` views below are derived."""

    gamma1: int
    gamma2: int
    verdicts: tuple[bool, ...] = ()
    accepted_steps: int = 0
    committed_tokens: int = 0
    sd: SDCounters = field(default_factory=SDCounters)
    draft_s: float = 0.0
    target_s: float = 0.0
    verify_s: float = 0.0
    kind: str = "lr"  # lr | score | sd (a γ1 = 0 round, or one whose drafts came out empty)
    extra: dict = field(default_factory=dict)

    @property
    def sd_iterations(self) -> int:
        """Verification passes of the target (each checked up to γ2 draft tokens)."""
        return self.sd.drafts

    @property
    def sd_drafted(self) -> int:
        return self.sd.drafted_tokens

    @property
    def sd_accepted(self) -> int:
        return self.sd.accepted_tokens

    @property
    def step_successes(self) -> tuple[int, int]:
        """(accepted, rejected) verdicts: the α1 evidence of this round."""
        acc = sum(self.verdicts)
        return acc, len(self.verdicts) - acc

    @property
    def token_successes(self) -> tuple[int, int]:
        """(accepted, rejected) draft tokens under the i.i.d. model: each SD pass either
        accepts all its drafts (no failure observed, also when the engine shortened the pass
        near a row's limit) or stops at its first rejection (:attr:`SDCounters.stopped`)."""
        return self.sd_accepted, self.sd.stopped or 0


def method_for_depths(gamma1: int, gamma2: int) -> str:
    """The decode method that runs fixed depths (γ1, γ2): γ1 = 0 drafts no steps and γ2 = 0
    drafts no tokens, so (0, 0) → target, (0, γ2) → sd, (γ1, 0) → lr, else lr+sd."""
    return {(False, False): "target", (False, True): "sd", (True, False): "lr", (True, True): "lr+sd"}[
        (gamma1 > 0, gamma2 > 0)
    ]


@runtime_checkable
class Controller(Protocol):
    """``choose`` (γ1, γ2) before a round; ``horizon`` after choosing γ1 = 0: how many tokens
    the target may run before the next decision (None: to the end of the answer); ``update``
    with what the round did. ``horizon`` is optional (:func:`checked_controller`)."""

    bounds: Bounds

    def choose(self, problem: ProblemInfo, state: ControlState) -> tuple[int, int]: ...

    def horizon(self) -> int | None: ...

    def update(self, outcome: RoundOutcome) -> None: ...


def checked_controller(obj) -> Controller:
    """``obj`` as a :class:`Controller`, checked when it is handed in: ``choose`` and ``update``
    callable, ``bounds`` a :class:`Bounds`; an object without the optional ``horizon`` gets the
    default (None: the target runs to the end of the answer after a γ1 = 0 choice). ConfigError
    names what is missing, before any decode starts."""
    from lrtune.errors import ConfigError

    missing = [m for m in ("choose", "update") if not callable(getattr(obj, m, None))]
    if missing or not isinstance(getattr(obj, "bounds", None), Bounds):
        what = ", ".join(missing + ([] if isinstance(getattr(obj, "bounds", None), Bounds) else ["bounds (a Bounds)"]))
        raise ConfigError(f"not a controller: {type(obj).__name__} lacks {what} (lrtune.control.Controller)")
    if callable(getattr(obj, "horizon", None)):
        return obj
    return _WithDefaultHorizon(obj)


def checked_choice(controller, got) -> tuple[int, int]:
    """What ``controller.choose`` returned, checked where it enters the decoder: two integers
    (γ1, γ2) (a float, a bool or a text would fail deep inside, or round silently);
    :class:`ConfigError` naming the controller otherwise. Bounds are checked by the caller."""
    name = type(getattr(controller, "_inner", controller)).__name__
    try:
        g1, g2 = got
    except (TypeError, ValueError):
        raise ConfigError(f"controller {name}.choose returned {got!r}; expected (γ1, γ2), two integers") from None
    if any(isinstance(g, bool) or not isinstance(g, numbers.Integral) for g in (g1, g2)):
        raise ConfigError(f"controller {name}.choose returned ({g1!r}, {g2!r}); γ1 and γ2 are integers")
    return int(g1), int(g2)


class _WithDefaultHorizon:
    """A user's controller without ``horizon``: every attribute is the controller's, and
    ``horizon()`` is None. Copies copy the controller (per-prompt state in batches)."""

    def __init__(self, inner) -> None:
        self.__dict__["_inner"] = inner

    def horizon(self) -> int | None:
        return None

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self._inner, name, value)

    def __copy__(self):
        import copy

        return _WithDefaultHorizon(copy.copy(self._inner))
