"""How a round's draft steps are judged (DESIGN §3): every prompt's pairs in one verifier call
(:func:`verify`), or, under early abort, each draft step as soon as its target row ends
(:class:`EarlyJudge`, the abort schedule's own state). A pair whose two steps end apart (one
ends the answer, the other not) is rejected without asking the verifier
(:func:`lrtune.rounds.ends_apart`). The result per prompt is one :class:`Verdicts`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from lrtune.backends.base import Backend, Generation
from lrtune.errors import ConfigError
from lrtune.reuse import whole_draft
from lrtune.round_draft import Drafted
from lrtune.roundplan import RoundKind
from lrtune.rounds import chain_ids, ends_apart, step_pair
from lrtune.stats import BatchStats
from lrtune.verifiers import StepPair, Verifier, accept
from lrtune.verifiers.base import DraftScores, wants_draft_scores

Steps = list[list[Generation | None]]  # the target's step per (branch, position); None: no row ran


@dataclass(frozen=True)
class Verdicts:
    """One prompt's judged pairs per branch and position: the verifier's inputs, its verdicts and
    scores, the seconds it took (this prompt's share), and the (branch, position) pairs
    rejected unasked."""

    pairs: list[list[StepPair]]
    accepted: list[list[bool]]
    scores: list[list[float]]
    seconds: float
    unasked: frozenset[tuple[int, int]]


def pair_at(target: Backend, d: Drafted, w: int, k: int, step: Generation | None, steps: Steps | None) -> StepPair:
    """Branch ``w``'s pair at position ``k`` with the target's ``step`` there (None in a score
    round: the verifier is one-sided). The target saw the committed steps, then this branch's
    drafts before ``k``. The draft step's scores come from the chain's prefill, else from the
    row of position ``k + 1`` of ``steps`` (which prefilled it, when it was scored); a score
    round without a prefill carries the draft's own confidence."""
    draft = d.drafts.chains[w][k]
    if d.prefill is not None:
        scores = DraftScores.of(d.prefill.scores[k], draft)
    else:
        follows = steps[w][k + 1] if (steps and k + 1 < len(steps[w])) else None
        scores = DraftScores.of(follows.prompt_scores, draft) if follows is not None else None
        if scores is None and d.plan.kind is RoundKind.SCORE:
            scores = DraftScores.draft_only(draft)
    return step_pair(
        target,
        d.slot.problem.text,
        d.slot.gen + chain_ids(d.drafts.chains[w][:k]),
        d.plan.cfg.context_tokens,
        draft.token_ids,
        step.token_ids if step is not None else [],
        scores,
    )


def verify(
    target: Backend, items: list[Drafted], steps: list[Steps], verifier: Verifier, batch: BatchStats
) -> list[Verdicts]:
    """Every pair of every prompt in ONE verifier call; a pair whose steps end apart is
    rejected unasked. Each prompt's seconds are its share of the call by pairs asked."""
    keys = [(i, w, k) for i, d in enumerate(items) for w, c in enumerate(d.drafts.chains) for k in range(len(c))]
    pairs = [pair_at(target, items[i], w, k, steps[i][w][k], steps[i]) for i, w, k in keys]
    apart = [
        ends_apart(items[i].drafts.chains[w][k].token_ids, steps[i][w][k].token_ids, target.eos_ids) for i, w, k in keys
    ]
    asked = len(pairs) - sum(apart)
    tv = time.perf_counter()
    flat_v, flat_s = accept(verifier, pairs, apart) if keys else ([], [])
    each = (time.perf_counter() - tv) / asked if asked else 0.0
    if asked:
        batch.observe_call("verify", asked)
    out = [[[[] for _ in d.drafts.chains] for _ in range(3)] for d in items]  # pairs, verdicts, scores
    unasked: list[set] = [set() for _ in items]
    seconds = [0.0] * len(items)
    for (i, w, k), p, v, sc, a in zip(keys, pairs, flat_v, flat_s, apart):
        for part, x in zip(out[i], (p, v, sc)):
            part[w].append(x)
        if a:
            unasked[i].add((w, k))
        else:
            seconds[i] += each
    for i, d in enumerate(items):
        if any(d.drafts.chains):
            d.slot.stats.verify_s += seconds[i]
        if any(not a for (j, *_), a in zip(keys, apart) if j == i):
            d.slot.stats.verifier_calls += 1
    return [Verdicts(p, v, s, sec, frozenset(u)) for (p, v, s), sec, u in zip(out, seconds, unasked)]


class EarlyJudge:
    """Early abort (``--schedule abort``, ``reuse+abort``): judges draft step k of a prompt as
    soon as its target row ends (:meth:`on_done`, the target call's callback), and on a
    rejection stops that prompt's rows of the positions after k, whose steps can no longer be
    committed. With draft-prefix reuse the positions whose target step is the draft step
    itself are judged before the call (:meth:`prejudge`). Holds each prompt's verdicts
    (position → (accepted, score, pair)) until :meth:`verdicts` reads them."""

    def __init__(self, target: Backend, items: list[Drafted], verifier: Verifier, batch: BatchStats) -> None:
        if getattr(verifier, "backend", None) is target:
            raise ConfigError(
                f"early abort judges steps while the target engine runs, but verifier {verifier.name!r} "
                "runs on the target's own engine: give it another model (--judge-model) or use --schedule sync (not "
                "abort)"
            )
        if wants_draft_scores(verifier) and not all(
            d.prefill for d in items if d.plan.early_abort and d.drafts.chains[0]
        ):
            raise ConfigError(
                f"early abort judges position k when its target row ends, before the row that scores "
                f"draft step k does; verifier {verifier.name!r} reads those scores: use --schedule reuse+abort "
                "(its prefill scores every draft step first) or --schedule sync"
            )
        self.target, self.items, self.verifier, self.batch = target, items, verifier, batch
        self.judged: list[dict[int, tuple[bool, float, StepPair]]] = [{} for _ in items]
        self.seconds = [0.0] * len(items)
        self.unasked: list[set[tuple[int, int]]] = [set() for _ in items]
        self.rows: dict[int, tuple[int, int, list[int]]] = {}  # call row -> (prompt, position, later rows)
        self.joined: Callable[[int, Generation], Generation] = lambda _row, out: out

    def covers(self, i: int) -> bool:
        """Prompt ``i`` is judged early: an abort-schedule round with a draft chain."""
        d = self.items[i]
        return d.plan.early_abort and bool(d.drafts.chains[0])

    def prejudge(self, i: int) -> int | None:
        """Reuse: judge, in order, the positions whose target step is the whole draft step (no
        row runs for them); the first rejected one (no row after it is needed), or None."""
        d = self.items[i]
        for k, (m, step) in enumerate(zip(d.prefill.matched, d.drafts.chains[0])):
            if m >= len(step.token_ids) and not self.judge(i, k, whole_draft(step)):
                return k
        return None

    def watch(self, i: int, first_row: int, where: dict[tuple[int, int], int]) -> None:
        """Prompt ``i``'s rows in the call start at ``first_row``; ``where[w, k]``: its row of (branch, position)."""
        n = len(self.items[i].drafts.chains[0])
        for (_, k), r in where.items():
            later = [first_row + where[0, j] for j in range(k + 1, n + 1) if (0, j) in where]
            self.rows[first_row + r] = (i, k, later)

    def on_done(self, row: int, out: Generation) -> list[int]:
        """The target call's callback: judge the row's position; the rows to stop on a rejection."""
        hit = self.rows.get(row)
        if hit is None or hit[1] >= len(self.items[hit[0]].drafts.chains[0]):  # not early, or the bonus position
            return []
        i, k, later = hit
        return [] if self.judge(i, k, self.joined(row, out)) else later

    def judge(self, i: int, k: int, step: Generation) -> bool:
        """The verdict on prompt ``i``'s draft step k against the target's ``step``, judged alone."""
        d = self.items[i]
        pair = pair_at(self.target, d, 0, k, step, None)
        apart = ends_apart(d.drafts.chains[0][k].token_ids, step.token_ids, self.target.eos_ids)
        tv = time.perf_counter()
        (ok,), (score,) = accept(self.verifier, [pair], [apart])
        self.seconds[i] += time.perf_counter() - tv
        if apart:
            self.unasked[i].add((0, k))
        else:
            d.slot.stats.verifier_calls += 1
            self.batch.observe_call("verify", 1)
        self.judged[i][k] = (ok, score, pair)
        return ok

    def verdicts(self, i: int) -> Verdicts:
        """Prompt ``i``'s verdicts, up to its first position whose row was stopped."""
        n = len(self.items[i].drafts.chains[0])
        got = [self.judged[i][k] for k in range(next((k for k in range(n) if k not in self.judged[i]), n))]
        self.items[i].slot.stats.verify_s += self.seconds[i]
        return Verdicts(
            [[p for *_, p in got]],
            [[v for v, *_ in got]],
            [[s for _, s, _ in got]],
            self.seconds[i],
            frozenset(self.unasked[i]),
        )
