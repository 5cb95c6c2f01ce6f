"""The step-pair dataset: the contract between ``lrtune collect`` and every later stage.

Its on-disk layout and crash-safe writer are :mod:`lrtune.store`; this module holds the
schema (``PAIR_FIELDS``: one row per compared draft/target step pair; ``PROBLEM_FIELDS``:
one row per problem), the reader (:func:`load_tables`), :func:`merge` of shard outputs,
the summary statistics (:func:`summarize_pairs`) and the dataset card (:func:`write_card`).
Stages read a dataset only through :func:`load_tables`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from lrtune import pairstats
from lrtune.errors import ConfigError
from lrtune.runfiles import backup_path, write_atomic
from lrtune.store import all_entries
from lrtune.verifiers.judge import JUDGE_FORMS, default_threshold

CONFIG = "collect_config.json"  # the config a dataset was collected with, beside its rows
# (decider name, column, threshold) of the optional judge feature columns (collect --judge-features),
# each at its form's default threshold
JUDGE_DECIDERS = tuple(
    (
        f"llm_judge({form})@{default_threshold('llm_judge', form):g}",
        f"llm_judge_{form}_score",
        default_threshold("llm_judge", form),
    )
    for form in JUDGE_FORMS
)

PAIR_FIELDS = [
    ("problem_id", "string"),
    ("task", "string"),
    ("round", "int32"),
    ("position", "int32"),
    ("branch", "int32"),
    ("chosen_branch", "bool_"),
    ("committed", "bool_"),
    ("prefix_len", "int32"),
    ("prefix_sha", "string"),
    ("prefix_text", "string"),
    ("context", "string"),
    ("draft_step", "string"),
    ("target_step", "string"),
    ("teacher", "string"),
    ("teacher_score", "float64"),
    ("label", "bool_"),
    ("draft_len", "int32"),
    ("target_len", "int32"),
    ("draft_mean_logprob", "float64"),
    ("draft_min_logprob", "float64"),
    ("target_mean_logprob", "float64"),
    ("target_min_logprob", "float64"),
    # the target's likelihood of the draft step, from the row that prefilled it (DraftScores)
    ("draft_target_mean_logprob", "float64"),
    ("draft_target_min_logprob", "float64"),
    ("draft_target_argmax_share", "float64"),
    ("draft_target_scored_tokens", "int32"),
    ("draft_entropy", "float64"),  # the draft's mean top-k next-token entropy over its step (nats)
    ("embedding_cosine", "float64"),
    ("exact_match", "bool_"),
    ("target_score", "float64"),
    ("llm_judge_context_score", "float64"),
    ("llm_judge_paper_score", "float64"),  # collect --judge-features
    ("draft_s", "float64"),
    ("target_s", "float64"),
    ("judge_s", "float64"),
    # the live verifier's decision during decoding (= the teacher's for a verifier teacher)
    ("decode_verifier", "string"),
    ("verifier_score", "float64"),
    ("verifier_label", "bool_"),
    # rollout / consensus teachers: both continuations and their outcomes (lrtune.data_gen.rollout)
    ("rollout_draft_answer", "string"),
    ("rollout_target_answer", "string"),
    ("rollout_draft_text", "string"),
    ("rollout_target_text", "string"),
    ("rollout_finished", "bool_"),
    ("rollout_reused", "bool_"),
    # the vote teacher (collect --rollout-samples K): the greedy rollout's own label, and every
    # rollout's outcome per branch as JSON {"draft": [greedy, sample 1..K], "target": [...]}
    ("rollout_greedy_label", "bool_"),
    ("rollout_votes", "string"),
]
PROBLEM_FIELDS = [
    ("problem_id", "string"),
    ("index", "int32"),
    ("task", "string"),
    ("method", "string"),
    ("gamma1", "int32"),
    ("gamma2", "int32"),
    ("alpha1", "float64"),
    ("alpha2", "float64"),
    ("c1", "float64"),
    ("c2", "float64"),
    ("rounds", "int32"),
    ("steps", "int32"),
    ("tokens", "int32"),
    ("wall_s", "float64"),
    ("answer", "string"),
    ("expected", "string"),
    ("correct", "bool_"),
    ("pairs", "int32"),
    ("baseline_answer", "string"),
    ("baseline_correct", "bool_"),
    ("baseline_wall_s", "float64"),
    ("baseline_tokens", "int32"),
    ("finished", "bool_"),
    ("teacher_disagreements", "int32"),
]


def schema(fields):
    import pyarrow as pa

    return pa.schema([(n, getattr(pa, t)()) for n, t in fields])


# Arrow type checks a column of each schema type passes (all-null columns pass too); float columns
# take integers (tables written without the schema), int columns never take floats or text
_COMPATIBLE = {
    "string": ("is_string", "is_large_string"),
    "int32": ("is_integer",),
    "float64": ("is_floating", "is_integer"),
    "bool_": ("is_boolean",),
}
# the columns summarize_pairs (collect --stats) reads from every row
STATS_PAIR_COLUMNS = (
    "label",
    "position",
    "exact_match",
    "embedding_cosine",
    "target_score",
    "draft_step",
    "target_step",
    "judge_s",
)
STATS_PROBLEM_COLUMNS = ("correct", "wall_s", "alpha2")


def load_tables(src: Path, pair_columns: tuple[str, ...] = (), problem_columns: tuple[str, ...] = ()):
    """(pairs, problems) pyarrow tables of a collect dir or a merged dir. A file that is not
    parquet, lacks ``problem_id`` (or a column of ``pair_columns`` / ``problem_columns``) or
    holds a schema column of another type is a ConfigError naming the file and column; so is a
    collect config there that is not one (:func:`read_config`)."""
    if (Path(src) / CONFIG).is_file():
        read_config(Path(src) / CONFIG)
    try:
        return _load_tables(src, ("problem_id", *pair_columns), ("problem_id", *problem_columns))
    except ConfigError:
        raise
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise ConfigError(f"{src}: a dataset file is not readable parquet ({_first_line(e)})") from None


def _load_tables(src: Path, pair_columns: tuple[str, ...], problem_columns: tuple[str, ...]):
    if (src / "pairs.parquet").is_file():
        return (
            read_checked(src / "pairs.parquet", PAIR_FIELDS, pair_columns),
            read_checked(src / "problems.parquet", PROBLEM_FIELDS, problem_columns),
        )
    entries = all_entries(src)
    if not entries:
        raise ConfigError(f"no collected problems in {src}")
    return _concat_parts([(src, e) for e in entries.values()], pair_columns, problem_columns)


def _concat_parts(
    found: list[tuple[Path, dict]],
    pair_columns: tuple[str, ...] = ("problem_id",),
    problem_columns: tuple[str, ...] = ("problem_id",),
):
    """(pairs, problems) of the manifest entries ``(dir, entry)``, in problem-index order."""
    import pyarrow as pa

    order = sorted(found, key=lambda t: t[1]["index"])
    tables = []
    for kind, fields, need in (("pairs", PAIR_FIELDS, pair_columns), ("problems", PROBLEM_FIELDS, problem_columns)):
        parts = [_part_of_its_problem(s, e, kind, read_checked(s / e[kind]["file"], fields, need)) for s, e in order]
        try:  # promote: a dataset resumed by a newer lrtune may hold files with more columns (nulls elsewhere)
            tables.append(pa.concat_tables(parts, promote_options="default"))
        except (ValueError, TypeError) as e:  # ArrowInvalid, ArrowTypeError
            dirs = ", ".join(sorted({str(s) for s, _ in order}))
            raise ConfigError(f"the {kind} part files of {dirs} do not fit together ({_first_line(e)})") from None
    return tables[0], tables[1]


def _part_of_its_problem(src: Path, entry: dict, kind: str, table):
    """``table`` when it holds the rows its manifest entry lists: that many, all of its problem
    (a part of another problem put in its place, even with the manifest's checksum updated, would
    train on one problem twice and lose another); a ConfigError naming the file otherwise."""
    path, pid = src / entry[kind]["file"], entry.get("problem_id")
    if table.num_rows != entry[kind]["rows"]:
        raise ConfigError(f"{path}: {table.num_rows} rows where its manifest lists {entry[kind]['rows']}")
    if pid is not None and "problem_id" in table.column_names:
        other = next((p for p in table.column("problem_id").to_pylist() if p != pid), None)
        if other is not None:
            raise ConfigError(
                f"{path}: holds rows of problem {other!r:.60} where its manifest lists problem {pid!r:.60}"
            )
    return table


def read_checked(path: Path, fields, required: tuple[str, ...] = ("problem_id",)):
    """The parquet table in ``path``; a ConfigError names the file when it is not parquet, lacks a
    ``required`` column, or holds a column of ``fields`` whose type does not fit (:data:`_COMPATIBLE`)."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not readable parquet ({_first_line(e)})") from None
    names = set(table.column_names)
    missing = [c for c in required if c not in names]
    if missing:
        raise ConfigError(f"{path}: no column {missing[0]!r} (not a file of an lrtune step-pair dataset)")
    for name, kind in fields:
        if name in names and not _fits(table.schema.field(name).type, kind):
            raise ConfigError(
                f"{path}: column {name!r} holds {table.schema.field(name).type}, expected {kind.rstrip('_')}"
            )
    return table


