"""A round's draft side (DESIGN §3): the draft chains of every prompt in flight, and the target
prefill that scores a chain before the target's rows run (draft-prefix reuse, score rounds).

Two phases of :func:`lrtune.round.run_round`, as functions from explicit inputs to
:class:`Drafts` and :class:`Prefill`; each adds to its prompt's stats and to the batch's call counts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from lrtune.backends.base import Backend, Generation, row_counters, time_shares
from lrtune.reuse import matched_tokens, reusable, split_scores
from lrtune.roundplan import RoundKind, RoundPlan
from lrtune.rounds import DRAFT, chain_ids, mix_seed, step_params
from lrtune.slots import PromptState
from lrtune.stats import BatchStats
from lrtune.verifiers.base import wants_draft_scores, wants_target_scores

DRAFT_TOP_K = 20  # top-k logprobs per draft token where draft steps are scored (DraftScores.draft_entropy)


@dataclass(frozen=True)
class Drafts:
    """One prompt's draft chains this round: ``chains[w]`` is branch w's steps ŝ1..ŝd (d ≤ γ1),
    ``seconds`` its share of each draft call it joined."""

    chains: list[list[Generation]]
    seconds: list[float]

    @property
    def any(self) -> bool:
        return any(self.chains)


@dataclass(frozen=True)
class Prefill:
    """One target row over ``base ŝ1..ŝd`` (branch 0) that scored every draft token:
    ``scores[k]`` the (logprob, is-argmax) of each token of ŝk, ``matched[k]`` the leading
    tokens of ŝk a target row may reuse (:func:`lrtune.reuse.reusable`), ``seconds`` this
    prompt's share of the call."""

    scores: list[list]
    matched: list[int]
    seconds: float


class Drafted(NamedTuple):
    """One prompt after the draft side of its round: what the target and the verifier work from."""

    slot: PromptState
    plan: RoundPlan
    drafts: Drafts
    prefill: Prefill | None


def draft_chains(
    draft: Backend | None,
    eos: frozenset[int],
    slots: list[PromptState],
    plans: list[RoundPlan],
    verifier,
    batch: BatchStats,
) -> list[Drafts]:
    """W chains of up to γ1 steps per prompt; position j of every live chain of every prompt
    is ONE draft call (branch 0 at ``temperature``; branches ≥ 1 at ``branch_temperature``
    when ``temperature`` is 0, each with its own seed). A chain ends at the budget, after a
    step that ends the answer (a draft or target EOS), or after a step the draft doubts
    (``--draft-stop``). Where draft steps are scored, each also returns its top-k logprobs."""
    chains = [[[] for _ in range(p.width)] for p in plans]
    seconds: list[list[float]] = [[] for _ in plans]
    used = [[0] * p.width for p in plans]
    live = [list(range(p.width)) if p.kind is not RoundKind.TARGET else [] for p in plans]
    for j in range(max((p.gamma1 for p in plans), default=0)):
        items: list[tuple[int, int]] = []  # (prompt, branch)
        for i, p in enumerate(plans):
            if j < p.gamma1:
                live[i] = [w for w in live[i] if used[i][w] < p.budget]
                items += [(i, w) for w in live[i]]
        if not items:
            break
        params = [_draft_params(plans[i], slots[i].rnd, j, w, verifier) for i, w in items]
        call = draft.generate([list(plans[i].base) + chain_ids(chains[i][w]) for i, w in items], params)
        batch.observe_call("draft", len(items))
        rows_of: dict[int, list[int]] = {}
        for r, (i, _) in enumerate(items):
            rows_of.setdefault(i, []).append(r)
        for i, share in zip(rows_of, time_shares(call, list(rows_of.values()))):
            slots[i].stats.draft_calls += 1
            slots[i].stats.draft_s += share
            seconds[i].append(share)
        for (i, w), step in zip(items, call.outputs):
            if not step.token_ids:
                live[i].remove(w)
                continue
            chains[i][w].append(step)
            used[i][w] += len(step.token_ids)
            slots[i].stats.draft_step_tokens += len(step.token_ids)
            if step.finish == "eos" or step.token_ids[-1] in eos:  # no step after it
                live[i].remove(w)
            elif doubted(step, plans[i].cfg.draft_stop):  # draft-side early stop: keep the step, end the chain
                live[i].remove(w)
                slots[i].stats.draft_stops += 1
    return [Drafts(c, s) for c, s in zip(chains, seconds)]


