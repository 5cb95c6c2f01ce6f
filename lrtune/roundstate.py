"""What the sync LR decoder keeps per prompt in flight, and per round, as named objects:
:class:`PromptState` (the prompt, what it committed, its stats and controller) holds one
:class:`RoundState` (this round's depths, draft chains, target steps and verdicts), made
fresh at the start of every round. The outputs: :class:`RoundRecord` (everything one round
compared and decided) and :class:`DecodeResult`. Helpers that lay out a round's rows."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Union

from lrtune.backends.base import GenBatch, Generation, SDCounters, split_counters
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


@dataclass
class RoundState:
    """One prompt's current round (:meth:`start` makes it fresh each round)."""

    cfg: DecodeConfig  # this round's (the controller's γ1/γ2 applied)
    budget: int  # tokens left before this round
    base: list[int]  # prompt + committed tokens: every row of the round starts here
    horizon: int | None = None  # γ1 = 0: tokens the target runs uninterrupted this round
    chains: list[list[Generation]] = field(default_factory=list)  # draft chains, one per branch
    draft_secs: list[float] = field(default_factory=list)
    targets: list[list[Generation | None]] = field(default_factory=list)  # target step per (branch, position)
    target_s: float = 0.0
    round_sd: SDCounters | None = None
    pairs: list[list[StepPair]] = field(default_factory=list)
    verdicts: list[list[bool]] = field(default_factory=list)
    scores: list[list[float]] = field(default_factory=list)
    verify_s: float = 0.0
    judged: dict[int, tuple[bool, float, StepPair]] = field(default_factory=dict)  # early abort: position -> verdict
    unasked: set[tuple[int, int]] = field(default_factory=set)  # (branch, position) rejected without asking
    matched: list[int] = field(default_factory=list)  # reuse: leading target-argmax tokens of each draft step
    chain_scores: list[list] = field(default_factory=list)  # reuse: the prefill's scores of each draft step
    prefill_s: float = 0.0  # reuse: this prompt's share of the prefill call

    @classmethod
    def start(cls, cfg: DecodeConfig, budget: int, base: list[int], horizon: int | None) -> RoundState:
        width = cfg.width
        return cls(
            cfg=cfg,
            budget=budget,
            base=base,
            horizon=horizon,
            chains=[[] for _ in range(width)],
            verdicts=[[] for _ in range(width)],
            scores=[[] for _ in range(width)],
        )


@dataclass(eq=False)
class PromptState:
    """One prompt in flight in :meth:`LookaheadDecoder.decode_many`: what it committed so far
    and its current :class:`RoundState`."""

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
    round: RoundState | None = None
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


def _time_shares(call: GenBatch, rows_of: list[list[int]]) -> list[float]:
    """A shared call's seconds split over groups of its rows in proportion to the tokens
    each group generated (equal shares over the groups with rows when none generated any)."""
    tokens = [sum(len(call.outputs[r].token_ids) for r in rows) for rows in rows_of]
    total = sum(tokens)
    n = sum(1 for rows in rows_of if rows)
    return [call.seconds * (t / total if total else (1 / n if rows else 0.0)) for t, rows in zip(tokens, rows_of)]


def _row_counters(call: GenBatch) -> list[SDCounters | None] | None:
    """Per-row SD counters: the backend's, else its call total split by generated tokens."""
    if call.row_sd is not None or call.sd is None:
        return call.row_sd
    return split_counters(call.sd, [len(o.token_ids) for o in call.outputs])


def stable_digest(data: str | Sequence[int]) -> str:
    """A stable 8-hex-digit id of a text or a token sequence (the same in every process,
    unlike ``hash``)."""
    text = data if isinstance(data, str) else ",".join(map(str, data))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _branch_temperature(w: int, cfg: DecodeConfig) -> float:
    return cfg.temperature if (w == 0 or cfg.temperature > 0) else cfg.branch_temperature


def _target_rows(
    base: list[int],
    chains: list[list[Generation]],
    budget: int,
    eos: frozenset[int],
    matched: list[int] | None = None,
    last: int | None = None,
) -> tuple[list[list[int]], dict[tuple[int, int], int], list[int | None], list[tuple[int, int]]]:
    """Distinct target prefixes ``base + chain_w[:k]``, the row of each (w, k), where each
    row's last draft step starts (None for the row of position 0), and each row's
    ``(k, reused)``.

    Position k runs for k = 0..len(chain_w); the bonus position k = len(chain_w) is
    skipped when the chain ended the sequence (the target's ``eos``) or the token budget. With
    draft-prefix reuse (``matched``, chain 0 only) position k < len(chain) continues after ``matched[k]``
    draft tokens and needs no row when that is the whole draft step; ``last``: no rows
    after this position (an early verdict already rejected it).
    """
    rows: list[list[int]] = []
    froms: list[int | None] = []
    reused: list[tuple[int, int]] = []
    index: dict[tuple[int, ...], int] = {}
    where: dict[tuple[int, int], int] = {}
    for w, chain in enumerate(chains):
        drafted = sum(len(d.token_ids) for d in chain)
        ends = bool(chain) and (chain[-1].token_ids[-1] in eos or drafted >= budget)
        for k in range(len(chain) if ends else len(chain) + 1):
            if last is not None and k > last:
                break
            prefix = base + _concat(chain[:k])
            m = matched[k] if (matched is not None and k < len(chain)) else 0
            if m and m >= len(chain[k].token_ids):
                continue  # the target's step is the draft step itself
            if m:
                prefix += list(chain[k].token_ids[:m])
            key = tuple(prefix)
            if key not in index:
                index[key] = len(rows)
                rows.append(prefix)
                froms.append(len(prefix) - len(chain[k - 1].token_ids) if (k and not m) else None)
                reused.append((k, m))
            where[w, k] = index[key]
    return rows, where, froms, reused


def _reusable(matched: int, step: Generation, eos: frozenset[int]) -> int:
    """Draft-prefix reuse: the matched tokens of a draft step the target's step may start with;
    a step cut by a draft-only EOS (not in the target's ``eos``) keeps one token back, so its
    row runs on past the point where the target's step does not end."""
    n = len(step.token_ids)
    return min(matched, n - 1) if step.finish == "eos" and step.token_ids[-1] not in eos else matched


def _refuse_async_extras(on_round, controller) -> None:
    """Async LR keeps no round records and fixed depths: refuse ``on_round`` and a controller."""
    if on_round is not None:
        raise ConfigError("async LR keeps no round records (on_round): use --schedule sync")
    if controller is not None:
        raise ConfigError("a controller drives sync LR rounds; async LR keeps fixed depths")


def _concat(steps: Sequence[Generation]) -> list[int]:
    out: list[int] = []
    for s in steps:
        out.extend(s.token_ids)
    return out