def _fits(arrow_type, kind: str) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    return pa.types.is_null(arrow_type) or any(getattr(pa.types, check)(arrow_type) for check in _COMPATIBLE[kind])


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def read_config(path: Path) -> dict:
    """The collect config in ``path``; a ConfigError naming it and the field when it is not a
    JSON object (UTF-8) whose ``options``, ``models`` and ``decode`` are objects
    (:class:`lrtune.filekinds.CollectConfigFile`)."""
    from lrtune.filekinds import CollectConfigFile, read

    return read(path, CollectConfigFile, "collect config")


def move_to_backup(out: Path) -> Path:
    """Move everything in ``out`` but earlier backups into a new ``out/backup-<time>[-N]/``."""
    backup = backup_path(out / "backup")
    backup.mkdir()
    for p in list(out.iterdir()):
        if not p.name.startswith("backup-"):
            shutil.move(str(p), backup / p.name)
    return backup


def merge(dirs: list[str], out: str, force_new: bool = False, defaults: dict | None = None) -> dict:
    """Merge shard outputs into ``out/pairs.parquet`` + ``problems.parquet``. Merging again into
    the same ``out`` (the same or grown shards) is fine; an ``out`` that is a collect run's own
    dir, or a merge with other settings or problems this one lacks, is refused unless
    ``force_new`` (its files then move to a backup folder). ``defaults``: the default collect
    config (its recorded form), so that an option one directory's config lacks (a newer
    lrtune added it) matches another's default (:func:`same_settings`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lrtune.inputs import checked_dir
    from lrtune.outdir import check_out

    check_out(out, "collect --merge")
    srcs = [checked_dir(d, "--merge") for d in dirs]
    found = [read_config(s / CONFIG) for s in srcs if (s / CONFIG).is_file()]
    if any(not same_settings(found[0], c, defaults or {}) for c in found[1:]):
        raise ConfigError(
            "the directories were collected with different settings (only the problems -- task, "
            "data, limit, seed -- and run options may differ)"
        )
    merged = _merged_config(found) if found else None
    by_id: dict[str, tuple[Path, dict]] = {}
    for s in srcs:
        for pid, e in all_entries(s).items():
            if pid in by_id and by_id[pid][1]["pairs"]["sha256"] != e["pairs"]["sha256"]:
                raise ConfigError(f"problem {pid} differs between {by_id[pid][0]} and {s}")
            by_id.setdefault(pid, (s, e))
    if not by_id:
        raise ConfigError("nothing to merge: no finished problems in " + ", ".join(map(str, srcs)))
    pairs, probs = _concat_parts(list(by_id.values()))
    dest = _merge_dest(Path(out).expanduser(), merged, set(by_id), force_new, defaults or {})
    for name, table in (("pairs.parquet", pairs), ("problems.parquet", probs)):
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        write_atomic(dest / name, sink.getvalue().to_pybytes())
    if merged is not None:
        write_atomic(dest / CONFIG, json.dumps(merged, indent=1))
    return write_card(dest)


def _merge_dest(dest: Path, merged: dict | None, ids: set[str], force_new: bool, defaults: dict) -> Path:
    """``dest``, created, once :func:`_merge_conflict` finds nothing a merge would overwrite
    (or ``force_new`` moved it to a backup)."""
    if dest.exists() and not dest.is_dir():
        raise ConfigError(f"--out {dest} is a file, not a directory: pick another --out")
    why = _merge_conflict(dest, merged, ids, defaults) if dest.is_dir() else None
    if why and not force_new:
        raise ConfigError(
            f"--out {dest} {why}: pick another --out, or add --force-new (its files move to a backup folder)"
        )
    from lrtune import gate
    from lrtune.outdir import claim_out

    gate.passed("collect --merge")
    if why:
        move_to_backup(dest)
    return claim_out(dest, "collect --merge")


def _merge_conflict(dest: Path, merged: dict | None, ids: set[str], defaults: dict) -> str | None:
    """What a merge of problems ``ids`` with config ``merged`` would overwrite in ``dest``; None: nothing."""
    if any(dest.glob("manifest-s*.json")) or (dest / "pairs").is_dir() or (dest / "problems").is_dir():
        return "holds a collect run's own data (manifests, pairs/, problems/)"
    if not (dest / "pairs.parquet").is_file():
        return "holds a collect config but no merged data" if (dest / CONFIG).is_file() else None
    try:
        held = set(read_checked(dest / "problems.parquet", PROBLEM_FIELDS).column("problem_id").to_pylist())
        old = read_config(dest / CONFIG) if (dest / CONFIG).is_file() else None
    except ConfigError:
        return "holds a dataset that is not readable"
    lost = sorted(held - ids, key=str)
    if lost:
        return f"holds another merge ({len(lost)} of its problems are not in this one, e.g. {lost[0]})"
    if (old is None) != (merged is None) or (old is not None and not same_settings(old, merged, defaults)):
        return "holds a merge collected with other settings"
    return None


# options that say which problems a directory holds or how the run went, not how its rows were made
_PROBLEM_KEYS = ("task", "data", "limit", "task_seed")
_RUN_KEYS = (
    "progress",
    "shard_id",
    "num_shards",
    "out",
    "force_new",
    "ray",
    "ray_address",
    "ray_cpus_per_shard",
    "ray_gpus_per_shard",
    "max_concurrent",
    "profile",
)


def _how(cfg: dict) -> dict:
    """A collect config without the options that may differ between merged directories (and
    without the vote options while voting is off, which configs older than them lack)."""
    opts = {k: v for k, v in cfg.get("options", {}).items() if k not in _PROBLEM_KEYS + _RUN_KEYS}
    if not opts.get("rollout_samples"):
        opts = {k: v for k, v in opts.items() if k not in ("rollout_samples", "rollout_temperature")}
    return {**cfg, "options": opts}


def _settings(cfg: dict) -> dict:
    """:func:`_how` of a collect or merged config, without its list of merged directories."""
    return json.loads(json.dumps({k: v for k, v in _how(cfg).items() if k != "merged_from"}))


def same_settings(a: dict, b: dict, defaults: dict) -> bool:
    """Whether two collect (or merged) configs made their rows the same way (:func:`_how`). An
    option only one of them records (a newer lrtune added it) counts as the same when the other
    holds its value in ``defaults``, the default config's recorded form; one the defaults do not
    know either (this lrtune no longer has it) is ignored (:func:`lrtune.runfiles.changed_keys`,
    both ways)."""
    from lrtune.runfiles import changed_keys

    sa, sb = _settings(a), _settings(b)
    return not changed_keys(sa, sb, defaults) and not changed_keys(sb, sa, defaults)


def _merged_config(configs: list[dict]) -> dict:
    """The config of a merge: the shared settings; the tasks joined as a mix (``A+B``) where
    they differ, and what differs per directory under ``merged_from``."""
    out = json.loads(json.dumps(configs[0]))
    tasks = list(dict.fromkeys(c.get("options", {}).get("task") for c in configs))
    if len(tasks) > 1:
        out["options"]["task"] = "+".join(str(t) for t in tasks)
    out["merged_from"] = [{k: c.get("options", {}).get(k) for k in _PROBLEM_KEYS} for c in configs]
    return out


def summarize_pairs(src: Path) -> dict:
    """Counts, label balance, α1 by position, and each cheap verifier's (and, where recorded,
    each llm_judge form's) agreement with the teacher."""
    pairs, probs = load_tables(src, STATS_PAIR_COLUMNS, STATS_PROBLEM_COLUMNS)
    d = pairs.to_pydict()
    labels = d["label"]
    out = {
        "problems": probs.num_rows,
        "rows": pairs.num_rows,
        "accepted": sum(labels),
        "label_balance": sum(labels) / len(labels) if labels else None,
        "alpha1_by_position": pairstats.acceptance_by_position(d["position"], labels),
    }
    agree = {"exact": pairstats.agreement([float(x) for x in d["exact_match"]], labels, 0.5)}
    if any(x is not None for x in d["embedding_cosine"]):
        agree["embedding@0.95"] = pairstats.agreement(d["embedding_cosine"], labels, 0.95)
    if any(x is not None for x in d["target_score"]):
        agree["target_score@7/9"] = pairstats.agreement(d["target_score"], labels, 7 / 9)
    for name, col, thr in JUDGE_DECIDERS:
        if any(x is not None for x in d.get(col, ())):
            agree[name] = pairstats.agreement(d[col], labels, thr)
    from lrtune.verifiers.base import same_step

    same = [same_step(a, b) for a, b in zip(d["draft_step"], d["target_step"])]
    likely = target_logprob_scores(d.get("draft_target_mean_logprob"), same)
    if likely is not None:
        agree["target_logprob@0.5"] = pairstats.agreement(likely, labels, 0.5)
    out["agreement_with_teacher"] = agree
    # every decider's yes/no on every row: the teacher, the live verifier when it is another one, the cheap ones
    n = len(labels)
    decide = {"teacher": [bool(x) for x in labels]}
    live = d.get("verifier_label", [None] * n)
    if any(x is not None for x in live) and any(a != b for a, b in zip(live, labels) if a is not None):
        decide["live verifier"] = live
    decide["exact"] = [bool(x) for x in d["exact_match"]]
    for name, col, thr in (
        ("embedding@0.95", "embedding_cosine", 0.95),
        ("target_score@7/9", "target_score", 7 / 9),
        *JUDGE_DECIDERS,
    ):
        if any(x is not None for x in d.get(col, ())):
            decide[name] = [None if x is None else x >= thr for x in d[col]]
    if likely is not None:
        decide["target_logprob@0.5"] = [x >= 0.5 for x in likely]
    out["agreement_matrix"] = pairstats.agreement_matrix(decide)
    out["identical_pairs"] = sum(same)
    out["identical_acceptance"] = pairstats.acceptance_on(same, decide)
    out["label_balance_by_position"] = pairstats.acceptance_by_position(d["position"], labels)
    p = probs.to_pydict()
    fin = [x for x in p.get("finished", []) if x is not None]
    out["finish_rate"] = sum(fin) / len(fin) if fin else None
    out["accuracy"] = sum(bool(x) for x in p["correct"]) / len(p["correct"]) if p["correct"] else None
    out["wall_s"] = float(sum(x or 0.0 for x in p["wall_s"]))
    judge = sorted(x for x in d["judge_s"] if x is not None)
    out["judge_s_median"] = judge[len(judge) // 2] if judge else None
    a2 = [x for x in p["alpha2"] if x is not None]
    out["alpha2_mean"] = sum(a2) / len(a2) if a2 else None
    return out


def target_logprob_scores(mean_logprobs, same: list[bool]) -> list[float] | None:
    """The ``target_logprob`` verifier's scores from recorded columns
    (:func:`~lrtune.verifiers.simple.target_logprob_score`); None when no row was scored."""
    from lrtune.verifiers.simple import target_logprob_score

    if not mean_logprobs or all(x is None for x in mean_logprobs):
        return None
    return [target_logprob_score(s, x) for x, s in zip(mean_logprobs, same)]


def teacher_spec(options: dict) -> str:
    """The teacher as recorded in the rows (collect_config options): ``KIND`` or ``KIND@T``;
    a rollout teacher with ``rollout_samples`` K > 0 votes, recorded as
    ``rollout_vote(greedy+K@TEMPERATURE)`` in place of ``rollout``."""
    t, k = options.get("teacher_threshold"), options.get("rollout_samples") or 0
    name = f"{options.get('teacher')}"
    if k:
        name = name.replace("rollout", vote_teacher(k, options.get("rollout_temperature", 0.7)), 1)
    return name + ("" if t is None else f"@{t:g}")


def vote_teacher(samples: int, temperature: float) -> str:
    """The name of the rollout teacher that votes over the greedy and ``samples`` sampled rollouts."""
    return f"rollout_vote(greedy+{samples}@{temperature:g})"


def num(v, spec: str = ".3f") -> str:
    """A number for the card and --stats; "—" when missing."""
    return "—" if v is None else format(v, spec)


def overview_lines(s: dict) -> list[str]:
    """Counts, accuracy and time of a summary, as markdown/console lines."""
    f = num  # short, inside the f-strings
    return [
        f"problems {s['problems']}, step pairs {s['rows']}, teacher accept rate {f(s['label_balance'])}, "
        f"identical pairs {s.get('identical_pairs', '—')} (teacher accepts "
        f"{f((s.get('identical_acceptance') or {}).get('teacher'))} of them), answers finished within the "
        f"budget {f(s.get('finish_rate'))}",
        "α1 by position: " + ", ".join("—" if a is None else f"{a:.2f}" for a in s["alpha1_by_position"]),
        f"accuracy of the collect method {f(s.get('accuracy'))}, α2 {f(s.get('alpha2_mean'))}, "
        f"per-problem decode time {f(s.get('wall_s'), '.0f')} s summed (batched problems overlap), "
        f"judge {f(s.get('judge_s_median'), '.2f')} s per pair (median)",
    ]


def write_card(out: Path) -> dict:
    """README.md dataset card from what is on disk now; returns the counts."""
    try:
        s = summarize_pairs(out)
    except ConfigError:
        s = {"problems": 0, "rows": 0, "label_balance": None, "alpha1_by_position": [], "agreement_with_teacher": {}}
    cfg = read_config(out / CONFIG) if (out / CONFIG).is_file() else {}
    o, m, dc = cfg.get("options", {}), cfg.get("models", {}), cfg.get("decode", {})
    agree = s.get("agreement_with_teacher", {})
    lines = [
        "# lrtune step-pair dataset",
        "",
        f"Collected by `lrtune collect`: task `{o.get('task')}`, teacher `{teacher_spec(o)}`, target "
        f"`{m.get('target')}`, draft `{m.get('draft')}`, method `{dc.get('method')}` (γ1={dc.get('gamma1')}, "
        f"γ2={dc.get('gamma2')}), temperature {dc.get('temperature')}.",
        "",
        *([f"- {line}" for line in overview_lines(s)] if s["problems"] else ["- no finished problems yet"]),
        *(
            [
                "",
                "Agreement of cheap verifiers with the teacher (`lrtune collect --stats`):",
                "",
                "| verifier | n | accuracy | AUROC | accept rate |",
                "|---|---|---|---|---|",
                *(
                    f"| {k} | {a['n']} | {num(a['accuracy'])} | {num(a['auroc'])} | {num(a['accept_rate'])} |"
                    for k, a in agree.items()
                ),
            ]
            if agree
            else []
        ),
        *matrix_lines(s),
        "",
        "Load it:",
        "",
        "```python",
        "import datasets",
        'pairs = datasets.load_dataset("parquet", data_files="pairs/*.parquet", split="train")'
        if not (out / "pairs.parquet").is_file()
        else 'pairs = datasets.load_dataset("parquet", data_files="pairs.parquet", split="train")',
        "```",
        "",
        "Columns: " + ", ".join(n for n, _ in PAIR_FIELDS) + ".",
        "",
        "Per-problem rows (`problems`): " + ", ".join(n for n, _ in PROBLEM_FIELDS) + ".",
        "",
        "Config: `collect_config.json`. The shard manifests (`manifest-s*.json`) list the finished problems "
        "with sha256 checksums of their files.",
    ]
    write_atomic(out / "README.md", "\n".join(lines) + "\n")
    return s


def matrix_lines(s: dict) -> list[str]:
    """The agreement matrix and each decider's acceptance of identical pairs, as markdown."""
    m = s.get("agreement_matrix") or {}
    if not m:
        return []
    names = list(m)
    ident = s.get("identical_acceptance") or {}
    return [
        "",
        "Agreement matrix (share of pairs on which two deciders agree) and each one's acceptance of the "
        f"{s.get('identical_pairs', 0)} pairs whose steps are identical up to whitespace and case:",
        "",
        "| | " + " | ".join(names) + " | accepts identical |",
        "|---" * (len(names) + 2) + "|",
        *(
            f"| {a} | " + " | ".join(num(m[a][b], ".2f") for b in names) + f" | {num(ident.get(a), '.2f')} |"
            for a in names
        ),
    ]


def seen_templates(task_name: str, dirs: str, flag: str = "--heldout-from") -> set[str]:
    """The split groups (:func:`lrtune.tasks.template_of`) of every problem in collect dirs
    (a comma list); ConfigError naming ``flag`` for one that is not a directory."""
    from lrtune.tasks import template_of

    seen = set()
    for d in [x.strip() for x in dirs.split(",") if x.strip()]:
        if not Path(d).expanduser().is_dir():
            raise ConfigError(f"{flag} {d}: not a directory (a collect output)")
        _, probs = load_tables(Path(d).expanduser())
        for r in probs.to_pylist():
            seen.add(template_of(r.get("task") or task_name, r["problem_id"]))
    return seen


def unseen_problems(
    task, task_name: str, dirs: str, limit: int, seed: int, path: str | None, flag: str = "--heldout-from"
) -> tuple[list, int]:
    """(the first ``limit`` problems of ``task`` whose template no collect dir of ``dirs``
    holds, the size of the pool searched). In a task mix each problem is grouped under its own
    task and the tasks keep equal shares (unseen problems of one task may come much later)."""
    from lrtune.tasks import template_of

    seen = seen_templates(task_name, dirs, flag)
    pool = task.load(limit=20 * limit + 100, seed=seed, path=path)
    kept = [p for p in pool if template_of(p.meta.get("task") or task_name, p.id) not in seen]
    return (task.balanced(kept) if hasattr(task, "balanced") else kept)[:limit], len(pool)
