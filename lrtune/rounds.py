"""What one LR step call asks of an engine, shared by the sync and async decoders.

Pure functions: the seeds of a step (a function of seed, round, position and role only, so
a sample never depends on batching or scheduling), its :class:`GenParams`, the
:class:`StepPair` a verifier sees at a position, and which pairs are rejected unasked (:func:`ends_apart`).
"""

from __future__ import annotations

from collections.abc import Sequence

from lrtune.backends.base import Backend, Generation, GenParams
from lrtune.verifiers.base import DraftScores, StepPair, verifier_context

DRAFT, TARGET = 1, 2  # seed roles


def mix_seed(*xs: int) -> int:
    """A deterministic 31-bit seed from integers (splitmix-style)."""
    h = 0x9E3779B97F4A7C15
    for x in xs:
        h ^= (x + 0x9E3779B97F4A7C15 + (h << 6) + (h >> 2)) & 0xFFFFFFFFFFFFFFFF
        h = (h * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    return int(h >> 33)


def step_params(cfg, budget: int, rnd: int, pos: int, n: int, *, gamma2: int, draft: bool = False) -> GenParams:
    """Params of ``n`` step rows (1 for a draft step) of round ``rnd`` from position ``pos``:
    at most ``min(max_step_tokens, budget)`` tokens each, ending at the delimiter; token-level
    SD with ``gamma2`` draft tokens inside the step (0: none; draft steps always 0); seeds
    (temperature > 0) ``mix_seed(seed, rnd, pos + k, role)``."""
    count = 1 if draft else n
    seeds = None
    if cfg.temperature > 0:
        role = DRAFT if draft else TARGET
        seeds = tuple(mix_seed(cfg.seed, rnd, pos + k, role) for k in range(count))
    return GenParams(
        max_tokens=min(cfg.max_step_tokens, budget),
        stop_at_delimiter=True,
        delimiter=cfg.delimiter,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        seeds=seeds,
        logprobs=cfg.logprobs,
        num_speculative_tokens=0 if draft else gamma2,
    )


def chain_ids(steps: Sequence[Generation]) -> list[int]:
    """The ids of ``steps`` one after another."""
    return [t for step in steps for t in step.token_ids]


def step_pair(
    target: Backend,
    problem: str,
    solution: Sequence[int],
    context_tokens: int,
    draft: Sequence[int],
    target_step: Sequence[int],
    draft_scores: DraftScores | None = None,
) -> StepPair:
    """What the verifier sees at one position (DESIGN §3.6): text without special tokens; the
    context is the problem statement and the last ``context_tokens`` of ``solution``, the
    ids the target was conditioned on there (committed steps, then the drafts before it);
    ``draft_scores``: the target's likelihood of the draft step, where the decoder scored it."""
    tail = list(solution[-context_tokens:]) if context_tokens > 0 else []
    clean = lambda ids: target.decode(list(ids), skip_special_tokens=True)  # noqa: E731
    return StepPair(
        context=verifier_context(problem, clean(tail)),
        draft=clean(draft),
        target=clean(target_step),
        draft_scores=draft_scores,
    )


def ends_apart(draft: Sequence[int], target_step: Sequence[int], eos_ids: frozenset[int]) -> bool:
    """True when exactly one of the two steps ends the answer (its last id is one of the target's
    ``eos_ids``): they differ whatever their text says, which drops special tokens, so the pair
    is rejected without asking the verifier."""
    return (bool(draft) and draft[-1] in eos_ids) != (bool(target_step) and target_step[-1] in eos_ids)
