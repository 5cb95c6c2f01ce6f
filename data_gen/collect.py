"""``lrtune collect``: a step-pair dataset with teacher labels, resumable and shardable.

    lrtune collect --task gsm_symbolic --limit 50 --teacher llm_judge --out data/pairs
    lrtune collect ... --num-shards 4 --shard-id 1          # one of 4 disjoint shards
    lrtune collect --merge data/s0 data/s1 --out data/all   # merge shard outputs
    lrtune collect --stats data/pairs                       # counts and verifier agreement

LR (or LR+SD) decoding runs with the **teacher** as its verifier, and every draft/target
step pair the decoder compares is recorded — rejected ones and every branch included —
with the teacher's score and label, cheap features (lengths, draft/target mean and min
token logprob, embedding cosine, exact match, the target's own 0–9 score) and timings.
One row per problem holds measured α1, α2, c1, c2, lengths, time, the answer and its
correctness (and a target-only reference with ``--with-baseline``). Storage and crash
safety: :mod:`lrtune.store`; schema, reader and card: :mod:`lrtune.dataset`. Problem i belongs to
shard ``i % num_shards``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from lrtune import gate
from lrtune import schema
from lrtune.modelconfig import ModelConfig, VerifierConfig
from lrtune.configs import ArgumentParser, Command, Section
from lrtune.decoder import DecodeConfig
from lrtune.errors import ConfigError, LrtuneError
from lrtune.dataset import CONFIG, merge, move_to_backup, num, overview_lines, read_config, summarize_pairs, write_card
from lrtune.outdir import check_out, claim_out
from lrtune.runfiles import ProgressBar, changed_keys, config_key, log, write_atomic
from lrtune.store import ShardStore

from lrtune.data_gen.collector import JUDGE_FEATURES, Collector, divergent_starts, pair_rows
from lrtune.data_gen.config import CollectConfig, CollectOptions, collect_options, teacher_name

__all__ = [
    "JUDGE_FEATURES",
    "CollectConfig",
    "CollectOptions",
    "collect_options",
    "check_collect_out",
    "collect_key",
    "config_from_args",
    "divergent_starts",
    "main_from_args",
    "pair_rows",
    "prepare_out",
    "run",
    "run_ray",
    "teacher_name",
    "validate_run",
]

RESUME_FREE = (
    "limit",
    "progress",
    "shard_id",
    "out",
    "force_new",
    "ray",
    "ray_address",
    "ray_cpus_per_shard",
    "ray_gpus_per_shard",
    "max_concurrent",
    "profile",
)  # batching never changes a problem's tokens


# ---- rows ------------------------------------------------------------------------------


# ---- the run ---------------------------------------------------------------------------


def collect_key(cfg: CollectConfig) -> dict:
    """The part of the config that must match to append to an existing dataset."""
    return config_key({"options": cfg.options, "models": cfg.models, "decode": cfg.decode}, RESUME_FREE)


def check_collect_out(cfg: CollectConfig) -> bool:
    """Phase 1: ``--out`` can take this collect run (:func:`lrtune.outdir.check_out`) and holds
    no dataset of another config (an unreadable config counts as another one) unless
    ``--force-new``; reads only. Returns whether the old files must move to a backup folder."""
    out = check_out(cfg.options.out, "collect")
    key = collect_key(cfg)
    path = out / CONFIG
    if not path.is_file():
        return False
    old = _recorded_key(path)
    same = _same_config(old, key)
    if not same and not cfg.options.force_new:
        what = "another config" if old is not None else f"a config that is not readable ({path.name})"
        raise ConfigError(
            f"{out} holds a dataset collected with {what}; use another --out or "
            "--force-new (the old files move to a backup folder)"
        )
    return not same


def prepare_out(cfg: CollectConfig, backup: bool, lock: str | None = None) -> Path:
    """Phase 2 (after :func:`check_collect_out`): claim ``--out`` (``lock``: default this
    shard's, so shards of one dataset run side by side), move an old dataset of another config
    to a backup folder when ``backup``, record this config."""
    if backup:  # the old dataset, its owner record included, moves aside first
        move_to_backup(Path(cfg.options.out).expanduser())
    out = claim_out(cfg.options.out, "collect", lock=lock or f".lrtune-lock-s{cfg.options.shards.shard_id:03d}")
    key = collect_key(cfg)
    path = out / CONFIG
    from lrtune import locks

    with locks.exclusive(out / ".lrtune-lock-config"):  # shards share the folder: check and record as one step
        old = _recorded_key(path) if path.is_file() else None
        if old is not None and not _same_config(old, key):
            raise ConfigError(
                f"{out} is being collected by another shard with another config now ({path.name} "
                "changed after this run checked it); give every shard the same options"
            )
        if old != key:
            write_atomic(path, json.dumps(key, indent=1))
    return out


def _same_config(old: dict | None, key: dict) -> bool:
    """Whether a recorded collect config is this run's (equal but for options a newer lrtune added)."""
    return old == key or (old is not None and not changed_keys(old, key, collect_key(CollectConfig())))


def _recorded_key(path: Path) -> dict | None:
    """The config a dataset was collected with; None when the file is not a readable one."""
    try:
        return read_config(path)
    except ConfigError:
        return None


@dataclass
class _Plan:
    """What phase 1 of a collect run found (:func:`validate_run`)."""

    dcfg: DecodeConfig
    task: object
    mine: list  # (index, problem) of this shard
    backup: bool  # an old dataset of another config moves to a backup folder


def validate_run(cfg: CollectConfig) -> _Plan:
    """Phase 1 of a collect run: every option, the teacher, the task and its problems, the
    models (directories, tokenizers, prompts that fit) and ``--out``; no side effect."""
    from lrtune.tasks import get_task

    opts = schema.check(cfg.options)
    cfg.models.validate()
    if not opts.shards.shard_id < opts.shards.num_shards:
        raise ConfigError(
            f"--shard-id must be in 0..{opts.shards.num_shards - 1} (--num-shards {opts.shards.num_shards})"
        )
    if opts.profile is not None:
        from lrtune.batchcost import read_profile_curve

        read_profile_curve(opts.profile)  # a bad file fails now, before any model loads
    why = {
        "async": "async LR keeps no rounds",
        "abort": "early abort stops the target rows after a rejection, so those pairs would be missing",
        "reuse+abort": "early abort stops the target rows after a rejection, so those pairs would be missing",
        "reuse": "reused rows start mid-step, so the target's per-token features of a step would be partial",
        "score": "score rounds generate no target step to pair with a draft step",
    }.get(cfg.decode.schedule)
    if why:
        raise ConfigError(
            f"collect records every draft/target step pair of sync LR rounds; --schedule "
            f"{cfg.decode.schedule}: {why}. Use --schedule sync"
        )
    if cfg.decode.record not in ("steps", "logprobs+draft_scores"):  # "steps" is the default: not set
        raise ConfigError(
            f"--record {cfg.decode.record}: collect records logprobs and draft scores itself "
            "(logprobs+draft_scores); drop --record"
        )
    dcfg = dataclasses.replace(cfg.decode, record="logprobs+draft_scores").validate()
    if not dcfg.uses_lr:
        raise ConfigError("collect records LR step pairs: use --method lr or lr+sd")
    spec = opts.teacher.parsed
    if spec.live is not None and cfg.models.verification.spec not in (VerifierConfig.spec, spec.live):
        raise ConfigError(
            f"--verifier {cfg.models.verification.spec}: decodes only under a rollout teacher (the teacher "
            f"{opts.teacher.spec!r} decodes with {spec.live!r} itself); drop it"
        )
    if opts.rollout.samples and spec.kind == "verifier":
        raise ConfigError(
            f"--rollout-samples needs a rollout teacher, got {opts.rollout.samples} with --teacher {opts.teacher.spec}"
        )
    task = get_task(opts.task)
    if getattr(task, "KIND", "math") == "code":
        from lrtune.sandbox import require_isolation

        require_isolation(opts.unsafe_exec)
    problems = task.load(limit=opts.limit, seed=opts.task_seed, path=opts.data)
    if not problems:
        raise ConfigError("no problems to collect")
    mine = [(i, p) for i, p in enumerate(problems) if i % opts.shards.num_shards == opts.shards.shard_id]
    backup = check_collect_out(cfg)  # cheap: before the models, which may be built on first use
    from lrtune.build import check_configs, require_a_prompt_that_fits

    models = _decode_models(cfg, spec)
    check_configs(models, dcfg, progress=opts.progress, load_all_methods=dcfg.uses_sd)
    require_a_prompt_that_fits(models, dcfg, [task.prompt(p) for _, p in mine], progress=opts.progress)
    return _Plan(dcfg, task, mine, backup)


def run(cfg: CollectConfig, *, card: bool = True) -> dict:
    """Collect this shard's problems (resuming), write the card; returns counts."""
    plan = validate_run(cfg)
    gate.passed("collect")  # every input is valid; only now is --out claimed, cleaned and written
    opts, dcfg, task, mine = cfg.options, plan.dcfg, plan.task, plan.mine
    out = prepare_out(cfg, plan.backup)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = ShardStore(out, opts.shards.shard_id)
    for w in caught:
        log(f"warning: {w.message}")
    removed = store.clean_orphans()
    if removed:
        log(f"removed {removed} file(s) of an interrupted run")
    todo = [(i, p) for i, p in mine if p.id not in store.finished]
    if store.finished:
        log(f"resuming {out}: {len(mine) - len(todo)} of {len(mine)} problems done")
    if todo:
        _collect(cfg, dcfg, task, todo, store)
    return write_card(out) if card else {"problems": len(mine), "rows": None}


def _decode_models(cfg: CollectConfig, spec) -> ModelConfig:
    """The models the collect decoder runs: the teacher decodes (a rollout teacher: --verifier)."""
    live = spec.live if spec.live is not None else cfg.models.verification.spec  # what decodes (rollout: --verifier)
    return dataclasses.replace(
        cfg.models,
        verifier=live,
        verifier_threshold=cfg.options.teacher.threshold
        if spec.kind != "rollout"
        else cfg.models.verification.threshold,
    )


def _collect(cfg: CollectConfig, dcfg: DecodeConfig, task, todo, store: ShardStore) -> None:
    """Decode ``todo`` (batched, ``--max-concurrent`` in flight) and store each problem's
    labelled pairs and problem row as it ends (:class:`Collector`)."""
    spec = cfg.options.teacher.parsed
    models = _decode_models(cfg, spec)
    Collector(cfg, dcfg, models, spec, models.verification.spec, task, todo, store).run()


# ---- Ray --------------------------------------------------------------------------------
RAY_ENV_PREFIXES = ("HF_", "TRANSFORMERS_", "LRTUNE", "VLLM_", "OMP_", "TOKENIZERS_", "CUDA_VISIBLE_DEVICES")
_SECRET = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL")


def ray_env(environ) -> dict[str, str]:
    """The variables a Ray shard needs (hub, cache, engine and thread settings), never
    secrets: a name with TOKEN, SECRET, PASSWORD, KEY or CREDENTIAL in it (e.g. ``HF_TOKEN``)
    stays here, also with ``--ray-address`` (a remote cluster)."""
    return {
        k: v for k, v in environ.items() if k.startswith(RAY_ENV_PREFIXES) and not any(w in k.upper() for w in _SECRET)
    }


def run_ray(cfg: CollectConfig) -> dict:
    """Every shard of ``cfg`` as one Ray task writing into the same ``--out`` (each shard has
    its own manifest, so tasks never touch each other's files); the card is written once at
    the end. A failed task is reported and the finished shards stay (re-run to resume)."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray: pip install 'lrtune[ray]'") from None
    opts = cfg.options
    plan = validate_run(dataclasses.replace(cfg, options=_shard_options(opts, 0)))
    prepare_out(cfg, plan.backup, lock=".lrtune-lock-ray")  # before any task starts; the tasks lock their shards
    env = ray_env(os.environ)
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(
            address=opts.ray.address,
            runtime_env={"env_vars": env},
            include_dashboard=False,
            log_to_driver=opts.progress,
            logging_level="ERROR",
        )
    try:
        task = ray.remote(num_cpus=opts.ray.cpus_per_shard, num_gpus=opts.ray.gpus_per_shard, max_retries=0)(_ray_shard)
        shard_cfgs = [
            dataclasses.replace(cfg, options=dataclasses.replace(_shard_options(opts, i), progress=False))
            for i in range(opts.shards.num_shards)
        ]
        refs = {task.remote(c): c.options.shards.shard_id for c in shard_cfgs}
        bar = ProgressBar("ray shards", len(refs), opts.progress)
        failed = []
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            sid = refs[done[0]]
            try:
                ray.get(done[0])
                bar.advance(1, f"shard {sid} done")
            except Exception as e:  # noqa: BLE001 - a task's error is reported, the others go on
                failed.append(f"shard {sid}: {str(e).strip().splitlines()[-1]}")
                bar.advance(1, f"shard {sid} failed")
        bar.close()
    finally:
        if started_here:
            ray.shutdown()
    counts = write_card(Path(opts.out).expanduser())
    if failed:
        raise LrtuneError(
            f"{len(failed)} of {opts.shards.num_shards} shard(s) failed ({'; '.join(failed)}); "
            "finished problems are kept: re-run the same command to resume"
        )
    return counts


def _shard_options(opts: CollectOptions, shard_id: int) -> CollectOptions:
    """``opts`` for shard ``shard_id`` run as one task (not as Ray tasks again)."""
    return dataclasses.replace(
        opts,
        shards=dataclasses.replace(opts.shards, shard_id=shard_id),
        ray=dataclasses.replace(opts.ray, enabled=False),
    )


def _ray_shard(cfg: CollectConfig) -> dict:
    """One shard inside a Ray worker (no card: the driver writes it once)."""
    return run(cfg, card=False)


def print_stats(s: dict) -> None:
    from rich.table import Table

    from lrtune.runfiles import console

    c = console()
    for line in overview_lines(s):
        c.print(line)
    t = Table(title="agreement with the teacher")
    for col in ("verifier", "n", "accuracy", "AUROC", "accept rate"):
        t.add_column(col)
    for name, a in s["agreement_with_teacher"].items():
        t.add_row(name, str(a["n"]), num(a["accuracy"]), num(a["auroc"]), num(a["accept_rate"]))
    c.print(t)
    m = s.get("agreement_matrix") or {}
    if m:
        t = Table(title="agreement matrix")
        for col in ("", *m, "accepts identical"):
            t.add_column(col)
        for a in m:
            t.add_row(a, *(num(m[a][b], ".2f") for b in m), num((s.get("identical_acceptance") or {}).get(a), ".2f"))
        c.print(t)


# ---- CLI -------------------------------------------------------------------------------
def _merge_and_stats_flags(p: ArgumentParser) -> None:
    p.add_argument("--merge", nargs="+", metavar="DIR", help="merge these collect dirs into --out and exit")
    p.add_argument("--stats", metavar="DIR", help="print counts and verifier agreement of a collect dir and exit")


COMMAND = Command(
    ("collect",),
    __doc__.splitlines()[0],
    (
        Section(CollectOptions),
        Section(
            ModelConfig,
            skip=("verifier_threshold",),
            help={
                "verifier": "the verifier that decodes under a rollout teacher (a verifier or consensus teacher "
                "decodes with itself)"
            },
        ),
        Section(
            DecodeConfig,
            skip=("record", "logprobs", "score_drafts"),
            defaults={
                k: getattr(CollectConfig().decode, k) for k in ("method", "gamma1", "max_new_tokens", "max_step_tokens")
            },
        ),
    ),
    extra=_merge_and_stats_flags,
)
add_arguments, make_parser = COMMAND.add_arguments, COMMAND.make_parser


def config_from_args(args) -> CollectConfig:
    options, models, decode = COMMAND.configs(args)
    return CollectConfig(options=options, models=models, decode=decode)


def main_from_args(args) -> int:
    if args.stats and args.merge:
        raise ConfigError("--stats reads one dataset and --merge writes one: give one of them")
    if args.stats:
        src = Path(args.stats).expanduser()
        if not src.is_dir():
            raise ConfigError(f"not a directory: {src}")
        s = summarize_pairs(src)
        print_stats(s)
        return 0
    cfg = config_from_args(args)
    if args.merge:
        s = merge(args.merge, cfg.options.out, force_new=cfg.options.force_new, defaults=collect_key(CollectConfig()))
        log(f"merged {s['problems']} problems, {s['rows']} rows into {cfg.options.out}")
        return 0
    counts = run_ray(cfg) if cfg.options.ray.enabled else run(cfg)
    log(f"{counts['problems']} problems, {counts['rows']} step pairs in {cfg.options.out}")
    print_stats(counts)
    return 0


if __name__ == "__main__":  # pragma: no cover
    COMMAND.main(main_from_args)
