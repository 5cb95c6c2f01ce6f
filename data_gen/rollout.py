"""Outcome-grounded teachers: ``rollout`` and ``consensus(rollout,SPEC)``.

A draft step is acceptable when it does not change where the target's reasoning ends up.
For a recorded pair (prefix P, draft step ŝ, target step s) the *target* continues greedily
(with token-level SD when the collect uses it) from P·ŝ and from P·s, up to
``--rollout-tokens`` tokens each; the pair is labelled *accept* when both continuations
reach the same outcome by the task's own checker (:func:`lrtune.tasks.same_outcome`: the
same final answer for math, the same pass/fail for code). Every pair of a problem is
rolled out in one batched engine call (2 rows per pair). Both continuations and their
answers are stored, so every label can be audited.

``consensus(rollout,SPEC)`` decodes with the verifier SPEC as its live teacher, rolls out
every pair, and keeps only the pairs on which SPEC's verdict and the rollout label agree;
the dropped pairs are counted per problem (``teacher_disagreements``).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

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


def rollout_labels(backend, task, problem, prompt: list[int], items: list[tuple[list[int], list[int], list[int]]],
                   *, max_tokens: int, max_len: int, gamma2: int = 0) -> tuple[list[dict], float]:
    """Roll out every ``(prefix P, draft ids, target ids)`` item (``P`` includes ``prompt``)
    and label it; one engine call for all rows. Returns per item ``{rollout_label,
    rollout_draft_answer, rollout_target_answer, rollout_draft_text, rollout_target_text,
    rollout_finished}`` and the call's seconds. A step that ended the answer (EOS) is not
    continued; a row's budget is cut to fit ``max_len``."""
    from lrtune.backends.base import GenParams
    from lrtune.tasks import same_outcome

    rows, params, where = [], [], []
    for pre, draft, target in items:
        for step in (draft, target):
            ids = pre + step
            room = min(max_tokens, max_len - len(ids) - 1)
            if (step and step[-1] in backend.eos_ids) or room < 1:
                where.append(None)
                continue
            where.append(len(rows))
            rows.append(ids)
            params.append(GenParams(max_tokens=room, stop_at_delimiter=False, num_speculative_tokens=gamma2))
    t0 = time.perf_counter()
    outs = backend.generate(rows, params).outputs if rows else []
    seconds = time.perf_counter() - t0
    labels = []
    for n, (pre, draft, target) in enumerate(items):
        texts, ended = [], []
        for step, w in ((draft, where[2 * n]), (target, where[2 * n + 1])):
            cont = outs[w].token_ids if w is not None else []
            ended.append(w is None or outs[w].finish == "eos")
            texts.append(backend.decode(pre[len(prompt):] + step + list(cont), skip_special_tokens=True))
        same, a_draft, a_target = same_outcome(task, problem, texts[0], texts[1])
        labels.append({"rollout_label": same, "rollout_draft_answer": a_draft, "rollout_target_answer": a_target,
                       "rollout_draft_text": texts[0], "rollout_target_text": texts[1],
                       "rollout_finished": all(ended)})
    return labels, seconds
