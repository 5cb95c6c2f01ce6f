"""How a round ends (DESIGN §3), mixed into :class:`lrtune.decoder.LookaheadDecoder`: the branch
with the longest accepted draft prefix is kept, its accepted draft steps and the target's next
step are committed (the bonus-step rule), the round is recorded and streamed, and the
controller is told the outcome. Reads the decoder's ``target`` backend only."""

from __future__ import annotations

from lrtune.backends.base import SDCounters
from lrtune.control import RoundOutcome
from lrtune.roundstate import PromptState, RoundRecord
from lrtune.stats import leading_accepts
from lrtune.steps import split_steps


class RoundCommit:
    """The end of a round: choose the branch, commit, record, update the controller."""

    def _commit(self, s: PromptState, eos: frozenset[int], on_round, on_commit) -> None:
        """Keep the branch with the longest accepted prefix (ties: the higher score sum over
        it, then the lower index); commit it and the target's next step."""
        cfg = s.round.cfg
        best = max(
            range(len(s.round.chains)),
            key=lambda w: (
                leading_accepts(s.round.verdicts[w]),
                sum(s.round.scores[w][: leading_accepts(s.round.verdicts[w])]),
                -w,
            ),
        )
        j = leading_accepts(s.round.verdicts[best])
        drafts = s.round.chains[best]
        commit: list[tuple[str, list[int]]] = [("draft", list(d.token_ids)) for d in drafts[:j]]
        nxt = s.round.targets[best][j] if j < len(s.round.targets[best]) else None
        if nxt is not None:
            pieces = [list(nxt.token_ids)]
            if s.round.horizon is not None:  # a γ1 = 0 run: commit (and stream) it step by step
                pieces = (
                    split_steps(
                        nxt.token_ids,
                        self.target.decode,
                        delimiter=cfg.delimiter,
                        eos_ids=eos,
                        max_step_tokens=cfg.max_step_tokens,
                    )
                    or pieces
                )
            commit += [("target", ids) for ids in pieces]
        s.stats.observe_round(s.round.verdicts[best], committed_target_steps=len(commit) - j)
        kind = "sd" if cfg.gamma1 == 0 or not any(s.round.chains) else "score" if cfg.score_rounds else "lr"
        before = len(s.gen)
        if on_round:
            on_round(
                s.index,
                RoundRecord(
                    index=s.rnd,
                    prefix_len=len(s.round.base),
                    drafts=drafts,
                    targets=[t for t in s.round.targets[best] if t is not None],
                    scores=s.round.scores[best],
                    accepted=s.round.verdicts[best],
                    committed_drafts=j,
                    draft_seconds=s.round.draft_secs,
                    target_seconds=s.round.target_s,
                    verify_seconds=s.round.verify_s,
                    branch=best,
                    branches=s.round.chains,
                    branch_targets=[[t for t in ts if t is not None] for ts in s.round.targets],
                    branch_scores=s.round.scores,
                    branch_accepted=s.round.verdicts,
                    pairs=s.round.pairs,
                    unasked=frozenset(s.round.unasked),
                ),
            )
        progressed = False
        for source, ids in commit:
            ids = ids[: cfg.max_new_tokens - len(s.gen)]
            if not ids:
                break
            progressed = True
            s.gen.extend(ids)
            s.steps.append((source, ids))
            if on_commit:
                on_commit(s.index, source, ids)
            if ids[-1] in eos:
                s.done = True
                break
        secs = sum(s.round.draft_secs) + s.round.target_s + s.round.verify_s
        s.stats.observe_round_kind(kind, secs, len(s.gen) - before)
        if s.controller is not None:
            s.controller.update(
                RoundOutcome(
                    gamma1=cfg.gamma1,
                    gamma2=cfg.gamma2 if cfg.uses_sd else 0,
                    verdicts=tuple(s.round.verdicts[best]),
                    accepted_steps=j,
                    committed_tokens=sum(len(ids) for _, ids in commit),
                    sd=s.round.round_sd or SDCounters(),
                    draft_s=sum(s.round.draft_secs),
                    target_s=s.round.target_s,
                    verify_s=s.round.verify_s,
                    extra={"kind": kind},
                )
            )
        if not progressed or len(s.gen) >= cfg.max_new_tokens:  # context full: stop, never spin
            s.done = True
        s.rnd += 1
