"""The verifier protocol: score (draft step, target step) pairs in [0, 1].

A draft step is *accepted* when ``score >= threshold``. Verifiers never see token ids:
they judge the derived text of the two steps and, optionally, the context before them.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


_WS = re.compile(r"\s+")


def normalize_step(text: str) -> str:
    """Collapse whitespace runs to one space and strip the ends (case is kept)."""
    return _WS.sub(" ", text).strip()


def same_step(a: str, b: str) -> bool:
    """True when two steps are the same text up to whitespace and case (the official LR
    implementation's test before it calls the judge)."""
    return _WS.sub("", a).casefold() == _WS.sub("", b).casefold()


def score_pairs(pairs: Sequence[StepPair], model_score: Callable[[Sequence[StepPair]], Sequence[float]]) -> list[float]:
    """Scores of model-based verifiers and teachers (DESIGN §3.6): a pair whose steps are
    the same (:func:`same_step`) scores 1.0 without a model call; the others go to
    ``model_score`` in one batch (no call when there are none)."""
    same = [same_step(p.draft, p.target) for p in pairs]
    rest = [p for p, s in zip(pairs, same) if not s]
    scored = iter(model_score(rest) if rest else ())
    return [1.0 if s else float(next(scored)) for s in same]


def verifier_context(problem: str, solution_tail: str) -> str:
    """The context a verifier sees: the problem statement, then the solution so far."""
    problem, tail = problem.strip(), solution_tail.strip()
    return f"{problem}\n\n{tail}" if tail else problem


@dataclass(frozen=True)
class DraftScores:
    """How likely the target finds the draft step, read off the prefill of the target row
    that follows it (no extra model call): over the draft step's scored tokens x_t, the mean
    and the min of log p_target(x_t | x_<t) in nats, and the share of tokens that are the
    target's argmax. ``tokens``: how many were scored (vLLM cannot score a token whose
    predicting position sat in a reused prefix-cache block). And how sure the draft was of
    its own step, from the logprobs of its generation (None when it returned none):
    ``draft_logprob`` the mean log p_draft of its tokens, ``draft_entropy`` the mean entropy
    (nats) of its next-token distribution over its top-k tokens (:func:`topk_entropy`)."""

    mean_logprob: float | None  # None: the target scored none of the step (draft_only)
    min_logprob: float | None
    argmax_share: float | None
    tokens: int
    draft_logprob: float | None = None
    draft_entropy: float | None = None

    @classmethod
    def of(cls, scores, draft=None) -> DraftScores | None:
        """From a backend's ``Generation.prompt_scores`` ((logprob, is_argmax) or None per
        token) and the draft step's own ``Generation`` (its ``logprobs`` / ``top_logprobs``,
        when it has them); None when no token was scored."""
        real = [s for s in scores or () if s is not None]
        if not real:
            return None
        lps = [float(lp) for lp, _ in real]
        return cls(
            sum(lps) / len(lps), min(lps), sum(bool(a) for _, a in real) / len(real), len(real), *_own_confidence(draft)
        )

    @classmethod
    def draft_only(cls, draft) -> DraftScores | None:
        """The draft's own confidence in its step with no target score of it (a score round
        that made no prefill: its verifier reads no target score); None without logprobs."""
        own = _own_confidence(draft)
        return None if own == (None, None) else cls(None, None, None, 0, *own)


def _own_confidence(draft) -> tuple[float | None, float | None]:
    """(mean log p_draft of the step's tokens, their mean top-k entropy) from the draft step's
    own ``Generation`` (None for what it returned no logprobs for)."""
    own = getattr(draft, "logprobs", None)
    return (sum(own) / len(own) if own else None), mean_topk_entropy(getattr(draft, "top_logprobs", None))


def topk_entropy(top: dict[int, float]) -> float:
    """H = −Σ p log p (nats) over the top-k entries {token: log p} of one next-token
    distribution: a lower bound on the full entropy, missing the tail's share."""
    return -sum(math.exp(lp) * lp for lp in top.values())


def mean_topk_entropy(tops) -> float | None:
    """Mean :func:`topk_entropy` over a step's tokens (``Generation.top_logprobs``); None without them."""
    return sum(topk_entropy(t) for t in tops) / len(tops) if tops else None


@dataclass(frozen=True)
class StepPair:
    """One comparison: the draft's step and the target's step after the same prefix, and
    (when the decoder scored it) the target's likelihood of the draft step."""

    context: str
    draft: str
    target: str
    draft_scores: DraftScores | None = None


def wants_draft_scores(verifier) -> bool:
    """True when ``verifier`` reads :attr:`StepPair.draft_scores` (the decoder then scores
    every draft step on the target rows that prefill it, and the draft returns its logprobs)."""
    return bool(getattr(verifier, "uses_draft_scores", False))


def wants_target_scores(verifier) -> bool:
    """True when ``verifier`` reads the target's scores of a draft step (``uses_target_scores``;
    default: whenever it reads :attr:`StepPair.draft_scores`). False for one that reads the
    draft's own confidence only (a draft-only router): a score round then makes no prefill."""
    return bool(getattr(verifier, "uses_target_scores", wants_draft_scores(verifier)))


@runtime_checkable
class Verifier(Protocol):
    """``score(pairs) -> list[float]`` in [0, 1]; accept when score >= ``threshold``."""

    name: str
    threshold: float

    def score(self, pairs: Sequence[StepPair]) -> list[float]: ...


def accept(
    verifier: Verifier, pairs: Sequence[StepPair], rejected: Sequence[bool] | None = None
) -> tuple[list[bool], list[float]]:
    """Score ``pairs`` in one batch and return ``(verdicts, scores)``; a pair flagged in
    ``rejected`` is rejected with score 0.0 and never reaches the verifier (no call when
    every pair is flagged)."""
    flags = list(rejected) if rejected is not None else [False] * len(pairs)
    asked = [p for p, r in zip(pairs, flags) if not r]
    if not asked:
        return [False] * len(pairs), [0.0] * len(pairs)
    threshold = checked_threshold(verifier)
    got = checked_scores(verifier, verifier.score(asked), len(asked))
    it = iter(got)
    scores = [0.0 if r else next(it) for r in flags]
    return [not r and s >= threshold for s, r in zip(scores, flags)], scores


def checked_scores(verifier: Verifier, got, n: int) -> list[float]:
    """What a verifier's ``score`` returned, checked where it enters the decoder: ``n`` real
    numbers in [0, 1] (NaN, ±inf, 5.0, text or a wrong count would silently reject or accept
    every step); :class:`~lrtune.errors.ConfigError` naming the verifier otherwise."""
    from lrtune.errors import ConfigError

    name = getattr(verifier, "name", type(verifier).__name__)
    try:
        items = list(got)
    except TypeError:
        raise ConfigError(f"verifier {name!r}: score() returned {type(got).__name__}, not one score per pair") from None
    if len(items) != n:
        raise ConfigError(f"verifier {name!r} returned {len(items)} scores for {n} pairs")
    out = []
    for x in items:
        try:  # a number of any kind (numpy and torch scalars too), never a bool or a text
            v = None if isinstance(x, (bool, str, bytes)) else float(x)
        except (TypeError, ValueError):
            v = None
        if v is None or not 0.0 <= v <= 1.0:  # NaN fails too
            raise ConfigError(f"verifier {name!r} returned the score {x!r}; a score is a number in [0, 1]")
        out.append(v)
    return out


def checked_threshold(verifier: Verifier) -> float:
    """A verifier's ``threshold`` as a finite number (a text or NaN would refuse or accept every
    step); :class:`~lrtune.errors.ConfigError` naming the verifier otherwise."""
    from lrtune.errors import ConfigError

    t = getattr(verifier, "threshold", None)
    if isinstance(t, bool) or not isinstance(t, numbers.Real) or not math.isfinite(float(t)):
        raise ConfigError(
            f"verifier {getattr(verifier, 'name', type(verifier).__name__)!r} has threshold {t!r}; "
            "a threshold is a finite number (accept when score >= threshold)"
        )
    return float(t)
