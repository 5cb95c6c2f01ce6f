"""A judged step pair as flat columns and back: the one definition of what a verifier's input
looks like on disk, shared by collect's pair rows (lrtune.data_gen.collector), training's
examples (lrtune.train.data) and the pairs a decode judged (``pairs`` in evaluate's records).

Columns: ``context`` (problem statement, then the solution so far, as the verifier saw it),
``draft_step``, ``target_step`` (clean text), the target's likelihood of the draft step
(``draft_target_mean_logprob`` / ``_min_logprob`` / ``_argmax_share`` in nats and shares,
``draft_target_scored_tokens``), the draft's own confidence (``draft_mean_logprob``,
``draft_entropy``, nats) and ``draft_scored`` (the pair carried :class:`DraftScores` at all).
Rows without ``draft_scored`` (collect's parquet) carry scores only when the target scored
the step, as an LR round's pair does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from lrtune.verifiers.base import DraftScores, StepPair

TARGET_SCORE_COLUMNS = ("draft_target_mean_logprob", "draft_target_min_logprob", "draft_target_argmax_share")


def _num(x) -> float | None:
    """A finite float, or None (missing, NaN or not a number)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def pair_columns(pair: StepPair) -> dict:
    """The columns of ``pair`` (see module docstring); JSON-serialisable."""
    ds = pair.draft_scores
    return {
        "context": pair.context,
        "draft_step": pair.draft,
        "target_step": pair.target,
        "draft_scored": ds is not None,
        "draft_target_mean_logprob": ds.mean_logprob if ds else None,
        "draft_target_min_logprob": ds.min_logprob if ds else None,
        "draft_target_argmax_share": ds.argmax_share if ds else None,
        "draft_target_scored_tokens": ds.tokens if ds else None,
        "draft_mean_logprob": ds.draft_logprob if ds else None,
        "draft_entropy": ds.draft_entropy if ds else None,
    }


def draft_scores_of(row: Mapping) -> DraftScores | None:
    """The :class:`DraftScores` a row recorded. With ``draft_scored`` (decode records): exactly
    what the verifier saw. Without (collect's rows): scores only where the target scored the
    step; a scored row's missing min / argmax share read as NaN, which students refuse."""
    scored = row.get("draft_scored")
    mean = _num(row.get("draft_target_mean_logprob"))
    if scored is None:
        if mean is None:
            return None
        tail = lambda k: math.nan if _num(row.get(k)) is None else _num(row[k])  # noqa: E731
        lo, share = tail("draft_target_min_logprob"), tail("draft_target_argmax_share")
    elif not scored:
        return None
    else:
        lo, share = _num(row.get("draft_target_min_logprob")), _num(row.get("draft_target_argmax_share"))
    tokens = _num(row.get("draft_target_scored_tokens"))
    return DraftScores(
        mean,
        lo,
        share,
        int(tokens) if tokens is not None else 0,
        draft_logprob=_num(row.get("draft_mean_logprob")),
        draft_entropy=_num(row.get("draft_entropy")),
    )


def pair_from_columns(row: Mapping) -> StepPair:
    """The :class:`StepPair` of a row written by :func:`pair_columns` or by collect."""
    return StepPair(
        context=row.get("context") or "",
        draft=row["draft_step"],
        target=row["target_step"],
        draft_scores=draft_scores_of(row),
    )


def judged_pairs(record) -> list[dict]:
    """Every pair one LR round (a :class:`~lrtune.slots.RoundRecord`) judged, branch by
    branch, position by position: the pair's columns, its score and verdict, and ``asked``
    (False: rejected unasked, score 0, because exactly one step ends the answer)."""
    out = []
    branches = record.pairs or []
    scores = record.branch_scores or [record.scores]
    verdicts = record.branch_accepted or [record.accepted]
    for w, chain in enumerate(branches):
        for k, pair in enumerate(chain):
            if k >= len(scores[w]):
                break  # early abort: positions after the first rejected row were never judged
            out.append(
                {
                    "round": record.index,
                    "branch": w,
                    "position": k,
                    "chosen": w == record.branch,
                    "score": float(scores[w][k]),
                    "accepted": bool(verdicts[w][k]),
                    "asked": (w, k) not in record.unasked,
                    **pair_columns(pair),
                }
            )
    return out
