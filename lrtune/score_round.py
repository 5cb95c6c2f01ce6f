"""Score rounds: draft steps judged without generating the target's own (``--schedule score``).

One round, with committed ids ``P``::

    draft:   ŝ1 = D(P), ..., ŝd = D(P ŝ1..ŝ(d-1))              d <= γ1 sequential steps
    score:   one prefill of P ŝ1..ŝd on the target              ONE call, no step generated
    verify:  v_i = V(ŝi | the prefill's log-probabilities)      ONE call, one-sided verifier
    commit:  J = leading accepted v_i; P <- P ŝ1..ŝJ s           s = T(P ŝ1..ŝJ), ONE call (SD at γ2)

The target's own step ``s`` follows the accepted prefix as LR's bonus step does, so a
verifier that rejects everything gives exactly the target's greedy output. Scoring and the
bonus step are **two calls**: the bonus step's prefix ``P ŝ1..ŝJ`` is known only after the
verdicts, and one call that generated a step after the whole chain would waste that step
whenever a draft step is rejected. The bonus row reads the prefill's prefix-cache blocks,
so its prompt costs nothing again; the prefill row runs on the same SD engine as the step
(with SD, the drafter prefills its own cache of the chain there, which the step needs). With
draft steps of L tokens, prefill cost π per draft step (relative to the target generating one
step, T) and a per-call overhead o, a round takes ``γ1·c1 + o + γ1·π + 1/g(γ2)`` T and commits
``J + 1`` steps (:func:`lrtune.speedup.h_score`). A verifier that reads no target score of a
draft step (:func:`~lrtune.verifiers.base.wants_target_scores` false: a draft-only router, the
constant baselines) gets no prefill: the round is one target call, the step, which prefills
``ŝ1..ŝJ`` itself (o = π = 0); its pairs carry the draft's own confidence
(:meth:`~lrtune.verifiers.base.DraftScores.draft_only`).

The verifier sees no target step (``StepPair.target`` is empty): it must be **one-sided**
(``one_sided = True``: ``target_logprob``, a router checkpoint, or the constant/random
baselines). :func:`lrtune.round.run_round` runs :func:`judge` and :func:`bonus_steps` after the
chain's prefill (:func:`lrtune.round_draft.prefill_chains`), which scores every chain whose
verifier reads scores.
"""

from __future__ import annotations

import time

from lrtune.backends.base import Backend, GenBatch, row_counters, time_shares
from lrtune.errors import ConfigError
from lrtune.round_draft import Drafted
from lrtune.round_target import TargetSteps
from lrtune.round_verify import Verdicts, pair_at
from lrtune.rounds import chain_ids, step_params
from lrtune.stats import BatchStats, leading_accepts
from lrtune.verifiers import accept


def check_one_sided(verifier) -> None:
    """ConfigError unless ``verifier`` judges a draft step alone (score rounds have no target step)."""
    if not getattr(verifier, "one_sided", False):
        raise ConfigError(_two_sided(verifier.name))


def require_one_sided(spec) -> None:
    """:func:`check_one_sided` from a parsed spec (:class:`lrtune.verifiers.VerifierSpec`),
    before any model loads or any file is written; a checkpoint whose metadata cannot tell
    is checked when it is built."""
    if spec.one_sided is False:
        raise ConfigError(_two_sided(str(spec)))


def _two_sided(name: str) -> str:
    return (
        f"--schedule score judges draft steps without a target step; verifier {name!r} compares two steps: use "
        "target_logprob (the target's likelihood of the draft step) or a router (lrtune train verifier --student "
        "router)"
    )


def judge(target: Backend, items: list[Drafted], verifier, batch: BatchStats) -> list[Verdicts]:
    """Verdicts of every prompt's draft steps from its chain's prefill (or the draft's own
    confidence where none ran), in ONE verifier call; the pairs carry no target step."""
    keys = [(i, k) for i, d in enumerate(items) for k in range(len(d.drafts.chains[0]))]
    pairs = [pair_at(target, items[i], 0, k, None, None) for i, k in keys]
    tv = time.perf_counter()
    verdicts, scores = accept(verifier, pairs) if keys else ([], [])
    each = (time.perf_counter() - tv) / len(keys) if keys else 0.0
    if keys:
        batch.observe_call("verify", len(keys))
    out = []
    for i, d in enumerate(items):
        mine = [n for n, (j, _) in enumerate(keys) if j == i]
        seconds = each * len(mine)
        if mine:
            d.slot.stats.verify_s += seconds
            d.slot.stats.verifier_calls += 1
        out.append(
            Verdicts(
                [[pairs[n] for n in mine]],
                [[verdicts[n] for n in mine]],
                [[scores[n] for n in mine]],
                seconds,
                frozenset(),
            )
        )
    return out


def bonus_steps(
    target: Backend, items: list[Drafted], verdicts: list[Verdicts], batch: BatchStats
) -> list[TargetSteps]:
    """ONE target call: each prompt's own step after its accepted draft prefix (none when that
    prefix ended the answer or the budget); ``steps[0][J]`` is that step."""
    eos = target.eos_ids
    rows, params, owner = [], [], []
    for d, v in zip(items, verdicts):
        chain = d.drafts.chains[0]
        accepted = chain[: leading_accepts(v.accepted[0])]
        used = sum(len(s.token_ids) for s in accepted)
        if accepted and (accepted[-1].token_ids[-1] in eos or used >= d.plan.budget):
            owner.append(None)
            continue
        p = step_params(d.plan.cfg, d.plan.budget - used, d.slot.rnd, len(accepted), 1, gamma2=d.plan.gamma2)
        owner.append(len(rows))
        rows.append(list(d.plan.base) + chain_ids(accepted))
        params.append(p)
    call = target.generate(rows, params) if rows else GenBatch(outputs=[], seconds=0.0)
    if rows:
        batch.observe_call("target", len(rows))
    shares = time_shares(call, [[r] for r in range(len(rows))])
    sd = row_counters(call)
    out = []
    for d, v, r in zip(items, verdicts, owner):
        steps = [[None] * (leading_accepts(v.accepted[0]) + 1)]
        seconds = d.prefill.seconds if d.prefill is not None else 0.0
        counters = None
        if r is not None:
            seconds += shares[r]
            counters = sd[r] if sd is not None else None
            d.slot.stats.observe_target_call(shares[r], counters)
            d.slot.stats.target_step_tokens += len(call.outputs[r].token_ids)
            steps[0][-1] = call.outputs[r]
        out.append(TargetSteps(steps, seconds, counters))
    return out
