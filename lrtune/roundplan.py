"""What one round of one prompt will do, fixed before it runs: :class:`RoundPlan`.

A prompt's :class:`~lrtune.decodeconfig.DecodeConfig` is what its user asked for and is never
changed; each round, :func:`plan_round` resolves it (and a controller's choice) into a plan:

* ``kind`` (:class:`RoundKind`): ``target`` rounds run the target alone (with SD when γ2 > 0),
  ``lr`` rounds draft γ1 steps and let the target regenerate them, ``score`` rounds draft γ1
  steps and let one target prefill judge them (:mod:`lrtune.score_round`).
* ``gamma1`` (draft steps, 0 in a ``target`` round) and ``gamma2`` (draft tokens per SD
  iteration inside the target's steps; **0 is the only way to say "no SD"**: the methods
  ``target`` and ``lr`` resolve to γ2 = 0 here, once).
* ``budget`` (tokens left), ``base`` (prompt + committed ids, where every row starts),
  ``horizon`` (tokens a ``target`` round runs uninterrupted; None: one step).

Pure: no engine is called here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from lrtune.control import ControlState, checked_choice
from lrtune.decodeconfig import GAMMA_MAX, DecodeConfig
from lrtune.errors import ConfigError


class RoundKind(str, Enum):
    """What a round does (its value is the name stats and controllers use)."""

    TARGET = "sd"  # the target alone, with SD inside when γ2 > 0 (stats call these SD rounds)
    LR = "lr"  # draft γ1 steps, the target regenerates each, a verifier compares the pairs
    SCORE = "score"  # draft γ1 steps, one target prefill scores them, a one-sided verifier judges


@dataclass(frozen=True)
class RoundPlan:
    """One prompt's next round (module docstring). ``cfg`` is the prompt's own config, read
    for what no round changes (sampling, seeds, step ends, verifier context, recording)."""

    kind: RoundKind
    index: int  # the prompt's round number (seeds depend on it)
    gamma1: int  # draft steps, 0..GAMMA_MAX (0 in a target round)
    gamma2: int  # draft tokens per SD iteration in the target's steps, 0..GAMMA_MAX (0: no SD)
    width: int  # draft branches (1 outside sync LR rounds)
    budget: int  # tokens left before this round
    base: tuple[int, ...]  # prompt + committed ids: every row of the round starts here
    horizon: int | None  # target rounds: tokens run uninterrupted (None: one step)
    cfg: DecodeConfig

    def __post_init__(self) -> None:
        for name in ("gamma1", "gamma2"):
            v = getattr(self, name)
            if not 0 <= v <= GAMMA_MAX:
                raise ConfigError(f"round {name} must be in 0..{GAMMA_MAX}, got {v}")
        if (self.kind is RoundKind.TARGET) != (self.gamma1 == 0):
            raise ConfigError(f"a {self.kind.value} round has γ1 = {self.gamma1}")

    @property
    def early_abort(self) -> bool:
        """LR round under ``--schedule abort`` or ``reuse+abort``: each position is judged as its row ends."""
        return self.kind is RoundKind.LR and self.cfg.early_abort

    @property
    def reuse(self) -> bool:
        """LR round under ``--schedule reuse`` or ``reuse+abort``: target rows start after the
        draft tokens the target would write itself."""
        return self.kind is RoundKind.LR and self.cfg.reuse_drafts

    @property
    def prefills_chain(self) -> bool:
        """The round's chain is prefilled on the target first (draft-prefix reuse, or a score round)."""
        return self.reuse or self.kind is RoundKind.SCORE


def plan_round(
    cfg: DecodeConfig,
    *,
    index: int,
    base: list[int],
    generated: int,
    controller=None,
    problem=None,
    horizon: int | None = None,
) -> RoundPlan:
    """The next round of a prompt decoded with ``cfg`` that has ``generated`` tokens after the
    prompt (``base``: prompt + them). Without a controller an LR method runs ``lr`` rounds (or
    ``score`` rounds under ``--schedule score``) at the config's depths, and ``target``/``sd``
    run ``target`` rounds of ``horizon`` tokens (None: the whole budget in one round; 0: one
    step per round). A controller picks (γ1, γ2) within its bounds, and, where it can, the kind
    of a γ1 > 0 round (``round_kind()``: lr or score); γ1 = 0 runs the target to its ``horizon()``."""
    budget = cfg.max_new_tokens - generated
    sd = cfg.sd_gamma2

    def target_round(g2: int, run: int | None) -> RoundPlan:
        return RoundPlan(RoundKind.TARGET, index, 0, g2, 1, budget, tuple(base), run, cfg)

    if not cfg.uses_lr:  # horizon 0: one step per round (a step-sized row, as LR's target rows)
        return target_round(sd, None if horizon == 0 else budget if horizon is None else max(1, min(horizon, budget)))
    own = RoundKind.SCORE if cfg.score_rounds else RoundKind.LR
    if controller is None:
        return RoundPlan(own, index, cfg.gamma1, sd, _width(own, cfg), budget, tuple(base), None, cfg)
    state = ControlState(round=index, generated_tokens=generated, budget_left=budget)
    g1, g2 = checked_choice(controller, controller.choose(problem, state))
    if not controller.bounds.allows(g1, g2):
        raise ConfigError(f"controller chose (γ1, γ2) = ({g1}, {g2}) outside its bounds {controller.bounds}")
    g2 = g2 if cfg.uses_sd else 0
    if g1 == 0:
        h = controller.horizon()
        return target_round(g2, budget if h is None else max(1, min(h, budget)))
    kind = own
    if callable(getattr(controller, "round_kind", None)):
        picked = controller.round_kind()
        if picked not in (RoundKind.LR.value, RoundKind.SCORE.value):
            raise ConfigError(f"controller chose round kind {picked!r}; expected lr or score")
        kind = RoundKind(picked)
    return RoundPlan(kind, index, g1, g2, _width(kind, cfg), budget, tuple(base), None, cfg)


def _width(kind: RoundKind, cfg: DecodeConfig) -> int:
    return cfg.width if kind is RoundKind.LR else 1