def _draft_params(plan: RoundPlan, rnd: int, j: int, w: int, verifier):
    """Draft step j of branch w: greedy or sampled (branches ≥ 1 sample when the prompt is greedy)."""
    cfg = plan.cfg
    temp = cfg.temperature if (w == 0 or cfg.temperature > 0) else cfg.branch_temperature
    seeds = None
    if temp > 0:
        seeds = (mix_seed(cfg.seed, rnd, j, DRAFT) if w == 0 else mix_seed(cfg.seed, rnd, j, DRAFT, w),)
    q = replace(step_params(cfg, plan.budget, rnd, j, 1, gamma2=0, draft=True), temperature=temp, seeds=seeds)
    if cfg.score_drafts or wants_draft_scores(verifier):
        q = replace(q, top_logprobs=DRAFT_TOP_K)
    if cfg.draft_stop is not None:
        q = replace(q, logprobs=True)  # the draft's own confidence in each step
    return q


def needs_prefill(plan: RoundPlan, drafts: Drafts, verifier) -> bool:
    """Draft-prefix reuse always prefills branch 0's chain; a score round does when its
    verifier reads the target's scores of a draft step (a draft-only router needs none)."""
    wanted = plan.reuse or (plan.kind is RoundKind.SCORE and wants_target_scores(verifier))
    return wanted and bool(drafts.chains[0])


def prefill_chains(
    target: Backend,
    slots: list[PromptState],
    plans: list[RoundPlan],
    drafts: list[Drafts],
    verifier,
    batch: BatchStats,
) -> list[Prefill | None]:
    """One target call: a row per prompt that :func:`needs_prefill` over ``base ŝ1..ŝd``,
    generating one token and scoring every draft token (its blocks stay in the prefix cache
    for the rows that follow); None for the others."""
    todo = [i for i, (p, d) in enumerate(zip(plans, drafts)) if needs_prefill(p, d, verifier)]
    out: list[Prefill | None] = [None] * len(plans)
    if not todo:
        return out
    params = [
        replace(
            step_params(plans[i].cfg, plans[i].budget, slots[i].rnd, 0, 1, gamma2=plans[i].gamma2),
            max_tokens=1,
            stop_at_delimiter=False,
            score_from=len(plans[i].base),
        )
        for i in todo
    ]
    call = target.generate([list(plans[i].base) + chain_ids(drafts[i].chains[0]) for i in todo], params)
    batch.observe_call("target", len(todo))
    sd = row_counters(call)
    for r, (i, share) in enumerate(zip(todo, time_shares(call, [[r] for r in range(len(todo))]))):
        chain = drafts[i].chains[0]
        scores = split_scores(call.outputs[r].prompt_scores or [], [len(c.token_ids) for c in chain])
        matched = [reusable(matched_tokens(x), c, target.eos_ids) for x, c in zip(scores, chain)]
        out[i] = Prefill(scores, matched, share)
        slots[i].stats.prefill_s += share
        slots[i].stats.observe_target_call(share, sd[r] if sd is not None else None)
    return out


def doubted(step: Generation, threshold: float | None) -> bool:
    """Draft-side early stop (``--draft-stop``): the mean log p_draft of ``step``'s tokens is
    below ``threshold`` nats (never without a threshold or without logprobs)."""
    lps = step.logprobs
    return threshold is not None and bool(lps) and sum(lps) / len(lps) < threshold
