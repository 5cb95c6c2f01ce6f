"""Training data of the distilled verifier: step pairs from ``lrtune collect`` with
template-level splits (no template, hence no problem, in two splits: gsm_symbolic problems
share ~100 templates; see :func:`lrtune.tasks.template_of`) and a fingerprint of the data."""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lrtune.errors import ConfigError
from lrtune.verifiers.base import StepPair
from lrtune.verifiers.pairrecords import pair_from_columns

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class PairExample:
    """One teacher-labelled pair: ``target`` is the teacher's soft score in [0, 1] (its
    label when it has no score in that range), ``label`` the teacher's decision."""

    problem_id: str
    pair: StepPair
    label: bool
    target: float
    teacher_s: float | None = None  # teacher seconds per pair (collect's judge_s)
    embedding_cosine: float | None = None
    exact_match: bool | None = None
    group: str = ""  # the split unit: the problem's template ("" = the problem itself)

    @property
    def split_group(self) -> str:
        return self.group or self.problem_id


def load_pairs(data: str | Sequence[str]) -> tuple[list[PairExample], str]:
    """Examples from one or more collect (or merged) dirs, and the teacher's name."""
    from lrtune.dataset import load_tables
    from lrtune.tasks import template_of

    dirs = [data] if isinstance(data, str) else list(data)
    if not dirs:
        raise ConfigError("no training data: pass --data COLLECT_DIR")
    out: list[PairExample] = []
    teachers = set()
    for d in dirs:
        src = Path(d).expanduser()
        if not src.is_dir():
            raise ConfigError(f"training data not found: {d} (a directory written by lrtune collect)")
        pairs, _ = load_tables(src)
        for r in pairs.to_pylist():
            if r.get("label") is None or r.get("draft_step") is None:
                continue
            s = r.get("teacher_score")
            soft = float(s) if s is not None and not math.isnan(s) and 0.0 <= s <= 1.0 else float(r["label"])
            teachers.add(r.get("teacher") or "?")
            out.append(
                PairExample(
                    problem_id=f"{r['task']}/{r['problem_id']}",
                    pair=pair_from_columns(r),
                    label=bool(r["label"]),
                    target=soft,
                    teacher_s=r.get("judge_s"),
                    embedding_cosine=r.get("embedding_cosine"),
                    exact_match=r.get("exact_match"),
                    group=template_of(r["task"], r["problem_id"]),
                )
            )
    if not out:
        raise ConfigError(f"no labelled step pairs in {', '.join(dirs)}")
    if len(teachers) > 1:
        raise ConfigError(f"the data mixes teachers ({', '.join(sorted(teachers))}); train on one teacher's labels")
    return out, teachers.pop()


def split_groups(groups: Sequence[str], val_fraction: float, test_fraction: float, seed: int) -> dict[str, str]:
    """Group (template) -> split. Groups (not pairs) are shuffled with ``seed`` and cut into
    test (⌈n·test⌉, ≥ 1), val (⌈n·val⌉, ≥ 1) and train (the rest, ≥ 1)."""
    ids = sorted(set(groups))
    n = len(ids)
    if n < 3:
        raise ConfigError(
            f"need at least 3 problem templates for train/val/test splits, got {n}; collect more problems"
        )
    if not (0 < val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
        raise ConfigError("val and test fractions must be in (0, 1) with a sum below 1")
    random.Random(seed).shuffle(ids)
    n_test = max(1, math.ceil(n * test_fraction))
    n_val = max(1, math.ceil(n * val_fraction))
    if n_test + n_val >= n:
        n_test, n_val = 1, 1
    return {pid: ("test" if i < n_test else "val" if i < n_test + n_val else "train") for i, pid in enumerate(ids)}


def split_examples(
    examples: Sequence[PairExample], val_fraction: float, test_fraction: float, seed: int
) -> dict[str, list[PairExample]]:
    """The examples of each split: all examples of one template in one split (see
    :func:`split_groups`)."""
    where = split_groups([e.split_group for e in examples], val_fraction, test_fraction, seed)
    out: dict[str, list[PairExample]] = {s: [] for s in SPLITS}
    for e in examples:
        out[where[e.split_group]].append(e)
    return out


def fingerprint(examples: Sequence[PairExample]) -> str:
    """sha256 over every example's problem, texts and teacher label/score, in order, and every
    other column a student reads where the data has it (:func:`_read_columns`)."""
    h = hashlib.sha256()
    for e in examples:
        for part in (
            e.problem_id,
            e.pair.context,
            e.pair.draft,
            e.pair.target,
            str(int(e.label)),
            f"{e.target:.6f}",
            *_read_columns(e),
        ):
            h.update(part.encode())
            h.update(b"\0")
    return h.hexdigest()


def _read_columns(e: PairExample) -> list[str]:
    """The likelihood columns (the target's and the draft's scores of the draft step) and the
    embedding cosine of an example, when it has them (none: the fingerprint of older data)."""
    s = e.pair.draft_scores
    parts = (
        []
        if s is None
        else [
            f"scores:{s.mean_logprob!r},{s.min_logprob!r},{s.argmax_share!r},{s.tokens!r},"
            f"{s.draft_logprob!r},{s.draft_entropy!r}"
        ]
    )
    return parts + ([] if e.embedding_cosine is None else [f"cosine:{float(e.embedding_cosine)!r}"])
