"""How to decode one prompt (:class:`DecodeConfig`): the method, the depths γ1/γ2, sampling,
and how LR rounds run (:data:`Schedule`) and what they record (:data:`Recording`).

A schedule is one value, not a set of switches, so options that cannot go together cannot
be spelled: ``sync`` (draft γ1 steps, one target batch, verify, commit), ``async`` (pipelined:
a target step starts as soon as its draft prefix exists), ``abort`` (sync; each position is
judged as soon as its target row ends and the rows a rejection makes useless stop),
``reuse`` (sync, greedy; one prefill of the draft chain finds the leading tokens of each
draft step that the target would write itself, and each target row starts after them:
:mod:`lrtune.reuse`), ``reuse+abort``, and ``score`` (the target prefills the draft chain
and a one-sided verifier judges each draft step from that prefill, without generating the
target's own steps; then the target writes the step after the accepted prefix:
:mod:`lrtune.score_round`). Every field's type states its range
(:mod:`lrtune.schema`); both they and the few rules that remain between options (width,
temperature) are checked when a config is built.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Annotated, Literal

from annotated_types import Interval
from pydantic import StringConstraints

from lrtune import schema
from lrtune.errors import ConfigError
from lrtune.schema import NO_NUL, STRICT, Checked, Count, Gamma, Seed, Size
from lrtune.steps import DEFAULT_DELIMITER

Method = Literal["target", "sd", "lr", "lr+sd"]
METHODS: tuple[str, ...] = ("target", "sd", "lr", "lr+sd")
Schedule = Literal["sync", "async", "abort", "reuse", "reuse+abort", "score"]
SCHEDULES: tuple[str, ...] = ("sync", "async", "abort", "reuse", "reuse+abort", "score")
Recording = Literal["steps", "logprobs", "draft_scores", "logprobs+draft_scores"]
GAMMA_MAX = 16

# the flags and YAML keys of the switches a schedule replaced: they still work, with a
# warning naming the lrtune version that removes them
LEGACY_REMOVED_IN = "0.3.0"
LEGACY_SWITCHES = {
    "async_lr": ("--async", "async"),
    "early_abort": ("--early-abort", "abort"),
    "reuse_drafts": ("--reuse-drafts", "reuse"),
}
LEGACY_RECORDING = {"logprobs": ("--logprobs", "logprobs"), "score_drafts": ("--score-drafts", "draft_scores")}


def schedule_of(*, async_lr: bool = False, early_abort: bool = False, reuse_drafts: bool = False) -> str:
    """The schedule the old switches spelled; ConfigError for a combination no schedule is."""
    if async_lr and (early_abort or reuse_drafts):
        raise ConfigError("async LR does not combine with early abort or draft-prefix reuse: pick one --schedule")
    if async_lr:
        return "async"
    return {(False, False): "sync", (True, False): "abort", (False, True): "reuse", (True, True): "reuse+abort"}[
        (bool(early_abort), bool(reuse_drafts))
    ]


def recording_of(*, logprobs: bool = False, score_drafts: bool = False) -> str:
    return {
        (False, False): "steps",
        (True, False): "logprobs",
        (False, True): "draft_scores",
        (True, True): "logprobs+draft_scores",
    }[(bool(logprobs), bool(score_drafts))]


class ScheduleFlags:
    """What a ``schedule`` attribute means for the decoder, as read-only switches."""

    schedule: str

    @property
    def async_lr(self) -> bool:
        return self.schedule == "async"

    @property
    def early_abort(self) -> bool:
        return self.schedule in ("abort", "reuse+abort")

    @property
    def reuse_drafts(self) -> bool:
        return self.schedule in ("reuse", "reuse+abort")

    @property
    def score_rounds(self) -> bool:
        return self.schedule == "score"


@dataclass
class DecodeConfig(Checked, ScheduleFlags):
    """How to decode one prompt (module docstring)."""

    __pydantic_config__ = STRICT
    LEGACY_REMOVED_IN = LEGACY_REMOVED_IN
    LEGACY_FLAGS = {
        **{k: (flag, f"--schedule {v}") for k, (flag, v) in LEGACY_SWITCHES.items()},
        **{k: (flag, f"--record {v}") for k, (flag, v) in LEGACY_RECORDING.items()},
    }

    method: Method = field(default="lr+sd", metadata={"help": "target | sd | lr | lr+sd"})
    gamma1: Gamma = field(default=3, metadata={"help": f"draft steps per LR round (1..{GAMMA_MAX})"})
    gamma2: Gamma = field(default=4, metadata={"help": f"draft tokens per SD iteration (1..{GAMMA_MAX}); sd and lr+sd"})
    max_new_tokens: Count = field(default=512, metadata={"help": "generated-token budget per prompt"})
    max_step_tokens: Count = field(default=128, metadata={"help": "a step ends after this many tokens at the latest"})
    temperature: Annotated[float, Interval(ge=0, le=100)] = field(default=0.0, metadata={"help": "0 = greedy"})
    top_p: Annotated[float, Interval(gt=0, le=1)] = field(
        default=1.0, metadata={"help": "nucleus sampling mass (temperature > 0)"}
    )
    seed: Seed = field(default=0, metadata={"help": "seed of all sampling (per round and position)"})
    delimiter: Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=NO_NUL)] = field(
        default=DEFAULT_DELIMITER, metadata={"help": "step delimiter"}
    )
    context_tokens: Size = field(
        default=256,
        metadata={
            "help": "tokens of the solution so far shown to the verifier (the problem statement is always shown whole)"
        },
    )
    width: Annotated[int, Interval(ge=1, le=8)] = field(
        default=1, metadata={"help": "W: draft branches per LR round (each up to gamma1 steps; sync schedule)"}
    )
    branch_temperature: Annotated[float, Interval(gt=0, le=100)] = field(
        default=0.8, metadata={"help": "sampling temperature of branches >= 1 when temperature is 0"}
    )
    schedule: Schedule = field(
        default="sync",
        metadata={
            "help": "how LR rounds run: sync | async (pipelined) | abort (sync; judge each position as its target row "
            "ends, stop the rows a rejection makes useless) | reuse (sync, greedy; target rows start after the "
            "draft tokens the target would write itself) | reuse+abort | score (the target prefills the draft "
            "chain and a one-sided verifier judges each draft step from it; then the target writes its own "
            "next step). Old flags --async, --early-abort, --reuse-drafts still work"
        },
    )
    draft_stop: Annotated[float, Interval(le=0)] | None = field(
        default=None,
        metadata={
            "help": "draft-side early stop: a draft chain ends after a step whose mean log-probability under the draft "
            "is below this (nats), so no time goes into steps after one the draft doubts (sync, abort and "
            "score schedules; default: off)"
        },
    )
    record: Recording = field(
        default="steps",
        metadata={
            "help": "what LR rounds keep besides the steps: logprobs (per-token, for collect features), draft_scores "
            "(the target's log-probabilities of each draft step, read off the prefill of the row that follows "
            "it; on whenever the verifier reads them), or both. Old flags --logprobs, --score-drafts still work"
        },
    )

    @property
    def uses_lr(self) -> bool:
        return self.method in ("lr", "lr+sd")

    @property
    def uses_sd(self) -> bool:
        return self.method in ("sd", "lr+sd")

    @property
    def sd_gamma2(self) -> int:
        """γ2 of this method's target calls: ``gamma2`` with SD, 0 (no SD) for target and lr.
        The one place a method's name turns into γ2; everything after reads γ2 = 0 as "no SD"."""
        return self.gamma2 if self.uses_sd else 0

    def tokens_needed(self, prompt_tokens: int) -> int:
        """Context a prompt of ``prompt_tokens`` needs: the prompt, the budget, and for LR one
        step more (a round's rows may run a step past the budget)."""
        return prompt_tokens + self.max_new_tokens + (self.max_step_tokens if self.uses_lr else 0)

    # what the recording means, for the decoder
    @property
    def logprobs(self) -> bool:
        return self.record in ("logprobs", "logprobs+draft_scores")

    @property
    def score_drafts(self) -> bool:
        return self.record in ("draft_scores", "logprobs+draft_scores")

    @staticmethod
    def legacy_values(values: dict) -> dict:
        """``values`` (flags or YAML keys) with the old switches (``async_lr``, ``early_abort``,
        ``reuse_drafts``, ``logprobs``, ``score_drafts``) folded into ``schedule`` and ``record``;
        an explicit ``schedule``/``record`` must agree."""
        old = {k: values.pop(k) for k in (*LEGACY_SWITCHES, *LEGACY_RECORDING) if k in values}
        on = {k for k, v in old.items() if v}
        if any(not isinstance(v, bool) for v in old.values()):
            bad = next(k for k, v in old.items() if not isinstance(v, bool))
            raise ConfigError(f"{bad}: must be true or false, got {old[bad]!r}")
        if on & set(LEGACY_SWITCHES):
            sched = schedule_of(**{k: True for k in on & set(LEGACY_SWITCHES)})
            if values.get("schedule", sched) != sched:
                raise ConfigError(
                    f"--schedule {values['schedule']} contradicts "
                    + " ".join(LEGACY_SWITCHES[k][0] for k in sorted(on & set(LEGACY_SWITCHES)))
                )
            values["schedule"] = sched
        if on & set(LEGACY_RECORDING):
            rec = recording_of(**{k: True for k in on & set(LEGACY_RECORDING)})
            if values.get("record", rec) != rec:
                raise ConfigError(
                    f"--record {values['record']} contradicts "
                    + " ".join(LEGACY_RECORDING[k][0] for k in sorted(on & set(LEGACY_RECORDING)))
                )
            values["record"] = rec
        return values

    def validate(self) -> DecodeConfig:
        """The schema (types, ranges, choices) and the rules between options, again (both ran when
        this config was built; this catches a change since); returns self."""
        schema.check(self)
        self.check_rules()
        return self

    def check_asked(self, options: Collection[str] = ("method", "schedule")) -> DecodeConfig:
        """The rules of a config as a user asks for it, where ``options`` are the options the user
        could set (a command's flags, a request's fields); returns self. Not in
        :meth:`check_rules`: the configs lrtune derives from a user's may break them (evaluate's
        target and sd rows under ``--schedule abort``, what ``--method auto`` picks, a
        controller's rounds: :meth:`for_round`), and a command whose method is its own
        (evaluate's ``--methods``) offers no ``method``."""
        if "method" in options and "schedule" in options and self.schedule != "sync" and not self.uses_lr:
            raise ConfigError(
                f"--schedule {self.schedule} applies to lr and lr+sd only; --method {self.method} has no draft steps"
            )
        return self

    def check_rules(self) -> None:
        """The rules between options; ConfigError on the first one broken."""
        if self.width > 1 and self.schedule != "sync":
            raise ConfigError(f"--schedule {self.schedule} runs one branch: drop --width {self.width}")
        if self.reuse_drafts and self.temperature > 0:
            raise ConfigError("draft-prefix reuse needs greedy decoding (temperature 0): --schedule sync or abort")
        if self.reuse_drafts and self.logprobs:
            raise ConfigError(
                "draft-prefix reuse keeps no per-token logprobs of the reused target tokens: "
                "--record steps or draft_scores, or --schedule sync"
            )
        if self.draft_stop is not None and self.async_lr:
            raise ConfigError(
                "--draft-stop ends the chains of sync rounds: use --schedule sync, abort or score (not async)"
            )
        if self.score_drafts and self.async_lr:
            raise ConfigError("draft-step scores come from sync LR's target rows: use --schedule sync (not async)")
