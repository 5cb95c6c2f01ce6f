"""How a round's draft steps are judged (DESIGN §3): every slot's pairs in one verifier call,
or, with early abort, each draft step as soon as its target row ends.

:class:`RoundVerification` is the part of :class:`lrtune.decoder.LookaheadDecoder` that builds a
round's step pairs and asks the verifier; it reads the decoder's ``target`` backend only. A pair
whose two steps end apart (one ends the answer, the other not) is rejected without asking the
verifier (:func:`lrtune.rounds.ends_apart`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lrtune.backends.base import Generation
from lrtune.errors import ConfigError
from lrtune.reuse import whole_draft
from lrtune.roundstate import PromptState, _concat
from lrtune.rounds import ends_apart, step_pair
from lrtune.stats import BatchStats
from lrtune.verifiers import StepPair, Verifier, accept
from lrtune.verifiers.base import DraftScores, wants_draft_scores


class RoundVerification:
    """Verification of a round's draft steps against the target's (mixed into the decoder)."""

    def _prejudge(self, s: PromptState, verifier: Verifier, batch: BatchStats) -> int | None:
        """Early abort with reuse: judge the positions whose target step is the draft step
        itself (no row) before the call, in order; returns the first rejected one (the rows
        after it are useless), or None."""
        for k, (m, step) in enumerate(zip(s.round.matched, s.round.chains[0])):
            if m < len(step.token_ids):
                continue
            if not self._judge_one(s, k, whole_draft(step), verifier, batch):
                return k
        return None

    def _judge_one(self, s: PromptState, k: int, target: Generation, verifier: Verifier, batch: BatchStats) -> bool:
        """Early abort: the verdict on the slot's draft step k against ``target``, judged alone
        (kept in ``s.round.judged[k]``)."""
        pair = self._pair(s, 0, k, target)
        apart = ends_apart(s.round.chains[0][k].token_ids, target.token_ids, self.target.eos_ids)
        tv = time.perf_counter()
        (ok,), (score,) = accept(verifier, [pair], [apart])
        s.round.verify_s += time.perf_counter() - tv
        if apart:
            s.round.unasked.add((0, k))
        else:
            s.stats.verifier_calls += 1
            batch.observe_call("verify", 1)
        s.round.judged[k] = (ok, score, pair)
        return ok

    def _verify(
        self, slots: list[PromptState], early: dict[int, PromptState], verifier: Verifier, batch: BatchStats
    ) -> None:
        """Verdicts of every slot's pairs: one verifier call for all slots not judged early (a pair
        whose steps end apart, :func:`ends_apart`, is rejected unasked); an early slot's verdicts
        run up to its first position whose row was stopped."""
        for s in early.values():
            n = len(s.round.chains[0])
            judged = [s.round.judged[k] for k in range(next((k for k in range(n) if k not in s.round.judged), n))]
            s.round.verdicts, s.round.scores, s.round.pairs = (
                [[v for v, _, _ in judged]],
                [[c for _, c, _ in judged]],
                [[p for *_, p in judged]],
            )
            s.stats.verify_s += s.round.verify_s
        keys = [
            (s, w, k) for s in slots if id(s) not in early for w, c in enumerate(s.round.chains) for k in range(len(c))
        ]
        for s in slots:
            if id(s) not in early:
                s.round.pairs = [
                    [self._pair(s, w, k, s.round.targets[w][k]) for k in range(len(c))]
                    for w, c in enumerate(s.round.chains)
                ]
        if not keys:
            return
        pairs = [s.round.pairs[w][k] for s, w, k in keys]
        apart = [
            ends_apart(s.round.chains[w][k].token_ids, s.round.targets[w][k].token_ids, self.target.eos_ids)
            for s, w, k in keys
        ]  # one step ends the answer, the other not: rejected unasked
        asked = len(pairs) - sum(apart)
        tv = time.perf_counter()
        flat_v, flat_s = accept(verifier, pairs, apart)
        vsec = time.perf_counter() - tv
        if asked:
            batch.observe_call("verify", asked)
        for (s, w, k), v, sc, a in zip(keys, flat_v, flat_s, apart):
            if a:
                s.round.unasked.add((w, k))
            s.round.verdicts[w].append(v)
            s.round.scores[w].append(sc)
            s.round.verify_s += 0.0 if a else vsec / asked
        for s in {id(s): s for s, _, _ in keys}.values():
            s.stats.verify_s += s.round.verify_s
        for s in {id(s): s for (s, _, _), a in zip(keys, apart) if not a}.values():
            s.stats.verifier_calls += 1

    def _early_judge(
        self,
        slots: list[PromptState],
        owner: list[list[int]],
        wheres,
        verifier: Verifier,
        batch: BatchStats,
        joined: Callable[[int, Generation], Generation],
    ):
        """The target call's ``on_done`` for early abort: when the row of (slot, position k)
        ends, judge draft step k against it at once; on a rejection, stop the slot's rows of
        the positions after k (their steps can no longer be committed). ``joined(row, out)``:
        the row's target step (with draft-prefix reuse, the reused tokens and the row's)."""
        if getattr(verifier, "backend", None) is self.target:
            raise ConfigError(
                f"early abort judges steps while the target engine runs, but verifier {verifier.name!r} "
                "runs on the target's own engine: give it another model (--judge-model) or use --schedule sync (not "
                "abort)"
            )
        if wants_draft_scores(verifier) and not all(
            s.round.matched for s in slots if s.round.cfg.early_abort and s.round.chains[0]
        ):
            raise ConfigError(
                f"early abort judges position k when its target row ends, before the row that scores "
                f"draft step k does; verifier {verifier.name!r} reads those scores: use --schedule reuse+abort "
                "(its prefill scores every draft step first) or --schedule sync"
            )
        row_of = {}
        for s, mine, where in zip(slots, owner, wheres):
            if s.round.cfg.early_abort and s.round.chains[0]:
                for (w, k), r in where.items():
                    row_of[mine[r]] = (
                        s,
                        k,
                        [mine[where[0, j]] for j in range(k + 1, len(s.round.chains[0]) + 1) if (0, j) in where],
                    )

        def on_done(row: int, out: Generation) -> list[int]:
            hit = row_of.get(row)
            if hit is None or hit[1] >= len(hit[0].round.chains[0]):  # not early, or the bonus position
                return []
            s, k, later = hit
            return [] if self._judge_one(s, k, joined(row, out), verifier, batch) else later

        return on_done

    def _pair(self, s: PromptState, w: int, k: int, target: Generation) -> StepPair:
        """Branch ``w``'s pair at position ``k`` with the target's step there: the target saw
        the committed steps, then this branch's drafts before ``k``; the draft step's scores
        come from the row of position ``k + 1``, which prefilled it (when it was scored), or
        with draft-prefix reuse from the prefill of the whole chain."""
        if s.round.chain_scores:  # reuse: the prefill scored the whole chain
            scores = DraftScores.of(s.round.chain_scores[k], s.round.chains[w][k])
        else:
            follows = s.round.targets[w][k + 1] if (s.round.targets and k + 1 < len(s.round.targets[w])) else None
            scores = DraftScores.of(follows.prompt_scores, s.round.chains[w][k]) if follows is not None else None
            if scores is None and s.round.cfg.score_rounds:  # no prefill: the draft's own confidence alone
                scores = DraftScores.draft_only(s.round.chains[w][k])
        return step_pair(
            self.target,
            s.problem.text,
            s.gen + _concat(s.round.chains[w][:k]),
            s.round.cfg.context_tokens,
            s.round.chains[w][k].token_ids,
            target.token_ids,
            scores,
        )
