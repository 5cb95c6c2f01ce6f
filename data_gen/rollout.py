"""Outcome-grounded teachers: ``rollout`` and ``consensus(rollout,SPEC)``.

A draft step is acceptable when it does not change where the target's reasoning ends up.
For a recorded pair (prefix P, draft step ŝ, target step s) the *target* continues greedily
(with token-level SD when the collect uses it) from P·ŝ and from P·s, up to
``--rollout-tokens`` tokens each; the pair is labelled *accept* when both continuations
reach the same outcome by the task's own checker (:func:`lrtune.tasks.same_outcome`: the
same final answer for math, the same pass/fail for code). The pairs of several finished
problems are rolled out in one batched engine call; a branch the answer itself continues
is not decoded again where the answer is the target's greedy continuation
(:func:`trajectory_continuation`), and identical steps share one row. Both continuations
and their answers are stored, so every label can be audited.

``consensus(rollout,SPEC)`` decodes with the verifier SPEC as its live teacher, rolls out
every pair, and keeps only the pairs on which SPEC's verdict and the rollout label agree;
the dropped pairs are counted per problem (``teacher_disagreements``).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from lrtune.errors import ConfigError

_CONSENSUS = re.compile(r"^consensus\(\s*rollout\s*,\s*(?P<judge>.+)\)$")


@dataclass(frozen=True)
class TeacherSpec:
    """``kind``: ``verifier`` (a verifier spec labels live), ``rollout`` or ``consensus``;
    ``live``: the verifier spec the decoder uses while collecting (None: ``--verifier``)."""

    kind: str
    live: str | None


def parse_teacher(spec: str) -> TeacherSpec:
    """``rollout`` | ``consensus(rollout,SPEC)`` | a verifier spec (checked, no model loads)."""
    from lrtune.verifiers import check_verifier_spec

    s = spec.strip()
    if s == "rollout":
        return TeacherSpec("rollout", None)
    m = _CONSENSUS.match(s)
    if m:
        check_verifier_spec(m["judge"].strip())
        return TeacherSpec("consensus", m["judge"].strip())
    if s.startswith("consensus"):
        raise ConfigError(f"bad teacher {spec!r}: write consensus(rollout,VERIFIER), e.g. consensus(rollout,llm_judge)")
    check_verifier_spec(s)
    return TeacherSpec("verifier", s)


@dataclass(frozen=True)
class RolloutItem:
    """One pair to label: its problem, prefix ``P`` (the problem's ``prompt_len`` prompt ids
    first), the draft and target step ids, and the continuations already decoded (``known``:
    branch ``"draft"``/``"target"`` -> ``(continuation ids, ended by EOS)``), which are reused
    instead of rolled out again."""

    problem: object
    prompt_len: int
    prefix: list[int]
    draft: list[int]
    target: list[int]
    known: dict = field(default_factory=dict)


def rollout_labels(
    backend, task, items: list[RolloutItem], *, max_tokens: int, max_len: int, gamma2: int = 0
) -> tuple[list[dict], float]:
    """Roll out every item's two branches and label it; one engine call for all rows (of all
    the items' problems). Returns
    per item ``{rollout_label, rollout_draft_answer, rollout_target_answer, rollout_draft_text,
    rollout_target_text, rollout_finished, rollout_reused}`` and the call's seconds.

    No row is decoded twice: a step that ended the answer (EOS) is not continued, a branch in
    ``known`` is reused, and identical P·step ids (identical draft and target steps, or one
    branch shared by several items) share one row. A row's budget is
    ``min(max_tokens, max_len - len(P·step) - 1)``."""
    rows, params, plan = _rollout_plan(backend, items, max_tokens=max_tokens, max_len=max_len, gamma2=gamma2)
    outs, seconds = _timed_generate(backend, rows, params)
    return [_rollout_label(backend, task, it, ways, outs) for it, ways in zip(items, plan)], seconds


def _rollout_plan(
    backend, items: list[RolloutItem], *, max_tokens: int, max_len: int, gamma2: int
) -> tuple[list[list[int]], list, list[list[tuple]]]:
    """The engine rows to decode, their parameters, and per item how each branch (draft,
    target) gets its continuation: ``("end",)`` (none), ``("known", ids, ended)`` or
    ``("row", index)``, a row shared by identical P·step ids with the same budget."""
    from lrtune.backends.base import GenParams

    rows, params, plan = [], [], []  # plan[n][b]: ("end",) | ("known", ids, ended) | ("row", index)
    seen: dict[tuple, int] = {}  # (P·step ids, budget) -> its row
    for it in items:
        ways = []
        for b, step in (("draft", it.draft), ("target", it.target)):
            ids = it.prefix + step
            room = min(max_tokens, max_len - len(ids) - 1)
            if (step and step[-1] in backend.eos_ids) or room < 1:
                ways.append(("end",))
            elif b in it.known:
                ways.append(("known", *it.known[b]))
            elif b == "target" and it.draft == it.target:
                ways.append(ways[0])
            elif (tuple(ids), room) in seen:  # the same branch of another item
                ways.append(("row", seen[tuple(ids), room]))
            else:
                seen[tuple(ids), room] = len(rows)
                ways.append(("row", len(rows)))
                rows.append(ids)
                params.append(GenParams(max_tokens=room, stop_at_delimiter=False, num_speculative_tokens=gamma2))
        plan.append(ways)
    return rows, params, plan


def _rollout_label(backend, task, it: RolloutItem, ways: list[tuple], outs: list) -> dict:
    """One item's label from its two branches' continuations (decoded ``outs`` rows, known
    ones, or none): whether both reach the same outcome, their answers and texts."""
    from lrtune.tasks import same_outcome

    texts, ended = [], []
    for step, way in zip((it.draft, it.target), ways):
        if way[0] == "row":
            cont, end = list(outs[way[1]].token_ids), outs[way[1]].finish == "eos"
        elif way[0] == "known":
            cont, end = list(way[1]), bool(way[2])
        else:
            cont, end = [], True
        ended.append(end)
        texts.append(backend.decode(it.prefix[it.prompt_len :] + step + cont, skip_special_tokens=True))
    same, a_draft, a_target = same_outcome(task, it.problem, texts[0], texts[1])
    return {
        "rollout_label": same,
        "rollout_draft_answer": a_draft,
        "rollout_target_answer": a_target,
        "rollout_draft_text": texts[0],
        "rollout_target_text": texts[1],
        "rollout_finished": all(ended),
        "rollout_reused": any(w[0] == "known" for w in ways),
    }


def _timed_generate(backend, rows: list[list[int]], params: list) -> tuple[list, float]:
    """One engine call over ``rows`` (none: no call) and its wall seconds."""
    t0 = time.perf_counter()
    outs = backend.generate(rows, params).outputs if rows else []
    return outs, time.perf_counter() - t0


def trajectory_continuation(
    generated: list[int], finish: str, start: int, *, room: int, divergent_starts: list[int]
) -> tuple[list[int], bool] | None:
    """The committed trajectory as a rollout from offset ``start`` of ``generated`` (the
    answer's ids, prompt excluded): the next ``room`` tokens at most and whether they end the
    answer, or ``None`` when that is not what a greedy rollout would decode. It is when no
    accepted draft step that differs from its target step starts at or after ``start``
    (``divergent_starts``: their offsets), so the rest is the target's own greedy
    continuation, and the trajectory either reaches ``room`` tokens or ended by EOS."""
    if any(d >= start for d in divergent_starts):
        return None
    rest = generated[start:]
    if len(rest) >= room:
        return rest[:room], bool(len(rest) == room and finish == "eos")
    return (rest, True) if finish == "eos" else None


def branch_outcome(task, problem, completion: str) -> str | None:
    """How one completion of ``problem`` ends by the task's checker: ``"passed"``/``"failed"``
    for code, the final answer for math (None: no answer)."""
    from lrtune.tasks import own_task

    task = own_task(task, problem)
    answer, ok = task.check(problem, completion)
    if getattr(task, "KIND", "math") == "code":
        return "passed" if ok else "failed"
    return None if answer is None else str(answer)


def modal_outcome(outcomes: list[str | None], same) -> str | None:
    """The outcome that ``same(a, b)`` finds equal to the most of ``outcomes`` (itself counted),
    ties to the earliest; None (no answer) never counts as equal, and wins only when every
    outcome is None."""
    counts = [sum(o is not None and p is not None and same(o, p) for p in outcomes) for o in outcomes]
    best = max(range(len(outcomes)), key=lambda i: (counts[i], -i)) if outcomes else None
    return None if best is None or counts[best] == 0 else outcomes[best]


def vote_label(
    draft_outcomes: list[str | None], target_outcomes: list[str | None], same, identical: bool = False
) -> tuple[bool, float]:
    """The vote teacher's verdict on one pair from its branches' rollout outcomes:
    ``accept`` when the two branches' modal outcomes are the same (``same``; None never is),
    and the soft score ``P(d ≡ t)`` = the share of (draft rollout, target rollout) couples
    that end the same way. Identical steps are accepted with score 1 by construction."""
    if identical:
        return True, 1.0
    a, b = modal_outcome(draft_outcomes, same), modal_outcome(target_outcomes, same)
    couples = [(d, t) for d in draft_outcomes for t in target_outcomes]
    score = sum(d is not None and t is not None and same(d, t) for d, t in couples) / max(1, len(couples))
    return a is not None and b is not None and same(a, b), score


def outcome_equality(task, problem=None):
    """``same(a, b)`` for the outcomes :func:`branch_outcome` returns: string equality for code,
    :func:`lrtune.tasks.checker.math_equal` for math answers (``problem`` given: by its own task
    in a mix)."""
    from lrtune.tasks import own_task
    from lrtune.tasks.checker import math_equal

    if problem is not None:
        task = own_task(task, problem)
    if getattr(task, "KIND", "math") == "code":
        return lambda a, b: a == b
    return lambda a, b: a == b or math_equal(a, b)


def vote_on(
    task, problem, greedy: tuple[str | None, str | None], sampled: dict, identical: bool
) -> tuple[bool, float, list, list]:
    """:func:`vote_label` of one pair whose votes are its greedy rollout's (draft, target)
    outcomes, then its :func:`sampled_outcomes`; returns (accept, score, draft votes, target votes)."""
    d, t = [greedy[0], *sampled["draft"]], [greedy[1], *sampled["target"]]
    return (*vote_label(d, t, outcome_equality(task, problem), identical=identical), d, t)


def sampled_outcomes(
    backend,
    task,
    items: list[RolloutItem],
    *,
    samples: int,
    temperature: float,
    seed: int,
    max_tokens: int,
    max_len: int,
) -> tuple[list[dict], float]:
    """``samples`` sampled rollouts (``temperature``, seeds ``seed + i``) of each item's two
    branches, in one engine call; returns per item ``{"draft": [outcome]*samples, "target":
    [...]}`` (:func:`branch_outcome`) and the call's seconds. A branch whose step ended the
    answer, or that has no room left, has its own text as every outcome; identical P·step ids
    share rows. ``known`` continuations are not used (they are greedy)."""
    from lrtune.backends.base import GenParams

    if samples < 1 or temperature <= 0:
        raise ValueError("sampled rollouts need samples >= 1 and temperature > 0")
    rows, params, plan, seen = [], [], [], {}
    for it in items:
        ways = []
        for step in (it.draft, it.target):
            ids = it.prefix + step
            room = min(max_tokens, max_len - len(ids) - 1)
            if (step and step[-1] in backend.eos_ids) or room < 1:
                ways.append(None)
                continue
            if (tuple(ids), room) not in seen:
                seen[tuple(ids), room] = len(rows)
                for i in range(samples):
                    rows.append(ids)
                    params.append(
                        GenParams(max_tokens=room, stop_at_delimiter=False, temperature=temperature, seeds=(seed + i,))
                    )
            ways.append(seen[tuple(ids), room])
        plan.append(ways)
    outs, seconds = _timed_generate(backend, rows, params)
    result = []
    for it, ways in zip(items, plan):
        got = {}
        for b, step, first in (("draft", it.draft, ways[0]), ("target", it.target, ways[1])):
            head = it.prefix[it.prompt_len :] + step
            conts = [[]] * samples if first is None else [list(outs[first + i].token_ids) for i in range(samples)]
            got[b] = [
                branch_outcome(task, it.problem, backend.decode(head + c, skip_special_tokens=True)) for c in conts
            ]
        result.append(got)
    return result, seconds
