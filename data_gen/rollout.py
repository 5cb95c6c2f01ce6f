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


def rollout_labels(backend, task, items: list[RolloutItem], *, max_tokens: int, max_len: int,
                   gamma2: int = 0) -> tuple[list[dict], float]:
    """Roll out every item's two branches and label it; one engine call for all rows (of all
    the items' problems). Returns
    per item ``{rollout_label, rollout_draft_answer, rollout_target_answer, rollout_draft_text,
    rollout_target_text, rollout_finished, rollout_reused}`` and the call's seconds.

    No row is decoded twice: a step that ended the answer (EOS) is not continued, a branch in
    ``known`` is reused, and identical P·step ids (identical draft and target steps, or one
    branch shared by several items) share one row. A row's budget is
    ``min(max_tokens, max_len - len(P·step) - 1)``."""
    from lrtune.backends.base import GenParams
    from lrtune.tasks import same_outcome

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
    t0 = time.perf_counter()
    outs = backend.generate(rows, params).outputs if rows else []
    seconds = time.perf_counter() - t0
    labels = []
    for it, ways in zip(items, plan):
        texts, ended = [], []
        for step, way in zip((it.draft, it.target), ways):
            if way[0] == "row":
                cont, end = list(outs[way[1]].token_ids), outs[way[1]].finish == "eos"
            elif way[0] == "known":
                cont, end = list(way[1]), bool(way[2])
            else:
                cont, end = [], True
            ended.append(end)
            texts.append(backend.decode(it.prefix[it.prompt_len:] + step + cont, skip_special_tokens=True))
        same, a_draft, a_target = same_outcome(task, it.problem, texts[0], texts[1])
        labels.append({"rollout_label": same, "rollout_draft_answer": a_draft, "rollout_target_answer": a_target,
                       "rollout_draft_text": texts[0], "rollout_target_text": texts[1],
                       "rollout_finished": all(ended), "rollout_reused": any(w[0] == "known" for w in ways)})
    return labels, seconds


def trajectory_continuation(generated: list[int], finish: str, start: int, *, room: int,
                            divergent_starts: list[int]) -> tuple[list[int], bool] | None:
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
