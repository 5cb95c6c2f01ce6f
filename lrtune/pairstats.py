"""Pure statistics over collected step pairs: AUROC and verifier/teacher agreement."""

from __future__ import annotations

import math
from collections.abc import Sequence


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Area under the ROC curve (scikit-learn's ``roc_auc_score``: P(score of a positive >
    score of a negative), ties 1/2); None without both classes among the non-NaN scores."""
    from sklearn.metrics import roc_auc_score

    kept = [(float(s), bool(y)) for s, y in zip(scores, labels) if s is not None and not math.isnan(s)]
    ys = [y for _, y in kept]
    if not kept or all(ys) or not any(ys):
        return None
    return float(roc_auc_score(ys, [s for s, _ in kept]))


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


def agreement_matrix(decisions: dict[str, Sequence[bool | None]]) -> dict[str, dict[str, float | None]]:
    """Pairwise agreement of binary decisions: share of rows (where both decided) on which
    ``a`` and ``b`` agree; ``matrix[a][a] = 1``."""
    out: dict[str, dict[str, float | None]] = {}
    for a, xs in decisions.items():
        out[a] = {}
        for b, ys in decisions.items():
            both = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
            out[a][b] = sum(bool(x) == bool(y) for x, y in both) / len(both) if both else None
    return out


def acceptance_on(mask: Sequence[bool], decisions: dict[str, Sequence[bool | None]]) -> dict[str, float | None]:
    """Each decider's accept rate on the rows where ``mask`` is true (e.g. identical pairs)."""
    out = {}
    for name, xs in decisions.items():
        kept = [bool(x) for x, m in zip(xs, mask) if m and x is not None]
        out[name] = sum(kept) / len(kept) if kept else None
    return out
