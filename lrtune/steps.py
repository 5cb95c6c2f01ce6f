"""Step segmentation of token ids (pure).

A reasoning *step* is a run of generated token ids that ends at

1. the first token whose decoded text *completes* the delimiter (default ``"\\n\\n"``):
   the delimiter may be a token of its own, be split over several tokens
   (``"\\n"`` + ``"\\n"``) or sit inside a bigger merged token (``".\\n\\n"``);
2. an end-of-sequence token; or
3. the ``max_step_tokens``-th token.

Only the step's own text is searched (never the prefix it continues), which is also
what vLLM's ``stop=[delimiter]`` does, so segmenting an engine's output again here gives
the same boundary. Token ids are the state (DESIGN §3.4): text is derived, never re-encoded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

Decode = Callable[[Sequence[int]], str]
StepEnd = Literal["delimiter", "eos", "limit", "open"]

DEFAULT_DELIMITER = "\n\n"


def first_step_end(
    token_ids: Sequence[int],
    decode: Decode,
    *,
    delimiter: str = DEFAULT_DELIMITER,
    eos_ids: Sequence[int] | frozenset[int] = (),
    max_step_tokens: int | None = None,
) -> tuple[int, StepEnd]:
    """Return ``(n, reason)``: the first step is ``token_ids[:n]``.

    ``reason`` is ``"delimiter"``, ``"eos"``, ``"limit"`` (``n == max_step_tokens``), or
    ``"open"`` when the ids run out before any end (then ``n == len(token_ids)``).
    Cost: one decode per token of the step (steps are short).
    """
    if not delimiter:
        raise ValueError("delimiter must be a non-empty string")
    if max_step_tokens is not None and max_step_tokens < 1:
        raise ValueError("max_step_tokens must be >= 1")
    eos = frozenset(eos_ids)
    # Cheap pre-check: an ASCII final delimiter char must appear in the new token's own
    # text (a non-ASCII one may be split across byte-level tokens, so always decode).
    last = delimiter[-1]
    precheck = last.isascii()
    for i, tok in enumerate(token_ids):
        n = i + 1
        if tok in eos:
            return n, "eos"
        if (not precheck or last in decode([tok])) and delimiter in decode(token_ids[:n]):
            return n, "delimiter"
        if max_step_tokens is not None and n >= max_step_tokens:
            return n, "limit"
    return len(token_ids), "open"


def split_steps(
    token_ids: Sequence[int],
    decode: Decode,
    *,
    delimiter: str = DEFAULT_DELIMITER,
    eos_ids: Sequence[int] | frozenset[int] = (),
    max_step_tokens: int | None = None,
) -> list[list[int]]:
    """Split generated ids into consecutive steps; their concatenation is ``token_ids``.

    Every step but the last ends at a delimiter, EOS or the token limit; the last may
    be open (unfinished). Nothing after an EOS is dropped: it starts a new step.
    """
    steps: list[list[int]] = []
    rest = list(token_ids)
    while rest:
        n, _ = first_step_end(rest, decode, delimiter=delimiter, eos_ids=eos_ids, max_step_tokens=max_step_tokens)
        steps.append(rest[:n])
        rest = rest[n:]
    return steps
