"""A round's target side (DESIGN §3): the target regenerates every drafted position of every
prompt, plus the bonus step after each chain, in ONE call (:func:`target_steps`), its rows laid
out by the pure :func:`target_rows`. A target round (γ1 = 0) is the same call with one row
that runs to its horizon.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from lrtune.backends.base import Backend, GenBatch, Generation, GenParams, SDCounters, add_counters, per_row
from lrtune.backends.base import row_counters, time_shares
from lrtune.reuse import joined_step, row_params, whole_draft
from lrtune.round_draft import Drafted
from lrtune.round_verify import EarlyJudge, Steps
from lrtune.rounds import chain_ids, step_params
from lrtune.stats import BatchStats
from lrtune.verifiers.base import wants_draft_scores


@dataclass(frozen=True)
class TargetSteps:
    """The target's steps of one prompt's round: ``steps[w][k]`` after branch w's drafts before
    position k (None where no row ran), ``seconds`` this prompt's share of the target calls
    (its chain's prefill included), ``sd`` the SD counters of its rows (None without SD)."""

    steps: Steps
    seconds: float
    sd: SDCounters | None


Rows = tuple[list[list[int]], dict[tuple[int, int], int], list[int | None], list[tuple[int, int]]]


def target_rows(
    base: list[int],
    chains: list[list[Generation]],
    budget: int,
    eos: frozenset[int],
    matched: list[int] | None = None,
    last: int | None = None,
) -> Rows:
    """Distinct target prefixes ``base + chain_w[:k]``, the row of each (w, k), where each
    row's last draft step starts (None for the row of position 0), and each row's
    ``(k, reused)``.

    Position k runs for k = 0..len(chain_w); the bonus position k = len(chain_w) is
    skipped when the chain ended the sequence (the target's ``eos``) or the token budget. With
    draft-prefix reuse (``matched``, chain 0 only) position k < len(chain) continues after ``matched[k]``
    draft tokens and needs no row when that is the whole draft step; ``last``: no rows
    after this position (an early verdict already rejected it).
    """
    rows: list[list[int]] = []
    froms: list[int | None] = []
    reused: list[tuple[int, int]] = []
    index: dict[tuple[int, ...], int] = {}
    where: dict[tuple[int, int], int] = {}
    for w, chain in enumerate(chains):
        drafted = sum(len(d.token_ids) for d in chain)
        ends = bool(chain) and (chain[-1].token_ids[-1] in eos or drafted >= budget)
        for k in range(len(chain) if ends else len(chain) + 1):
            if last is not None and k > last:
                break
            prefix = base + chain_ids(chain[:k])
            m = matched[k] if (matched is not None and k < len(chain)) else 0
            if m and m >= len(chain[k].token_ids):
                continue  # the target's step is the draft step itself
            if m:
                prefix += list(chain[k].token_ids[:m])
            key = tuple(prefix)
            if key not in index:
                index[key] = len(rows)
                rows.append(prefix)
                froms.append(len(prefix) - len(chain[k - 1].token_ids) if (k and not m) else None)
                reused.append((k, m))
            where[w, k] = index[key]
    return rows, where, froms, reused


@dataclass
class _Layout:
    """The rows of one target call: ``owner[i]`` the call rows of prompt i, ``wheres[i]`` its
    (branch, position) → own row, ``joins`` reuse's row → (draft tokens it continues, step params)."""

    rows: list[list[int]] = field(default_factory=list)
    params: list[GenParams] = field(default_factory=list)
    owner: list[list[int]] = field(default_factory=list)
    wheres: list[dict[tuple[int, int], int]] = field(default_factory=list)
    joins: dict[int, tuple[list[int], GenParams]] = field(default_factory=dict)


def target_steps(
    target: Backend, items: list[Drafted], verifier, batch: BatchStats, early: EarlyJudge | None
) -> list[TargetSteps]:
    """Every prompt's target rows in ONE call. A row continues after the draft tokens a prefill
    found reusable; a row that prefills draft step k scores it where draft steps are scored;
    under early abort ``early`` judges each position as its row ends and stops later rows."""
    eos = target.eos_ids
    lay = _Layout()
    for i, d in enumerate(items):
        _lay_out(lay, i, d, eos, verifier, early)

    def joined(row: int, out: Generation) -> Generation:
        if row not in lay.joins:
            return out
        ids, q = lay.joins[row]
        return joined_step(ids, out, q, target.decode, eos)

    on_done = None
    if early is not None:
        early.joined = joined
        on_done = early.on_done
    call = target.generate(lay.rows, lay.params, on_done=on_done) if lay.rows else GenBatch(outputs=[], seconds=0.0)
    if lay.rows:
        batch.observe_call("target", len(lay.rows))
    sd = row_counters(call)
    out = []
    for d, mine, share, where in zip(items, lay.owner, time_shares(call, lay.owner), lay.wheres):
        counters = add_counters([sd[r] for r in mine]) if sd is not None else None
        if mine:  # a prompt whose rows reuse or an early rejection made unnecessary was not in the call
            d.slot.stats.observe_target_call(share, counters)
        steps = _steps_of(d, [joined(r, call.outputs[r]) for r in mine], where)
        _count(d, steps, [call.outputs[r] for r in mine])
        prefill_s = d.prefill.seconds if d.prefill is not None else 0.0
        out.append(TargetSteps(steps, share + prefill_s, counters))
    return out


def _lay_out(lay: _Layout, i: int, d: Drafted, eos: frozenset[int], verifier, early: EarlyJudge | None) -> None:
    """Prompt i's rows and their params appended to ``lay`` (a target round: one row to its horizon)."""
    matched = d.prefill.matched if d.prefill is not None else None
    last = early.prejudge(i) if (early is not None and early.covers(i) and matched) else None
    mine, where, froms, reused = target_rows(list(d.plan.base), d.drafts.chains, d.plan.budget, eos, matched, last)
    p = step_params(d.plan.cfg, d.plan.budget, d.slot.rnd, 0, len(mine), gamma2=d.plan.gamma2)
    if d.plan.horizon is not None:  # a target round: one uninterrupted (SD) run, not one call per step
        p = replace(p, max_tokens=d.plan.horizon, stop_at_delimiter=False)
    params = per_row(p, len(mine))
    if matched:  # rows continue after the reused tokens (their scores came from the prefill)
        for r, (q, (k, m)) in enumerate(zip(params, reused)):
            if m:
                lay.joins[len(lay.rows) + r] = (list(d.drafts.chains[0][k].token_ids[:m]), q)
                params[r] = row_params(q, m)
    elif d.plan.cfg.score_drafts or wants_draft_scores(verifier):  # row k + 1 prefills draft step k: score it
        params = [replace(q, score_from=f) for q, f in zip(params, froms)]
    if early is not None and early.covers(i):
        early.watch(i, len(lay.rows), where)
    lay.owner.append(list(range(len(lay.rows), len(lay.rows) + len(mine))))
    lay.rows += mine
    lay.params += params
    lay.wheres.append(where)


def _steps_of(d: Drafted, outs: list[Generation], where: dict[tuple[int, int], int]) -> Steps:
    """The target's step per (branch, position): its row's output (``outs``, by own row), the
    draft step itself where reuse matched it whole, else None."""
    matched = d.prefill.matched if d.prefill is not None else None
    return [
        [
            outs[where[w, k]]
            if (w, k) in where
            else whole_draft(c[k])
            if (matched and k < len(c) and matched[k] == len(c[k].token_ids))
            else None
            for k in range(len(c) + 1)
        ]
        for w, c in enumerate(d.drafts.chains)
    ]


def _count(d: Drafted, steps: Steps, outs: list[Generation]) -> None:
    """The prompt's token counts of this call: step tokens, aborted rows, tokens at drafted
    positions, and tokens reuse spared."""
    stats = d.slot.stats
    stats.target_step_tokens += sum(len(o.token_ids) for o in outs)
    stats.aborted_target_rows += sum(o.finish == "aborted" for o in outs)
    chain = d.drafts.chains[0]
    if chain:
        stats.target_tokens_at_drafts += sum(len(t.token_ids) for t in steps[0][: len(chain)] if t is not None)
    if d.prefill is not None:
        stats.reused_target_tokens += sum(
            min(m, len(t.token_ids)) for m, t in zip(d.prefill.matched, steps[0]) if t is not None
        )
