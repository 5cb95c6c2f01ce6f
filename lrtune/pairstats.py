"""Pure statistics over collected step pairs: AUROC and verifier/teacher agreement."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence


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
    return {
        "n": len(kept),
        "accuracy": acc,
        "auroc": auroc([s for s, _ in kept], [y for _, y in kept]),
        "accept_rate": sum(s >= threshold for s, _ in kept) / len(kept),
    }


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


def bootstrap_interval(
    metric: Callable[[list[int]], float | None],
    groups: Sequence[str],
    reps: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float | None, float | None]:
    """Percentile ``level`` interval of ``metric(rows)`` over ``reps`` resamples of whole
    groups (problems) with replacement; ``rows`` are indices into ``groups``. Resamples on
    which the metric is undefined (None) are skipped; (None, None) if all are."""
    by: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        by.setdefault(g, []).append(i)
    keys, rng, vals = sorted(by), random.Random(seed), []
    for _ in range(reps if keys else 0):
        v = metric([i for k in rng.choices(keys, k=len(keys)) for i in by[k]])
        if v is not None:
            vals.append(v)
    if not vals:
        return None, None
    vals.sort()
    tail = (1.0 - level) / 2
    return vals[int(tail * (len(vals) - 1))], vals[int((1.0 - tail) * (len(vals) - 1))]


def agreement_intervals(
    scores: Sequence[float],
    labels: Sequence[bool],
    threshold: float,
    groups: Sequence[str],
    reps: int = 1000,
    seed: int = 0,
) -> dict[str, tuple[float | None, float | None]]:
    """95% bootstrap intervals (over problems) of the accuracy of ``score >= threshold``
    against ``labels``, of the AUROC and of the acceptance (share with ``score >= threshold``)."""

    def acc(rows: list[int]) -> float | None:
        return sum((scores[i] >= threshold) == bool(labels[i]) for i in rows) / len(rows) if rows else None

    def roc(rows: list[int]) -> float | None:
        return auroc([scores[i] for i in rows], [labels[i] for i in rows])

    def accepts(rows: list[int]) -> float | None:
        return sum(scores[i] >= threshold for i in rows) / len(rows) if rows else None

    return {
        "accuracy": bootstrap_interval(acc, groups, reps, seed),
        "auroc": bootstrap_interval(roc, groups, reps, seed),
        "acceptance": bootstrap_interval(accepts, groups, reps, seed),
    }
