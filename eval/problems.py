"""Which problems an evaluate run decodes: the task's first ones, those whose template no
training set held (``--heldout-from``), or a given list (``--problem-ids``)."""

from __future__ import annotations

from pathlib import Path

from lrtune.errors import ConfigError
from lrtune.runfiles import log

from lrtune.eval.config import EvalOptions


def seen_templates(task_name: str, dirs: str) -> set[str]:
    """The split groups of every problem in collect dirs (:func:`lrtune.dataset.seen_templates`)."""
    from lrtune.dataset import seen_templates as seen

    return seen(task_name, dirs, flag="--heldout-from")


def heldout_problems(task, opts: EvalOptions) -> list:
    """The first ``opts.limit`` problems whose template is in none of ``opts.heldout_from``
    (:func:`lrtune.dataset.unseen_problems`)."""
    from lrtune.dataset import unseen_problems

    kept, pool = unseen_problems(task, opts.task, opts.heldout_from, opts.limit, opts.task_seed, opts.data)
    log(f"held-out templates: {len(kept)} of the first {pool} problems are unseen by {opts.heldout_from}")
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
        lines = [(n, x.strip()) for n, x in enumerate(text.splitlines(), 1) if x.strip()]
    else:
        lines = [(None, x.strip()) for x in spec.split(",") if x.strip()]
    lines = lines[: opts.limit]
    ids = [i for _, i in lines]
    pool = {p.id: p for p in task.load(limit=20 * opts.limit + 100, seed=opts.task_seed, path=opts.data)}
    missing = [(n, i) for n, i in lines if i not in pool]
    if missing:
        # ids typed on the command line are quoted; ids read from a file are not (the file may
        # hold anything, a token included): an error names their lines instead
        where = (
            ", ".join(i for _, i in missing[:5])
            if missing[0][0] is None
            else f"line(s) {', '.join(str(n) for n, _ in missing[:5])} of {spec[1:]}"
        )
        raise ConfigError(
            f"--problem-ids: {len(missing)} id(s) not among the task's first {len(pool)} problems "
            f"(task {opts.task!r}, seed {opts.task_seed}): {where}"
        )
    return [pool[i] for i in ids]
