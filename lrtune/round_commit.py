"""How a round ends (DESIGN §3): the branch with the longest accepted draft prefix is kept, its
accepted draft steps and the target's next step are committed (the bonus-step rule), the round
is recorded and streamed, and the controller is told the outcome. The last phase of
:func:`lrtune.round.run_round`; the only one that changes what a prompt committed.
"""

from __future__ import annotations

from lrtune.backends.base import Backend, SDCounters
from lrtune.control import RoundOutcome
from lrtune.round_draft import Drafted
from lrtune.round_target import TargetSteps
from lrtune.round_verify import Verdicts
from lrtune.roundplan import RoundKind
from lrtune.slots import RoundRecord
from lrtune.stats import leading_accepts
from lrtune.steps import split_steps


def best_branch(v: Verdicts) -> int:
    """The branch with the longest accepted prefix; ties: the higher score sum over it, then the lower index."""
    return max(
        range(len(v.accepted)),
        key=lambda w: (leading_accepts(v.accepted[w]), sum(v.scores[w][: leading_accepts(v.accepted[w])]), -w),
    )


def commit(target: Backend, d: Drafted, t: TargetSteps, v: Verdicts, on_round, on_commit) -> None:
    """Commit the best branch's accepted drafts and the target's step after them (a target
    round's run split into steps), within the budget; record and stream the round; tell the
    controller. A prompt ends on the target's EOS, at its budget, or when nothing was committed."""
    slot, plan, eos = d.slot, d.plan, target.eos_ids
    best = best_branch(v)
    j = leading_accepts(v.accepted[best])
    pieces = _pieces(target, plan, d.drafts.chains[best][:j], t.steps[best][j] if j < len(t.steps[best]) else None)
    slot.stats.observe_round(v.accepted[best], committed_target_steps=len(pieces) - j)
    kind = plan.kind if d.drafts.any else RoundKind.TARGET
    if on_round:
        on_round(slot.index, _record(d, t, v, best, j))
    before = len(slot.gen)
    progressed = False
    for source, ids in pieces:
        ids = ids[: plan.cfg.max_new_tokens - len(slot.gen)]
        if not ids:
            break
        progressed = True
        slot.gen.extend(ids)
        slot.steps.append((source, ids))
        if on_commit:
            on_commit(slot.index, source, ids)
        if ids[-1] in eos:
            slot.done = True
            break
    slot.stats.observe_round_kind(kind.value, sum(d.drafts.seconds) + t.seconds + v.seconds, len(slot.gen) - before)
    if slot.controller is not None:
        slot.controller.update(
            RoundOutcome(
                gamma1=plan.gamma1,
                gamma2=plan.gamma2,
                verdicts=tuple(v.accepted[best]),
                accepted_steps=j,
                committed_tokens=sum(len(ids) for _, ids in pieces),
                sd=t.sd or SDCounters(),
                draft_s=sum(d.drafts.seconds),
                target_s=t.seconds,
                verify_s=v.seconds,
                kind=kind.value,
            )
        )
    if not progressed or len(slot.gen) >= plan.cfg.max_new_tokens:  # context full: stop, never spin
        slot.done = True
    slot.rnd += 1


def _pieces(target: Backend, plan, accepted, nxt) -> list[tuple[str, list[int]]]:
    """(source, ids) to commit: the accepted draft steps, then the target's step after them
    (a target round's run split into steps, so it streams step by step)."""
    pieces = [("draft", list(s.token_ids)) for s in accepted]
    if nxt is not None:
        run = [list(nxt.token_ids)]
        if plan.horizon is not None:
            cfg = plan.cfg
            run = (
                split_steps(
                    nxt.token_ids,
                    target.decode,
                    delimiter=cfg.delimiter,
                    eos_ids=target.eos_ids,
                    max_step_tokens=cfg.max_step_tokens,
                )
                or run
            )
        pieces += [("target", ids) for ids in run]
    return pieces


def _record(d: Drafted, t: TargetSteps, v: Verdicts, best: int, j: int) -> RoundRecord:
    return RoundRecord(
        index=d.slot.rnd,
        prefix_len=len(d.plan.base),
        drafts=d.drafts.chains[best],
        targets=[s for s in t.steps[best] if s is not None],
        scores=v.scores[best],
        accepted=v.accepted[best],
        committed_drafts=j,
        draft_seconds=d.drafts.seconds,
        target_seconds=t.seconds,
        verify_seconds=v.seconds,
        branch=best,
        branches=d.drafts.chains,
        branch_targets=[[s for s in ts if s is not None] for ts in t.steps],
        branch_scores=v.scores,
        branch_accepted=v.accepted,
        pairs=v.pairs,
        unasked=v.unasked,
    )
