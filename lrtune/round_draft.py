"""How a round's draft side runs (DESIGN §3), mixed into :class:`lrtune.decoder.LookaheadDecoder`:
the W draft chains of every slot (position j of every live chain is one draft call), the
draft-side early stop, and, for draft-prefix reuse and score rounds, the one target row per slot
that prefills its chain ``P ŝ1..ŝd`` and scores every draft token. Reads the decoder's
``target`` and ``draft`` backends only."""

from __future__ import annotations

from dataclasses import replace

from lrtune.backends.base import Generation
from lrtune.reuse import matched_tokens, split_scores
from lrtune.roundstate import PromptState, _branch_temperature, _concat, _reusable, _row_counters, _time_shares
from lrtune.rounds import DRAFT, mix_seed, step_params
from lrtune.stats import BatchStats
from lrtune.verifiers import Verifier
from lrtune.verifiers.base import wants_draft_scores

DRAFT_TOP_K = 20  # top-k logprobs per draft token where draft steps are scored (DraftScores.draft_entropy)


class RoundDrafting:
    """The draft chains of a round and their prefill on the target (mixed into the decoder)."""

    def _draft_chains(self, slots: list[PromptState], batch: BatchStats, verifier: Verifier | None = None) -> None:
        """W draft chains per slot; position j of every live chain of every slot is ONE
        draft call (branch 0 at ``temperature``, branches >= 1 sampled at
        ``branch_temperature`` when ``temperature`` is 0, each with its own seed). Where draft
        steps are scored, each also returns its top-k logprobs (the draft's own confidence,
        :class:`DraftScores`)."""
        used = {id(s): [0] * s.round.cfg.width for s in slots}
        live = {id(s): list(range(s.round.cfg.width)) for s in slots}
        for j in range(max((s.round.cfg.gamma1 for s in slots), default=0)):
            items: list[tuple[PromptState, int]] = []
            for s in slots:
                if j < s.round.cfg.gamma1:
                    live[id(s)] = [w for w in live[id(s)] if used[id(s)][w] < s.round.budget]
                    items += [(s, w) for w in live[id(s)]]
            if not items:
                break
            params = []
            for s, w in items:
                temp = _branch_temperature(w, s.round.cfg)
                seeds = None
                if temp > 0:
                    seeds = (
                        mix_seed(s.round.cfg.seed, s.rnd, j, DRAFT)
                        if w == 0
                        else mix_seed(s.round.cfg.seed, s.rnd, j, DRAFT, w),
                    )
                q = replace(
                    step_params(s.round.cfg, s.round.budget, s.rnd, j, 1, draft=True), temperature=temp, seeds=seeds
                )
                if s.round.cfg.score_drafts or wants_draft_scores(verifier):
                    q = replace(q, top_logprobs=DRAFT_TOP_K)
                if s.round.cfg.draft_stop is not None:
                    q = replace(q, logprobs=True)  # the draft's own confidence in each step
                params.append(q)
            b = self.draft.generate([s.round.base + _concat(s.round.chains[w]) for s, w in items], params)
            batch.observe_call("draft", len(items))
            by_slot: dict[int, list[int]] = {}
            for r, (s, _) in enumerate(items):
                by_slot.setdefault(id(s), []).append(r)
            members = [s for s in slots if id(s) in by_slot]
            for s, share in zip(members, _time_shares(b, [by_slot[id(s)] for s in members])):
                s.stats.draft_calls += 1
                s.stats.draft_s += share
                s.round.draft_secs.append(share)
            for (s, w), step in zip(items, b.outputs):
                if not step.token_ids:
                    live[id(s)].remove(w)
                    continue
                s.round.chains[w].append(step)
                used[id(s)][w] += len(step.token_ids)
                s.stats.draft_step_tokens += len(step.token_ids)
                if step.finish == "eos" or step.token_ids[-1] in self.target.eos_ids:  # no step after it
                    live[id(s)].remove(w)
                elif doubted(step, s.round.cfg.draft_stop):  # draft-side early stop: keep the step, end the chain
                    live[id(s)].remove(w)
                    s.stats.draft_stops += 1

    def _reuse_prefill(self, slots: list[PromptState], batch: BatchStats) -> None:
        """Draft-prefix reuse (:mod:`lrtune.reuse`): one target row per slot prefills its
        chain ``P ŝ1..ŝd`` and scores every draft token; sets each slot's ``matched[k]``
        (leading tokens of ŝk that are the target's argmax), ``chain_scores`` and ``prefill_s``."""
        todo = [
            s
            for s in slots
            if (s.round.cfg.reuse_drafts or s.round.cfg.score_rounds) and s.round.chains and s.round.chains[0]
        ]
        if not todo:
            return
        params = [
            replace(
                step_params(s.round.cfg, s.round.budget, s.rnd, 0, 1, draft=False),
                max_tokens=1,
                stop_at_delimiter=False,
                score_from=len(s.round.base),
            )
            for s in todo
        ]
        tb = self.target.generate([s.round.base + _concat(s.round.chains[0]) for s in todo], params)
        batch.observe_call("target", len(todo))
        row_sd = _row_counters(tb)
        for i, (s, share) in enumerate(zip(todo, _time_shares(tb, [[i] for i in range(len(todo))]))):
            s.round.chain_scores = split_scores(
                tb.outputs[i].prompt_scores or [], [len(c.token_ids) for c in s.round.chains[0]]
            )
            s.round.matched = [
                _reusable(matched_tokens(x), c, self.target.eos_ids)
                for x, c in zip(s.round.chain_scores, s.round.chains[0])
            ]
            s.round.prefill_s = share
            s.stats.prefill_s += share
            s.stats.observe_target_call(share, row_sd[i] if row_sd is not None else None)


def doubted(step: Generation, threshold: float | None) -> bool:
    """Draft-side early stop (``--draft-stop``): the mean log p_draft of ``step``'s tokens is
    below ``threshold`` nats (never without a threshold or without logprobs)."""
    lps = step.logprobs
    return threshold is not None and bool(lps) and sum(lps) / len(lps) < threshold
