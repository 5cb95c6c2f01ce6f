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
baselines). The decoder runs :func:`judge_and_continue` after the prefill of
:meth:`LookaheadDecoder._reuse_prefill`, which scores every chain whose verifier reads scores.
"""

from __future__ import annotations

from dataclasses import replace

from lrtune.backends.base import GenBatch
from lrtune.errors import ConfigError
from lrtune.rounds import step_params
from lrtune.roundstate import _concat, _row_counters, _time_shares
from lrtune.stats import leading_accepts
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


def judge_and_continue(dec, slots, verifier, eos: frozenset[int], batch) -> None:
    """Verdicts of every slot's draft steps from the chain's prefill (one verifier call), then
    the target's own step after each slot's accepted prefix (one target call); leaves each
    slot's round as ``_commit`` reads it: ``targets[0][J]`` is the target's step."""
    keys = [(s, k) for s in slots for k in range(len(s.round.chains[0]) if s.round.chains else 0)]
    for s in slots:
        s.round.pairs = (
            [[dec._pair(s, 0, k, _EMPTY) for k in range(len(s.round.chains[0]))]] if s.round.chains else [[]]
        )
    if keys:
        import time

        tv = time.perf_counter()
        verdicts, scores = accept(verifier, [s.round.pairs[0][k] for s, k in keys])
        vsec = (time.perf_counter() - tv) / len(keys)
        batch.observe_call("verify", len(keys))
        for (s, _), v, sc in zip(keys, verdicts, scores):
            s.round.verdicts[0].append(v)
            s.round.scores[0].append(sc)
            s.round.verify_s += vsec
        for s in {id(s): s for s, _ in keys}.values():
            s.stats.verify_s += s.round.verify_s
            s.stats.verifier_calls += 1
    _bonus_steps(dec, slots, eos, batch)


def _bonus_steps(dec, slots, eos: frozenset[int], batch) -> None:
    """One target call: each slot's own step after its accepted draft prefix (none when that
    prefix ended the answer or the budget)."""
    rows, params, owner = [], [], []
    for s in slots:
        chain = s.round.chains[0] if s.round.chains else []
        j = leading_accepts(s.round.verdicts[0]) if chain else 0
        accepted = chain[:j]
        used = sum(len(d.token_ids) for d in accepted)
        ends = bool(accepted) and (accepted[-1].token_ids[-1] in eos or used >= s.round.budget)
        s.round.targets = [[None] * (j + 1)]
        if ends:
            owner.append(None)
            continue
        p = step_params(s.round.cfg, s.round.budget - used, s.rnd, j, 1, draft=False)
        if s.round.horizon is not None:  # γ1 = 0: one uninterrupted SD run to the controller's horizon
            p = replace(p, max_tokens=s.round.horizon, stop_at_delimiter=False)
        owner.append(len(rows))
        rows.append(s.round.base + _concat(accepted))
        params.append(p)
    tb = dec.target.generate(rows, params) if rows else GenBatch(outputs=[], seconds=0.0)
    if rows:
        batch.observe_call("target", len(rows))
    shares = _time_shares(tb, [[r] for r in range(len(rows))])
    row_sd = _row_counters(tb)
    for s, r in zip(slots, owner):
        s.round.target_s = s.round.prefill_s
        if r is None:
            continue
        s.round.target_s += shares[r]
        s.round.round_sd = row_sd[r] if row_sd is not None else None
        s.stats.observe_target_call(shares[r], s.round.round_sd)
        s.stats.target_step_tokens += len(tb.outputs[r].token_ids)
        s.round.targets[0][-1] = tb.outputs[r]


class _NoStep:
    """The target step a score round's pair carries: none (a one-sided verifier reads the draft
    step and the target's log-probabilities of it only)."""

    token_ids: list[int] = []


_EMPTY = _NoStep()
