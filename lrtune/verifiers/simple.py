"""Verifiers that need no model: exact (normalised text match), never, always, random(p),
target_logprob (the target's own likelihood of the draft step, which the decoder reads off
rows it runs anyway)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from lrtune.verifiers.base import StepPair, normalize_step, same_step

__all__ = ["ConstantVerifier", "ExactVerifier", "RandomVerifier", "TargetLogprobVerifier", "normalize_step"]


class ExactVerifier:
    """score = 1 if the normalised draft and target texts are equal, else 0."""

    name = "exact"

    def __init__(self, threshold: float = 0.5) -> None:
        self.threshold = threshold

    def score(self, pairs: Sequence[StepPair]) -> list[float]:
        return [float(normalize_step(p.draft) == normalize_step(p.target)) for p in pairs]


class ConstantVerifier:
    """``never`` (score 0: every draft rejected) or ``always`` (score 1: every draft accepted)."""

    threshold = 0.5
    one_sided = True  # needs no target step (score rounds)

    def __init__(self, value: bool) -> None:
        self.value = float(value)
        self.name = "always" if value else "never"

    def score(self, pairs: Sequence[StepPair]) -> list[float]:
        return [self.value] * len(pairs)


class RandomVerifier:
    """Accept each draft step with probability ``p``, by a keyed draw.

    score = H(seed, context, draft step, target step) / 2^64 in [0, 1) (H: the first 8 bytes of
    BLAKE2b) and threshold = 1 - p, so P(score >= threshold) = p over distinct pairs. The draw is
    a pure function of the seed and the pair: the context holds the prompt and everything
    before the step (so the round and the position), hence the same decode gives the same
    verdicts whether it runs twice, alone or in a batch, in any call order.
    """

    one_sided = True  # needs no target step (score rounds)

    def __init__(self, p: float = 0.5, seed: int = 0) -> None:
        if not 0.0 <= p <= 1.0:
            from lrtune.errors import ConfigError

            raise ConfigError(f"random verifier needs 0 <= p <= 1, got {p}")
        self.p = p
        self.name = f"random({p:g})"
        self.threshold = 1.0 - p
        self.seed = int(seed)

    def score(self, pairs: Sequence[StepPair]) -> list[float]:
        return [keyed_uniform(self.seed, p.context, p.draft, p.target) for p in pairs]


def keyed_uniform(seed: int, *parts: str) -> float:
    """A uniform draw in [0, 1) determined by ``seed`` and ``parts`` alone."""
    h = hashlib.blake2b(digest_size=8, key=str(seed).encode()[:64])
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return int.from_bytes(h.digest(), "big") / 2**64


class TargetLogprobVerifier:
    """Accept a draft step that the target itself finds likely (lossy acceptance by likelihood).

    score = exp(mean_t log p_target(x_t | x_<t)) over the draft step's tokens x_t: the
    geometric-mean token probability, in (0, 1]; ``target_logprob(min)`` scores
    exp(min_t log p_target(x_t | x_<t)) instead, the step's least likely token. The decoder reads it off
    the prefill of the
    target row that follows the draft step (:class:`~lrtune.verifiers.base.DraftScores`), so
    it costs no model call. Steps that are the same up to whitespace and case score 1; a
    pair the decoder could not score (a chain's last step when it ended the answer) scores 0.
    """

    uses_draft_scores = True
    one_sided = True  # reads the target's log-probabilities of the draft step, not a target step

    def __init__(self, threshold: float = 0.5, form: str = "mean") -> None:
        if form not in TARGET_LOGPROB_FORMS:
            raise ValueError(f"target_logprob form must be one of {', '.join(TARGET_LOGPROB_FORMS)}, got {form!r}")
        self.threshold, self.form = threshold, form
        self.name = "target_logprob" if form == "mean" else f"target_logprob({form})"

    def score(self, pairs: Sequence[StepPair]) -> list[float]:
        return [
            target_logprob_score(
                same_step(p.draft, p.target),
                None if p.draft_scores is None else getattr(p.draft_scores, f"{self.form}_logprob"),
            )
            for p in pairs
        ]


# ``mean``: exp(mean log p), the geometric-mean token probability (default);
# ``min``: exp(min log p), the probability of the step's least likely token, which catches one
# token where the target disagrees (a changed number) that a mean over the step hides.
TARGET_LOGPROB_FORMS = ("mean", "min")
TARGET_LOGPROB_THRESHOLDS = {"mean": 0.5, "min": 0.05}  # min: not calibrated against outcome labels yet


def target_logprob_score(same: bool, logprob: float | None) -> float:
    """:class:`TargetLogprobVerifier`'s score: 1 for steps the same up to whitespace and case,
    0 when unscored, else exp(logprob) of its form (the mean or the min over the step)."""
    return 1.0 if same else 0.0 if logprob is None else math.exp(logprob)
