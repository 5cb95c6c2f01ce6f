"""The backend protocol: batched step generation over token-id prefixes.

A backend owns one model (plus, for token-level speculative decoding, whatever engine
state it needs) and exposes four methods::

    encode_prompt(prompt) -> list[int]            # chat template applied once, up front
    decode(token_ids) -> str                      # text is derived, never re-encoded
    generate(prefixes, params) -> GenBatch        # one batched call, one output per prefix
    close()                                       # free engines

With ``params.stop_at_delimiter`` each output is one *step* (DESIGN §2, ``lrtune.steps``);
otherwise it runs until EOS or ``max_tokens``. ``params.num_speculative_tokens = γ2 > 0``
asks for token-level speculative decoding inside the call; greedy outputs must not change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from lrtune.steps import DEFAULT_DELIMITER, first_step_end

Finish = Literal["delimiter", "eos", "length"]


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


@dataclass
class Generation:
    """One generated step (or completion): ids, derived text, why it ended, token logprobs."""

    token_ids: list[int]
    text: str
    finish: Finish
    logprobs: list[float] | None = None
    top_logprobs: list[dict[int, float]] | None = None  # with GenParams.top_logprobs = k


@dataclass
class SDCounters:
    """Token-level speculative decoding counters for one call (engine counter deltas)."""

    drafts: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    accepted_by_pos: list[int] = field(default_factory=list)


@dataclass
class GenBatch:
    outputs: list[Generation]
    seconds: float
    sd: SDCounters | None = None


@runtime_checkable
class Backend(Protocol):
    name: str
    eos_ids: frozenset[int]

    def encode_prompt(self, prompt: str, *, chat: bool = True) -> list[int]: ...

    def decode(self, token_ids: Sequence[int]) -> str: ...

    def generate(self, prefixes: Sequence[Sequence[int]], params: GenParams) -> GenBatch: ...

    def close(self) -> None: ...


def finish_step(token_ids: Sequence[int], decode, params: GenParams, eos_ids: frozenset[int]) -> tuple[list[int], Finish]:
    """Cut an engine's output at the step boundary of ``lrtune.steps`` and name the reason.

    Engines stop on the delimiter string themselves; this re-segmentation makes every
    backend agree on the boundary (a merged token like ``".\\n\\n"`` ends the step, EOS
    ends it, ``max_tokens`` ends it) and drops anything an engine emitted past it.
    """
    ids = list(token_ids)
    if params.stop_at_delimiter:
        n, why = first_step_end(ids, decode, delimiter=params.delimiter, eos_ids=eos_ids,
                                max_step_tokens=params.max_tokens)
    else:
        n = next((i + 1 for i, t in enumerate(ids) if t in eos_ids), len(ids))
        n = min(n, params.max_tokens)
        why = "eos" if n and ids[n - 1] in eos_ids else "limit"
    ids = ids[:n]
    finish: Finish = "delimiter" if why == "delimiter" else "eos" if why == "eos" else "length"
    return ids, finish
