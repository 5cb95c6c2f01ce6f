"""The backend protocol: batched step generation over token-id prefixes.

A backend owns one model (plus, for token-level speculative decoding, whatever engine
state it needs) and exposes four methods::

    encode_prompt(prompt) -> list[int]            # chat template applied once, up front
    decode(token_ids) -> str                      # text is derived, never re-encoded
    generate(prefixes, params, max_concurrent=None, on_done=None) -> GenBatch   # one batched call
    close()                                       # free engines

With ``params.stop_at_delimiter`` each output is one *step* (DESIGN §2, ``lrtune.steps``);
otherwise it runs until EOS or ``max_tokens``. ``params.num_speculative_tokens = γ2 > 0``
asks for token-level speculative decoding inside the call; greedy outputs must not change.

``params`` is one :class:`GenParams` for every row, or a sequence with one per row (rows
of many prompts in one call: each keeps its own budget, seed and γ2; see :func:`per_row`).
``max_concurrent`` caps the rows in flight at once (the engine admits the next row when
one finishes; ``None``: all at once). A row's output never depends on its batch (greedy).

``on_done(i, generation)``, when given, is called as each row ends (in the order rows end)
and returns the rows to stop now (an :data:`OnDone`): a stopped row's output is
:func:`aborted` (no tokens, ``finish="aborted"``). Early abort in LR rounds uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol, runtime_checkable

from lrtune.steps import DEFAULT_DELIMITER, first_step_end

Finish = Literal["delimiter", "eos", "length", "aborted"]


@dataclass(frozen=True)
class GenParams:
    """Sampling and stopping for one batched call.

    ``seeds`` gives one seed per prefix (sampling only); ``None`` means unseeded.
    """

    max_tokens: int
    stop_at_delimiter: bool = True
    delimiter: str = DEFAULT_DELIMITER
    temperature: float = 0.0
    top_p: float = 1.0
    seeds: tuple[int, ...] | None = None
    logprobs: bool = False
    num_speculative_tokens: int = 0
    # > 0: also return the k most likely tokens (id -> logprob) at every generated position
    top_logprobs: int = 0
    # not None: also score the prefix's own tokens from this index on (Generation.prompt_scores),
    # from the prefill the row runs anyway; rows of one loop may score from different indices
    score_from: int | None = None


@dataclass
class Generation:
    """One generated step (or completion): ids, derived text, why it ended, token logprobs."""

    token_ids: list[int]
    text: str
    finish: Finish
    logprobs: list[float] | None = None
    top_logprobs: list[dict[int, float]] | None = None  # with GenParams.top_logprobs = k
    # with GenParams.score_from: (logprob in nats, is the model's argmax) of every prefix token
    # from that index on, each given the tokens before it; None where the engine could not
    # score a token (vLLM: it sat in a reused prefix-cache block)
    prompt_scores: list[tuple[float, bool] | None] | None = None


OnDone = Callable[[int, Generation], Iterable[int]]  # (row, its output) -> rows to stop now


def aborted() -> Generation:
    """The output of a row that ``on_done`` stopped before it ended."""
    return Generation(token_ids=[], text="", finish="aborted")


def local_on_done(on_done: OnDone, idx: Sequence[int], stopped: set[int]) -> Callable[[int, Generation], list[int]]:
    """``on_done`` for a part of a call (a loop or an engine group) holding the call's rows
    ``idx``: local row ``k`` in, the local rows to stop out; every row ``on_done`` asks to stop
    is added to ``stopped`` (the call's set, so parts not yet started skip them)."""

    def local(k: int, gen: Generation) -> list[int]:
        stopped.update(set(on_done(idx[k], gen)) - {idx[k]})
        return [j for j, i in enumerate(idx) if i in stopped]

    return local


@dataclass
class SDCounters:
    """Token-level speculative decoding counters for one call (engine counter deltas).

    A pass drafts up to γ2 tokens and the target verifies them: it either accepts every token
    it drafted or stops at its first rejected one (``stopped`` counts those passes). Under the
    i.i.d. model (each draft token accepted with probability α2) a pass that accepted all its
    drafts is censored: it proves only that α2 did not fail within it. The maximum-likelihood
    α2 is therefore ``accepted / (accepted + stopped)`` (:attr:`alpha`), not the rate
    ``accepted / drafted``, which is E[min(X, γ2)]/γ2 < α2 under the same model.
    ``stopped=None`` derives it from passes of one length k = drafted_tokens / drafts (one
    engine step of one call): ``drafts − accepted_by_pos[k − 1]`` (k rounded when lengths
    mix, then an approximation)."""

    drafts: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    accepted_by_pos: list[int] = field(default_factory=list)
    stopped: int | None = None

    def __post_init__(self) -> None:
        if self.stopped is None:
            self.stopped = stopped_passes(self.drafts, self.drafted_tokens, self.accepted_by_pos)

    @property
    def alpha(self) -> float | None:
        """Per-token acceptance α2, censoring-aware: accepted / (accepted + stopped); None without passes."""
        n = self.accepted_tokens + (self.stopped or 0)
        return self.accepted_tokens / n if self.drafts and n else None

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / drafted tokens (vLLM's *draft acceptance rate*); None without drafts."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else None

    def observe(
        self,
        drafts: int,
        drafted_tokens: int,
        accepted_tokens: int,
        accepted_by_pos: Sequence[int] = (),
        stopped: int | None = None,
    ) -> None:
        """Add counts (one engine step's, or another counter's); ``stopped=None``: derived
        from these counts as in the class docstring."""
        if stopped is None:
            stopped = stopped_passes(drafts, drafted_tokens, accepted_by_pos)
        self.drafts += drafts
        self.drafted_tokens += drafted_tokens
        self.accepted_tokens += accepted_tokens
        self.stopped = (self.stopped or 0) + stopped
        if len(self.accepted_by_pos) < len(accepted_by_pos):
            self.accepted_by_pos.extend([0] * (len(accepted_by_pos) - len(self.accepted_by_pos)))
        for i, n in enumerate(accepted_by_pos):
            self.accepted_by_pos[i] += n

    def add(self, other: SDCounters) -> None:
        """Add another counter's counts."""
        self.observe(other.drafts, other.drafted_tokens, other.accepted_tokens, other.accepted_by_pos, other.stopped)

    def copy(self) -> SDCounters:
        return SDCounters(
            self.drafts, self.drafted_tokens, self.accepted_tokens, list(self.accepted_by_pos), self.stopped
        )

    def minus(self, earlier: SDCounters) -> SDCounters:
        """The counts since ``earlier`` (a copy of these counters taken before)."""
        old = earlier.accepted_by_pos + [0] * (len(self.accepted_by_pos) - len(earlier.accepted_by_pos))
        return SDCounters(
            self.drafts - earlier.drafts,
            self.drafted_tokens - earlier.drafted_tokens,
            self.accepted_tokens - earlier.accepted_tokens,
            [a - b for a, b in zip(self.accepted_by_pos, old)],
            (self.stopped or 0) - (earlier.stopped or 0),
        )


def stopped_passes(drafts: int, drafted_tokens: int, accepted_by_pos: Sequence[int]) -> int:
    """Passes that stopped at a rejection, from passes of one length k = drafted_tokens / drafts
    (rounded, at least 1): drafts − (passes that accepted position k), ``accepted_by_pos[k − 1]``
    (0 where the list is shorter)."""
    if drafts <= 0:
        return 0
    k = max(1, round(drafted_tokens / drafts))
    full = accepted_by_pos[k - 1] if k <= len(accepted_by_pos) else 0
    return max(0, drafts - full)


@dataclass
class GenBatch:
    """One call's outputs, its wall seconds and SD counters (``sd``: the call's total;
    ``row_sd``: per row — exact on the transformers backend, on vLLM the call's total split
    by :func:`split_counters`); ``row_seconds``: each row's seconds in flight (admission to
    end) where the call capped concurrency and the engine reports it (``None``: ``seconds``)."""

    outputs: list[Generation]
    seconds: float
    sd: SDCounters | None = None
    row_sd: list[SDCounters | None] | None = None
    row_seconds: list[float] | None = None


def per_row(params: GenParams | Sequence[GenParams], n: int) -> list[GenParams]:
    """One :class:`GenParams` per row, each with its own seed (``seeds`` of length 1 or None)."""
    if isinstance(params, GenParams):
        if params.seeds is not None and len(params.seeds) != n:
            raise ValueError("one seed per prefix is required")
        return [replace(params, seeds=None if params.seeds is None else (params.seeds[i],)) for i in range(n)]
    rows = list(params)
    if len(rows) != n:
        raise ValueError(f"{len(rows)} GenParams for {n} prefixes")
    if any(p.seeds is not None and len(p.seeds) != 1 for p in rows):
        raise ValueError("a per-row GenParams holds one seed (or None)")
    return rows


def row_groups(rows: Sequence[GenParams]) -> dict[GenParams, list[int]]:
    """Rows that can share one batched loop: same params except budget and seed.

    Key: the row's params with ``max_tokens=0``, ``seeds=None`` and ``score_from=None``;
    value: row indices in order.
    """
    groups: dict[GenParams, list[int]] = {}
    for i, p in enumerate(rows):
        groups.setdefault(replace(p, max_tokens=0, seeds=None, score_from=None), []).append(i)
    return groups


def split_counts(total: int, weights: Sequence[float]) -> list[int]:
    """Split an integer count in proportion to ``weights`` (largest remainder; sums to
    ``total``; equal weights when all are 0)."""
    if not weights:
        return []
    w = [max(0.0, float(x)) for x in weights]
    s = sum(w)
    if s <= 0:
        w, s = [1.0] * len(w), float(len(w))
    raw = [total * x / s for x in w]
    out = [int(r) for r in raw]
    for i in sorted(range(len(w)), key=lambda i: raw[i] - out[i], reverse=True)[: total - sum(out)]:
        out[i] += 1
    return out


def split_counters(total: SDCounters, weights: Sequence[float]) -> list[SDCounters]:
    """A call's SD counters split over its rows in proportion to ``weights`` (the tokens
    each row generated), field by field with :func:`split_counts`; the parts sum to ``total``."""
    parts = [SDCounters(accepted_by_pos=[0] * len(total.accepted_by_pos)) for _ in weights]
    for name in ("drafts", "drafted_tokens", "accepted_tokens", "stopped"):
        for part, n in zip(parts, split_counts(getattr(total, name), weights)):
            setattr(part, name, n)
    for pos, count in enumerate(total.accepted_by_pos):
        for part, n in zip(parts, split_counts(count, weights)):
            part.accepted_by_pos[pos] = n
    return parts


def time_shares(call: GenBatch, rows_of: Sequence[Sequence[int]]) -> list[float]:
    """A shared call's seconds split over groups of its rows in proportion to the tokens
    each group generated (equal shares over the groups with rows when none generated any)."""
    tokens = [sum(len(call.outputs[r].token_ids) for r in rows) for rows in rows_of]
    total = sum(tokens)
    n = sum(1 for rows in rows_of if rows)
    return [call.seconds * (t / total if total else (1 / n if rows else 0.0)) for t, rows in zip(tokens, rows_of)]


def row_counters(call: GenBatch) -> list[SDCounters | None] | None:
    """Per-row SD counters of a call: the backend's, else its call total split by generated tokens."""
    if call.row_sd is not None or call.sd is None:
        return call.row_sd
    return split_counters(call.sd, [len(o.token_ids) for o in call.outputs])


def add_counters(parts: Sequence[SDCounters | None]) -> SDCounters | None:
    """The sum of SD counters (``None`` when no part has any)."""
    real = [p for p in parts if p is not None]
    if not real:
        return None
    out = SDCounters()
    for p in real:
        out.add(p)
    return out


@runtime_checkable
class Backend(Protocol):
    """What decoders, verifiers and stages use of an engine: both backends and the test fake
    follow exactly this. ``concurrent_safe``: two threads may call ``generate`` at once
    (async LR overlaps draft and target calls only then)."""

    name: str
    eos_ids: frozenset[int]
    concurrent_safe: bool

    def encode_prompt(self, prompt: str, *, chat: bool = True) -> list[int]: ...

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str: ...

    def generate(
        self,
        prefixes: Sequence[Sequence[int]],
        params: GenParams | Sequence[GenParams],
        max_concurrent: int | None = None,
        on_done: OnDone | None = None,
    ) -> GenBatch: ...

    def start(self, num_speculative_tokens: int = 0) -> None:
        """Start what serving γ2 = ``num_speculative_tokens`` needs now (not at the first call)."""

    def close(self) -> None: ...


def finish_step(
    token_ids: Sequence[int], decode, params: GenParams, eos_ids: frozenset[int]
) -> tuple[list[int], Finish]:
    """Cut an engine's output at the step boundary of ``lrtune.steps`` and name the reason.

    Engines stop on the delimiter string themselves; this re-segmentation makes every
    backend agree on the boundary (a merged token like ``".\\n\\n"`` ends the step, EOS
    ends it, ``max_tokens`` ends it) and drops anything an engine emitted past it.
    """
    ids = list(token_ids)
    if params.stop_at_delimiter:
        n, why = first_step_end(
            ids, decode, delimiter=params.delimiter, eos_ids=eos_ids, max_step_tokens=params.max_tokens
        )
    else:
        n = next((i + 1 for i, t in enumerate(ids) if t in eos_ids), len(ids))
        n = min(n, params.max_tokens)
        why = "eos" if n and ids[n - 1] in eos_ids else "limit"
    ids = ids[:n]
    finish: Finish = "delimiter" if why == "delimiter" else "eos" if why == "eos" else "length"
    return ids, finish
