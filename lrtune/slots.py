"""A prompt in flight and what decoding it gives back.

:class:`PromptState` is the one thing that changes from round to round (what the prompt
committed, its stats, its controller); a round itself is planned (:class:`lrtune.roundplan.RoundPlan`)
and run (:func:`lrtune.round.run_round`) from explicit inputs. The outputs: :class:`RoundRecord`
(everything one round compared and decided), :class:`DecodeResult`, and per prompt of a batch
:class:`Decoded` or :class:`Failed`."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Union

from lrtune.backends.base import Generation
from lrtune.control import Controller, ProblemInfo
from lrtune.decodeconfig import DecodeConfig
from lrtune.errors import ConfigError
from lrtune.stats import DecodeStats
from lrtune.verifiers import StepPair


class Decoded(NamedTuple):
    """One prompt decoded: its result and stats (unpacks as ``result, stats``)."""

    result: DecodeResult
    stats: DecodeStats


@dataclass(frozen=True)
class Failed:
    """One prompt that could not run (empty, or too long for the engine with its budget);
    the others of its batch ran. ``error`` says why."""

    error: ConfigError

    @property
    def message(self) -> str:
        return str(self.error)


PromptResult = Union[Decoded, Failed]


@dataclass(eq=False)
class PromptState:
    """One prompt in flight in :meth:`LookaheadDecoder.decode_many`: what it committed so far
    (``gen``, ``steps``), its round number, whether it ended, its stats and controller."""

    index: int
    prompt: list[int]
    stats: DecodeStats
    controller: Controller | None
    problem: ProblemInfo | None
    started: float
    gen: list[int] = field(default_factory=list)
    steps: list[tuple[str, list[int]]] = field(default_factory=list)
    rnd: int = 0
    done: bool = False
    cfg: DecodeConfig | None = None  # its own decode config (LookaheadDecoder.open_slot sets it)
    horizon: int | None = None  # target / sd slots: tokens per round (None: the whole budget; 0: one step)


@dataclass
class RoundRecord:
    """Everything one LR round compared and decided (for data collection and debugging)."""

    index: int
    prefix_len: int
    drafts: list[Generation]
    targets: list[Generation]
    scores: list[float]
    accepted: list[bool]
    committed_drafts: int
    draft_seconds: list[float]
    target_seconds: float
    verify_seconds: float
    # multi-branch drafting (width W): the chosen branch above; every branch below
    branch: int = 0
    branches: list[list[Generation]] = field(default_factory=list)
    branch_targets: list[list[Generation]] = field(default_factory=list)
    branch_scores: list[list[float]] = field(default_factory=list)
    branch_accepted: list[list[bool]] = field(default_factory=list)
    # the verifier's exact inputs, per branch and position (clean text, DESIGN §3.6)
    pairs: list[list[StepPair]] = field(default_factory=list)
    # (branch, position) pairs rejected without asking the verifier (exactly one step ends the answer)
    unasked: frozenset[tuple[int, int]] = frozenset()


@dataclass
class DecodeResult:
    """Generated ids (prompt excluded), derived text, why decoding ended, committed steps."""

    token_ids: list[int]
    text: str
    finish: Literal["eos", "length"]
    steps: list[tuple[str, list[int]]] = field(default_factory=list)  # (source, ids); source in draft|target


def stable_digest(data: str | Sequence[int]) -> str:
    """A stable 8-hex-digit id of a text or a token sequence (the same in every process,
    unlike ``hash``)."""
    text = data if isinstance(data, str) else ",".join(map(str, data))
    return hashlib.sha256(text.encode()).hexdigest()[:8]
