"""The methods an evaluate run compares, parsed once from their labels into
:class:`MethodSpec` (``lr+sd/async/w=2/v=llm_judge``; ``str(spec)`` gives the label back)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lrtune.decodeconfig import GAMMA_MAX, METHODS, DecodeConfig, ScheduleFlags, schedule_of
from lrtune.errors import ConfigError


# lr+sd whose depths come from a controller: per round (adaptive, needs --controller), per
# problem from its measured α under the speedup model (oracle, after lr+sd on the problem),
# or the best fixed pair on the controller's training data (best-fixed).
CONTROLLED = ("adaptive", "oracle", "best-fixed")
# auto: target, sd or adaptive, chosen per machine and verifier before any model loads (policies.auto)
AUTO = "auto"


# method options in a label and the schedule each names (lrtune.decodeconfig)
SCHEDULE_OPTIONS = {
    "async": "async",
    "abort": "abort",
    "reuse": "reuse",
    "reuse+abort": "reuse+abort",
    "score": "score",
}
# adaptive options naming the rounds its controller may pick per round (SD alone, γ1 = 0, always)
ADAPTIVE_KINDS = {"lr": ("lr",), "score": ("score",), "lr+score": ("lr", "score")}
# kinds that name an LR kind with the score schedule (lrtune.score_round)
SCORE_KINDS = {"score": "lr", "score+sd": "lr+sd"}


@dataclass(frozen=True)
class MethodSpec(ScheduleFlags):
    """One evaluated method, parsed once from its label: a decode ``kind`` with its γ1/γ2,
    the LR ``schedule``, ``width`` draft branches, a ``verifier`` other than the run's, or a
    ``control`` (adaptive | oracle | best-fixed: lr+sd with depths from a controller, the
    run's or ``controller``). ``str(spec)`` is its canonical label and parses back to the
    same spec; ``label`` is the one the user wrote (records and reports key on it).

    Label grammar: ``KIND[/OPTION...]`` with options ``async``, ``abort``, ``reuse``,
    ``reuse+abort``, ``score`` (a schedule), ``w=N`` and ``v=VERIFIER``; the kinds ``score``
    and ``score+sd`` are ``lr/score`` and ``lr+sd/score``; ``v=`` comes last and takes the
    rest of the label, so a checkpoint path may hold slashes. ``adaptive/c=CONTROLLER`` names
    another controller the same way; ``adaptive/score`` and ``adaptive/lr+score`` let the
    controller pick score rounds (or either kind) per round, besides SD alone (γ1 = 0).
    """

    label: str
    kind: str
    gamma1: int
    gamma2: int
    schedule: str = "sync"
    width: int = 1
    verifier: str | None = None
    control: str | None = None  # adaptive | oracle | best-fixed: lr+sd with depths from a controller
    controller: str | None = None  # adaptive/c=SPEC: this controller instead of the run's --controller
    round_kinds: tuple[str, ...] = ("lr",)  # adaptive/score, adaptive/lr+score: the rounds its controller may pick
    auto_reason: str | None = None  # an auto row, resolved: why auto runs what it runs (policies.auto)

    def __str__(self) -> str:
        if self.control is not None:
            if self.controller:
                return f"{self.control}/c={self.controller}"
            kinds = [] if self.round_kinds == ("lr",) else ["+".join(self.round_kinds)]
            return "/".join([self.control, *kinds, *([f"v={self.verifier}"] if self.verifier else [])])
        opts = ([self.schedule] if self.schedule != "sync" else []) + ([f"w={self.width}"] if self.width != 1 else [])
        opts += [f"v={self.verifier}"] if self.verifier else []
        return "/".join([self.kind, *opts])

    def lossless(self, run_verifier: str) -> bool:
        """True when this row equals target-only greedy in exact arithmetic: sd, or lr / lr+sd
        whose verifier (``run_verifier`` unless its own) is ``never``; its changed answers
        against target-only are then the numeric floor (``benchmarks/lossless``)."""
        if self.control is not None:
            return False
        return self.kind == "sd" or (self.kind in ("lr", "lr+sd") and (self.verifier or run_verifier) == "never")

    def decode_config(self, base: DecodeConfig) -> DecodeConfig:
        """``base`` with this method's kind, depths and width; the schedule is the method's,
        with the run's early abort and reuse added (``--schedule abort`` makes every sync
        method abort early; ``lr/reuse`` then runs ``reuse+abort``)."""
        schedule = (
            "score"
            if self.schedule == "score"
            else schedule_of(
                async_lr=self.async_lr,
                early_abort=self.early_abort or base.early_abort,
                reuse_drafts=self.reuse_drafts or base.reuse_drafts,
            )
        )
        return dataclasses.replace(
            base,
            method=self.kind,
            gamma1=max(1, self.gamma1),
            gamma2=max(1, self.gamma2),
            width=self.width,
            schedule=schedule,
        )


def parse_method(label: str, gamma1: int, gamma2: int) -> MethodSpec:
    """``"lr+sd/async/w=2/v=llm_judge"`` -> :class:`MethodSpec` (its grammar there)."""
    if label.startswith("adaptive/c=") and label[len("adaptive/c=") :].strip():
        return MethodSpec(
            label, "lr+sd", gamma1, gamma2, control="adaptive", controller=label[len("adaptive/c=") :].strip()
        )
    if label.strip() == AUTO:
        return MethodSpec(label, "lr+sd", gamma1, gamma2, control=AUTO)
    head, sep, vspec = label.partition("/v=")
    kind, *opts = [x.strip() for x in head.split("/")]
    if sep:
        opts.append("v=" + vspec.strip())
    if kind in CONTROLLED and not opts:
        return MethodSpec(label, "lr+sd", gamma1, gamma2, control=kind)
    if kind == "adaptive":  # adaptive/score, adaptive/lr+score (round kinds), /v=VERIFIER
        kinds, verifier = ("lr",), None
        for opt in opts:
            if opt in ADAPTIVE_KINDS:
                kinds = ADAPTIVE_KINDS[opt]
            elif opt.startswith("v=") and opt[2:]:
                verifier = opt[2:]
            else:
                raise ConfigError(f"bad adaptive option {opt!r} in {label!r} (score | lr+score | v=VERIFIER)")
        return MethodSpec(
            label,
            "lr+sd",
            gamma1,
            gamma2,
            schedule="score" if kinds == ("score",) else "sync",
            verifier=verifier,
            control="adaptive",
            round_kinds=kinds,
        )
    if kind in SCORE_KINDS:  # "score+sd/v=..." reads as "lr+sd/score/v=..."
        kind, opts = SCORE_KINDS[kind], ["score", *opts]
    if kind not in METHODS:
        raise ConfigError(
            f"unknown method {kind!r} in {label!r}; choose from "
            f"{', '.join((*METHODS, *SCORE_KINDS, *CONTROLLED, AUTO))}"
        )
    extra: dict = {}
    for opt in opts:
        key, _, val = opt.partition("=")
        if opt in SCHEDULE_OPTIONS and "schedule" not in extra:
            extra["schedule"] = SCHEDULE_OPTIONS[opt]
        elif {opt, extra.get("schedule")} == {"abort", "reuse"}:
            extra["schedule"] = "reuse+abort"  # lr/reuse/abort reads as reuse+abort
        elif key == "w" and val.isdigit():
            extra["width"] = int(val)
        elif key == "v" and val:
            extra["verifier"] = val
        else:
            raise ConfigError(
                f"bad method option {opt!r} in {label!r} (async | abort | reuse | reuse+abort | score | "
                "w=N | v=VERIFIER)"
            )
    if extra and kind not in ("lr", "lr+sd"):
        raise ConfigError(f"method options apply to lr and lr+sd only: {label!r}")
    return MethodSpec(label, kind, gamma1 if "lr" in kind else 0, gamma2 if kind in ("sd", "lr+sd") else 0, **extra)


def resolved_auto(spec: MethodSpec, choice, controller: str | None) -> MethodSpec:
    """The ``auto`` row ``spec`` as what ``choice`` (:class:`policies.auto.AutoChoice`) runs, under
    the same label: target-only, SD at the run's γ2, or adaptive with ``controller`` (None: the run's)."""
    if choice.method == "target":
        return MethodSpec(spec.label, "target", 0, 0, auto_reason=choice.reason)
    if choice.method == "sd":
        return MethodSpec(spec.label, "sd", 0, spec.gamma2, auto_reason=choice.reason)
    return MethodSpec(
        spec.label,
        "lr+sd",
        spec.gamma1,
        spec.gamma2,
        control="adaptive",
        controller=controller,
        auto_reason=choice.reason,
    )


def parse_methods(methods: str, sweep: str | None, gamma1: int, gamma2: int) -> list[MethodSpec]:
    """Method specs from ``--methods`` and ``--sweep``; target-only is always first."""
    names = [m.strip() for m in methods.split(",")]
    if not any(names) and not sweep:
        raise ConfigError("--methods: empty; name at least one of target, sd, lr, lr+sd (target runs first anyway)")
    if methods.strip() and not all(names):
        raise ConfigError(f"--methods {methods[:80]!r}: an empty entry between commas")
    twice = next((m for i, m in enumerate(names) if m and m in names[:i]), None)
    if twice is not None:
        raise ConfigError(f"--methods: {twice!r} is listed twice")
    specs = [parse_method(m, gamma1, gamma2) for m in dict.fromkeys(["target", *filter(None, names)])]
    if sweep:
        grid = parse_sweep(sweep)
        labels = {s.label for s in specs}
        for g1 in grid.get("gamma1", [gamma1]):
            for g2 in grid.get("gamma2", [gamma2]):
                kind = "lr+sd" if g1 and g2 else "lr" if g1 else "sd" if g2 else "target"
                if kind == "target":
                    continue
                spec = MethodSpec(f"{kind}[g1={g1},g2={g2}]", kind, g1, g2)
                if spec.label not in labels:
                    specs.append(spec)
                    labels.add(spec.label)
    return specs


def parse_sweep(text: str) -> dict[str, list[int]]:
    """``"gamma1=1,2,4 gamma2=0,2"`` -> ``{"gamma1": [1, 2, 4], "gamma2": [0, 2]}``."""
    grid: dict[str, list[int]] = {}
    for part in text.replace(";", " ").split():
        key, _, values = part.partition("=")
        if key not in ("gamma1", "gamma2") or not values:
            raise ConfigError(f"bad --sweep item {part!r}; expected gamma1=1,2,4 and/or gamma2=0,2,4")
        try:
            vals = [int(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise ConfigError(f"bad --sweep values in {part!r}: integers expected") from None
        if any(v < 0 or v > GAMMA_MAX for v in vals):
            raise ConfigError(f"--sweep values must be in 0..{GAMMA_MAX}: {part!r}")
        grid[key] = vals
    if not grid:
        raise ConfigError("empty --sweep")
    return grid
