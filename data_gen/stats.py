"""Pure statistics over collected step pairs: AUROC and verifier/teacher agreement."""

from __future__ import annotations

import math
from collections.abc import Sequence


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Area under the ROC curve = P(score of a positive > score of a negative), ties 1/2
    (Mann–Whitney U / (n+ · n−)); None without both classes or with NaN scores only."""
    pairs = [(s, bool(y)) for s, y in zip(scores, labels) if s is not None and not math.isnan(s)]
    pos = sum(y for _, y in pairs)
    neg = len(pairs) - pos
    if pos == 0 or neg == 0:
        return None
    pairs.sort(key=lambda t: t[0])
    rank_sum = 0.0
    i = 0
    while i < len(pairs):  # average ranks over ties
        j = i
        while j + 1 < len(pairs) and pairs[j + 1][0] == pairs[i][0]:
            j += 1
        avg = (i + j) / 2 + 1
        rank_sum += avg * sum(1 for k in range(i, j + 1) if pairs[k][1])
        i = j + 1
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


def agreement(scores: Sequence[float | None], labels: Sequence[bool], threshold: float) -> dict:
    """Accuracy of ``score >= threshold`` against the teacher labels, plus AUROC."""
    kept = [(s, y) for s, y in zip(scores, labels) if s is not None and not math.isnan(s)]
    if not kept:
        return {"n": 0, "accuracy": None, "auroc": None, "accept_rate": None}
    acc = sum((s >= threshold) == bool(y) for s, y in kept) / len(kept)
    return {"n": len(kept), "accuracy": acc, "auroc": auroc([s for s, _ in kept], [y for _, y in kept]),
            "accept_rate": sum(s >= threshold for s, _ in kept) / len(kept)}


def acceptance_by_position(positions: Sequence[int], labels: Sequence[bool]) -> list[float | None]:
    """Teacher accept rate per draft position (0-based positions -> list index)."""
    if not positions:
        return []
    n = max(positions) + 1
    tot, acc = [0] * n, [0] * n
    for p, y in zip(positions, labels):
        tot[p] += 1
        acc[p] += bool(y)
    return [a / t if t else None for a, t in zip(acc, tot)]
