"""One round of Lookahead Reasoning for every prompt in flight, top to bottom (paper Algorithm 1,
with token-level SD inside the target's steps).

One LR round, with committed ids ``P`` (prompt + generated so far)::

    plan:     γ1, γ2 (0: no SD), kind                                   per prompt, before anything runs
    draft:    ŝ1 = D(P), ŝ2 = D(P ŝ1), ..., ŝd = D(P ŝ1..ŝ(d-1))      d <= γ1 sequential steps
    target:   s1 = T(P), s2 = T(P ŝ1), ..., s(d+1) = T(P ŝ1..ŝd)          ONE batched call
    verify:   v_i = V(ŝi, si) for i = 1..d                                 ONE batched call
    commit:   j = number of leading accepted v_i; P <- P ŝ1..ŝj s(j+1)

So a round commits ``j + 1`` steps (the target's step always follows the accepted draft
prefix: the *bonus-step rule*), and the speedup model :func:`lrtune.speedup.f_sync` uses
exactly this: E[committed] = (1 - α1^(γ1+1)) / (1 - α1), time = γ1·c1 + b(γ1+1). The bonus
step s(d+1) is skipped when ŝd ended the sequence (the target's EOS) or the token budget; a
draft-only EOS just ends the draft chain. The answer ends on the target's EOS ids only, and a
pair where exactly one of ŝi, si ends the sequence is rejected without asking the verifier.
With γ2 > 0 the target's steps come from an engine that runs token-level speculative
decoding with γ2 draft tokens, so the two speedups multiply.

The other kinds of round share the phases: a **target** round (γ1 = 0: methods ``target`` and
``sd``, or a controller's choice) drafts nothing and runs one target row to its horizon; a
**score** round (:mod:`lrtune.score_round`) replaces ``target`` and ``verify`` by one prefill
that scores the chain, a one-sided verdict, and the target's own step after the accepted
prefix. Schedules change one phase each: ``reuse`` prefills the chain first so target rows
start after the draft tokens the target would write (:mod:`lrtune.reuse`); ``abort`` judges
each position as its row ends (:class:`lrtune.round_verify.EarlyJudge`).

Token ids are the state (DESIGN §3.4): committed ids are the draft's or target's own ids, never
re-tokenized text. Each phase is a function from explicit inputs to an immutable result; only
:func:`lrtune.round_commit.commit` changes a prompt (:class:`lrtune.slots.PromptState`).
"""

from __future__ import annotations

from collections.abc import Callable

from lrtune.backends.base import Backend
from lrtune.round_commit import commit
from lrtune.round_draft import Drafted, draft_chains, prefill_chains
from lrtune.round_target import TargetSteps, target_steps
from lrtune.round_verify import EarlyJudge, Verdicts, verify
from lrtune.roundplan import RoundKind, RoundPlan, plan_round
from lrtune.score_round import bonus_steps, check_one_sided, judge
from lrtune.slots import PromptState, RoundRecord
from lrtune.stats import BatchStats
from lrtune.verifiers import Verifier


def run_round(
    target: Backend,
    draft: Backend | None,
    verifier: Verifier,
    slots: list[PromptState],
    *,
    on_round: Callable[[int, RoundRecord], None] | None = None,
    on_commit: Callable[[int, str, list[int]], None] | None = None,
    batch: BatchStats,
) -> None:
    """One round of every prompt in ``slots``, each with its own config: plan, draft (one call
    per position), prefill where a schedule needs it (one call), target (one call) and verify
    (one call), or for score rounds judge and bonus step, then commit. A prompt that ended
    has ``done`` set."""
    plans = [plan_of(s) for s in slots]
    if any(p.kind is RoundKind.SCORE for p in plans):
        check_one_sided(verifier)
    drafts = draft_chains(draft, target.eos_ids, slots, plans, verifier, batch)
    prefills = prefill_chains(target, slots, plans, drafts, verifier, batch)
    items = [Drafted(*x) for x in zip(slots, plans, drafts, prefills)]
    outcome: dict[int, tuple[TargetSteps, Verdicts]] = {}  # id(prompt) -> its target steps and verdicts
    scored = [d for d in items if d.plan.kind is RoundKind.SCORE]
    if scored:  # score rounds: the prefill's scores judged one-sided, then the target's own step
        verdicts = judge(target, scored, verifier, batch)
        outcome.update(zip((id(d.slot) for d in scored), zip(bonus_steps(target, scored, verdicts, batch), verdicts)))
    generated = [d for d in items if d.plan.kind is not RoundKind.SCORE]
    if generated:  # lr and target rounds: the target regenerates every position, then one verifier call
        early = None  # --schedule abort: positions judged as their rows end
        if any(d.plan.early_abort and d.drafts.chains[0] for d in generated):
            early = EarlyJudge(target, generated, verifier, batch)
        steps = target_steps(target, generated, verifier, batch, early)
        late = [i for i in range(len(generated)) if early is None or not early.covers(i)]
        checked = iter(verify(target, [generated[i] for i in late], [steps[i].steps for i in late], verifier, batch))
        verdicts = [next(checked) if i in late else early.verdicts(i) for i in range(len(generated))]
        outcome.update(zip((id(d.slot) for d in generated), zip(steps, verdicts)))
    for d in items:
        commit(target, d, *outcome[id(d.slot)], on_round, on_commit)


def plan_of(slot: PromptState) -> RoundPlan:
    """The next round of a prompt in flight (:func:`lrtune.roundplan.plan_round`)."""
    return plan_round(
        slot.cfg,
        index=slot.rnd,
        base=slot.prompt + slot.gen,
        generated=len(slot.gen),
        controller=slot.controller,
        problem=slot.problem,
        horizon=slot.horizon,
    )
