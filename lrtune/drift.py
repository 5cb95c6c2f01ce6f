"""Where two decodes that are equal in exact arithmetic part (pure functions).

Target-only, SD and LR with the ``never`` verifier compute one greedy function; on a real
engine each puts a token into a differently shaped call, and floating-point sums in another
order can flip a near tie (:mod:`lrtune.backends.vllm_exact`). :func:`pair_drift` summarises
how often, where, and what it did to the answers; ``benchmarks/lossless.py`` measures it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where two token sequences differ (None when equal; the shorter
    one's length when one is a prefix of the other)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(frozen=True)
class Decode:
    """One problem's decode: its tokens, extracted answer and whether it is right."""

    token_ids: tuple[int, ...]
    answer: str | None
    correct: bool


@dataclass(frozen=True)
class PairDrift:
    """How two decoding methods' outputs compare over the same problems.

    ``identical``: problems whose tokens agree exactly; ``first_difference_median``: the
    median token index where the others first part (None when all agree);
    ``answers_differ``: problems whose extracted answers differ; ``right_to_wrong`` /
    ``wrong_to_right``: correctness flips from the first method to the second."""

    problems: int
    identical: int
    first_difference_median: float | None
    answers_differ: int
    right_to_wrong: int
    wrong_to_right: int

    @property
    def identical_share(self) -> float:
        return self.identical / self.problems if self.problems else 1.0

    def as_dict(self) -> dict:
        return {**asdict(self), "identical_share": self.identical_share}


def pair_drift(first: Sequence[Decode], second: Sequence[Decode]) -> PairDrift:
    """:class:`PairDrift` of two methods' decodes of the same problems, in the same order."""
    if len(first) != len(second):
        raise ValueError(f"pair_drift: {len(first)} decodes against {len(second)}")
    parts = [first_difference(a.token_ids, b.token_ids) for a, b in zip(first, second)]
    where = [p for p in parts if p is not None]
    return PairDrift(
        problems=len(first),
        identical=sum(p is None for p in parts),
        first_difference_median=statistics.median(where) if where else None,
        answers_differ=sum(a.answer != b.answer for a, b in zip(first, second)),
        right_to_wrong=sum(a.correct and not b.correct for a, b in zip(first, second)),
        wrong_to_right=sum(b.correct and not a.correct for a, b in zip(first, second)),
    )
