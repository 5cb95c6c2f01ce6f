"""Which problems an evaluate run decodes: the task's first ones, those whose template no
training set held (``--heldout-from``), or a given list (``--problem-ids``)."""

from __future__ import annotations

from pathlib import Path

from lrtune.errors import ConfigError
from lrtune.runfiles import log

from lrtune.eval.config import EvalOptions


def seen_templates(task_name: str, dirs: str) -> set[str]:
    """The split groups (:func:`lrtune.tasks.template_of`) of every problem in collect dirs."""
    from lrtune.dataset import load_tables
    from lrtune.tasks import template_of

    seen = set()
    for d in [x.strip() for x in dirs.split(",") if x.strip()]:
        if not Path(d).expanduser().is_dir():
            raise ConfigError(f"--heldout-from {d}: not a directory (a collect output)")
        _, probs = load_tables(Path(d).expanduser())
        for r in probs.to_pylist():
            seen.add(template_of(r.get("task") or task_name, r["problem_id"]))
    return seen


def heldout_problems(task, opts: EvalOptions) -> list:
    """The first ``opts.limit`` problems whose template is in none of ``opts.heldout_from``;
    in a task mix each problem is grouped under its own task (as collect records it) and the
    tasks keep equal shares (unseen problems of one task may come much later in its pool)."""
    from lrtune.tasks import template_of

    seen = seen_templates(opts.task, opts.heldout_from)
    pool = task.load(limit=20 * opts.limit + 100, seed=opts.task_seed, path=opts.data)
    kept = [p for p in pool if template_of(p.meta.get("task") or opts.task, p.id) not in seen]
    kept = (task.balanced(kept) if hasattr(task, "balanced") else kept)[:opts.limit]
    log(f"held-out templates: {len(kept)} of the first {len(pool)} problems are unseen by {opts.heldout_from}")
    if len(kept) < opts.limit:
        log(f"warning: only {len(kept)} problems with unseen templates (asked for {opts.limit})")
    return kept


def listed_problems(task, opts: EvalOptions) -> list:
    """The problems ``opts.problem_ids`` names (a comma list or ``@FILE``), in that order,
    at most ``opts.limit``; a ConfigError names any id the task's pool does not hold."""
    if opts.heldout_from:
        raise ConfigError("--problem-ids names the problems itself: drop --heldout-from")
    spec = opts.problem_ids.strip()
    if spec.startswith("@"):
        path = Path(spec[1:]).expanduser()
        if not path.is_file():
            raise ConfigError(f"--problem-ids {spec}: no such file")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            why = "not a UTF-8 text file" if isinstance(e, UnicodeDecodeError) else (e.strerror or str(e))
            raise ConfigError(f"--problem-ids {spec}: {why}") from None
        ids = [x.strip() for x in text.splitlines() if x.strip()]
    else:
        ids = [x.strip() for x in spec.split(",") if x.strip()]
    ids = ids[:opts.limit]
    pool = {p.id: p for p in task.load(limit=20 * opts.limit + 100, seed=opts.task_seed, path=opts.data)}
    missing = [i for i in ids if i not in pool]
    if missing:
        raise ConfigError(f"--problem-ids: {len(missing)} id(s) not among the task's first {len(pool)} problems "
                          f"(task {opts.task!r}, seed {opts.task_seed}): {', '.join(missing[:5])}")
    return [pool[i] for i in ids]
