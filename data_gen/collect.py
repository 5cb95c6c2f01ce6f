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
safety: :mod:`lrtune.store`; schema, reader and card: :mod:`lrtune.dataset`. Problem i belongs to shard ``i % num_shards``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from annotated_types import Interval

from lrtune import schema
from lrtune.schema import STRICT, Count, Fraction, Problems, Seed, Text

import dataclasses
import hashlib
import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from lrtune.api import ModelConfig
from lrtune.configs import ArgumentParser, Command, Section
from lrtune.decoder import DecodeConfig
from lrtune.errors import ConfigError, LrtuneError
from lrtune.dataset import (CONFIG, PAIR_FIELDS, PROBLEM_FIELDS, merge, move_to_backup, num, overview_lines,
                            read_config, summarize_pairs, write_card)
from lrtune.dataset import schema as arrow_schema
from lrtune.outdir import check_out, claim_out
from lrtune.runfiles import ProgressBar, changed_keys, config_key, log, write_atomic
from lrtune.store import ShardStore
from lrtune.verifiers.base import mean_topk_entropy

RESUME_FREE = ("limit", "progress", "shard_id", "out", "force_new", "ray", "ray_address", "ray_cpus_per_shard",
               "ray_gpus_per_shard", "max_concurrent", "profile")  # batching never changes a problem's tokens


@dataclass
class CollectOptions:
    """What to collect and where."""

    __pydantic_config__ = STRICT

    task: Text = field(default="gsm_symbolic+humaneval", metadata={"help": "task or a mix A+B (see lrtune evaluate --help); the default pair is a Coder pair, so its home task humaneval (sandboxed tests) is in the default mix"})
    data: Text | None = field(default=None, metadata={"help": "problem file for file tasks"})
    limit: Problems = field(default=50, metadata={"help": "number of problems (all shards together)"})
    task_seed: Seed = field(default=0, metadata={"help": "problem generator seed (gsm_symbolic)"})
    teacher: Text = field(default="llm_judge", metadata={"help": "teacher: a verifier spec (llm_judge, llm_judge(paper), embedding, ...), rollout (outcome of target continuations; decodes with --verifier), or consensus(rollout,VERIFIER)"})
    rollout_tokens: Count = field(default=256, metadata={"help": "rollout teachers: tokens each continuation may generate"})
    rollout_samples: Annotated[int, Interval(ge=0, le=64)] = field(default=0, metadata={"help": "rollout teachers: sampled rollouts per branch beside the greedy one; > 0 labels by vote (accept when the two branches' modal outcomes are the same; the teacher is recorded as rollout_vote(greedy+K@T))"})
    rollout_temperature: Annotated[float, Interval(gt=0, le=100)] = field(default=0.7, metadata={"help": "rollout teachers: temperature of the --rollout-samples rollouts"})
    rollout_pairs: Literal["all", "committed"] = field(default="all", metadata={"help": "rollout teachers: which pairs to label: all, or committed (only the pairs on the answer's own path, whose committed branch reuses the answer as its rollout when that is the target's greedy continuation, e.g. with --verifier exact)"})
    teacher_threshold: Fraction | None = field(default=None, metadata={"help": "the teacher accepts when its score >= this "
                                                                           "(default: the verifier's own)"})
    out: Text = field(default="results/collect", metadata={"help": "output directory"})
    max_concurrent: Annotated[int, Interval(ge=1, le=4096)] | None = field(default=None, metadata={"help": "problems decoded together (batched LR rounds); default: the best for the b(n) curve of --profile, or of a short measurement at start"})
    profile: Text | None = field(default=None, metadata={"help": "lrtune profile JSON whose b(n) curve picks the default --max-concurrent"})
    with_baseline: bool = field(default=False, metadata={"help": "also decode target-only per problem (reference answer and time)"})
    num_shards: Annotated[int, Interval(ge=1, le=100_000)] = field(default=1, metadata={"help": "split problems into this many shards (problem i -> shard i % N)"})
    shard_id: Annotated[int, Interval(ge=0, le=100_000)] = field(default=0, metadata={"help": "the shard this process collects"})
    embedding_feature: bool = field(default=True, metadata={"help": "record the embedding cosine of each pair"})
    target_score_feature: bool = field(default=True, metadata={"help": "record the target's 0-9 score of each draft step"})
    judge_features: bool = field(default=False, metadata={"help": "also score every pair with both llm_judge forms (context and paper; the target judges) as feature columns, so --stats compares them with the teacher (two judge calls per non-identical pair)"})
    force_new: bool = field(default=False, metadata={"help": "start a new dataset (or, with --merge, a new merge) in --out even if it holds another config or run (old files move to backup-*/)"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    unsafe_exec: bool = field(default=False, metadata={"help": "code tasks: run generated code without OS-level isolation when bubblewrap is missing (only the in-process Python guard; not isolation)"})
    ray: bool = field(default=False, metadata={"help": "run all --num-shards shards as Ray tasks (pip install lrtune[ray])"})
    ray_address: Text | None = field(default=None, metadata={"help": "Ray cluster to join (default: start a local one)"})
    ray_cpus_per_shard: Annotated[float, Interval(ge=0, le=4096)] = field(default=1.0, metadata={"help": "CPUs Ray reserves for each shard task"})
    ray_gpus_per_shard: Annotated[float, Interval(ge=0, le=1024)] = field(default=0.0, metadata={"help": "GPUs Ray reserves for each shard task "
                                                                    "(tensor parallel: the TP size)"})


@dataclass
class CollectConfig:
    options: CollectOptions = field(default_factory=CollectOptions)
    models: ModelConfig = field(default_factory=ModelConfig)
    decode: DecodeConfig = field(default_factory=lambda: DecodeConfig(method="lr", gamma1=3, max_new_tokens=512,
                                                                      max_step_tokens=96))


# ---- rows ------------------------------------------------------------------------------
def _lp_stats(g) -> tuple[float | None, float | None]:
    lps = getattr(g, "logprobs", None)
    if not lps:
        return None, None
    return sum(lps) / len(lps), min(lps)


def pair_rows(problem_id: str, task: str, teacher: str, rnd) -> list[dict]:
    """Every (branch, position) pair one round compared (pure given the round record)."""
    branches = rnd.branches or [rnd.drafts]
    b_targets = rnd.branch_targets or [rnd.targets]
    b_scores = rnd.branch_scores or [rnd.scores]
    b_accepted = rnd.branch_accepted or [rnd.accepted]
    n_pairs = sum(len(b) for b in branches) or 1
    n_targets = len({id(t) for ts in b_targets for t in ts}) or 1
    rows = []
    for w, chain in enumerate(branches):
        for k, d in enumerate(chain):
            t = b_targets[w][k]
            dm, dmin = _lp_stats(d)
            tm, tmin = _lp_stats(t)
            seen = rnd.pairs[w][k] if rnd.pairs else None  # exactly what the teacher judged
            ds = seen.draft_scores if seen else None
            rows.append({
                "problem_id": problem_id, "task": task, "round": rnd.index, "position": k, "branch": w,
                "chosen_branch": w == rnd.branch, "committed": w == rnd.branch and k < rnd.committed_drafts,
                "prefix_len": rnd.prefix_len + sum(len(x.token_ids) for x in chain[:k]),
                "draft_step": seen.draft if seen else d.text, "target_step": seen.target if seen else t.text,
                "context": seen.context if seen else None, "teacher": teacher,
                "teacher_score": float(b_scores[w][k]), "label": bool(b_accepted[w][k]),
                "draft_len": len(d.token_ids), "target_len": len(t.token_ids),
                "draft_mean_logprob": dm, "draft_min_logprob": dmin, "target_mean_logprob": tm, "target_min_logprob": tmin,
                "draft_target_mean_logprob": ds.mean_logprob if ds else None,
                "draft_target_min_logprob": ds.min_logprob if ds else None,
                "draft_target_argmax_share": ds.argmax_share if ds else None,
                "draft_target_scored_tokens": ds.tokens if ds else None,
                "draft_entropy": mean_topk_entropy(getattr(d, "top_logprobs", None)),
                "draft_s": (rnd.draft_seconds[k] / max(1, sum(1 for c in branches if len(c) > k)))
                if k < len(rnd.draft_seconds) else None,
                "target_s": rnd.target_seconds / n_targets,
                "judge_s": rnd.verify_seconds / n_pairs,
            })
    return rows


def divergent_starts(rounds, prompt_len: int) -> list[int]:
    """Offsets (in the answer's ids) where an accepted draft step that differs from its target
    step begins: past the last of them the answer is the target's own greedy continuation."""
    out = []
    for r in rounds:
        chain = (r.branches or [r.drafts])[r.branch]
        targets = (r.branch_targets or [r.targets])[r.branch]
        at = r.prefix_len - prompt_len
        for d, t in zip(chain[:r.committed_drafts], targets):
            if list(d.token_ids) != list(t.token_ids):
                out.append(at)
            at += len(d.token_ids)
    return out


def _finite(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


# ---- the run ---------------------------------------------------------------------------
def teacher_name(opts: CollectOptions) -> str:
    """The teacher as recorded in every row (:func:`lrtune.dataset.teacher_spec`)."""
    from lrtune.dataset import teacher_spec

    return teacher_spec(dataclasses.asdict(opts))


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
    same = old == key or (old is not None and not changed_keys(old, key, collect_key(CollectConfig())))
    if not same and not cfg.options.force_new:  # same despite old != key: only options a newer lrtune added
        what = "another config" if old is not None else f"a config that is not readable ({path.name})"
        raise ConfigError(f"{out} holds a dataset collected with {what}; use another --out or "
                          "--force-new (the old files move to a backup folder)")
    return not same


def prepare_out(cfg: CollectConfig, backup: bool) -> Path:
    """Phase 2 (after :func:`check_collect_out`): claim ``--out``, move an old dataset of
    another config to a backup folder when ``backup``, record this config."""
    if backup:  # the old dataset, its owner record included, moves aside first
        move_to_backup(Path(cfg.options.out).expanduser())
    out = claim_out(cfg.options.out, "collect")
    key = collect_key(cfg)
    path = out / CONFIG
    if not path.is_file() or _recorded_key(path) != key:
        write_atomic(path, json.dumps(key, indent=1))
    return out


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
    if not opts.shard_id < opts.num_shards:
        raise ConfigError(f"--shard-id must be in 0..{opts.num_shards - 1} (--num-shards {opts.num_shards})")
    if opts.profile is not None:
        from lrtune.batchcost import read_profile_curve

        read_profile_curve(opts.profile)  # a bad file fails now, before any model loads
    if cfg.decode.async_lr:
        raise ConfigError("collect records the step pairs of sync LR rounds; async LR keeps no rounds: drop --async")
    dcfg = dataclasses.replace(cfg.decode, logprobs=True, score_drafts=True).validate()
    if not dcfg.uses_lr:
        raise ConfigError("collect records LR step pairs: use --method lr or lr+sd")
    if dcfg.early_abort:
        raise ConfigError("collect records the pair at every drafted position; --early-abort stops the target rows "
                          "after a rejection, so those pairs would be missing: drop --early-abort")
    from data_gen.rollout import parse_teacher

    spec = parse_teacher(opts.teacher)
    if opts.rollout_samples and spec.kind == "verifier":
        raise ConfigError(f"--rollout-samples needs a rollout teacher, got {opts.rollout_samples} with --teacher "
                          f"{opts.teacher}")
    task = get_task(opts.task)
    if getattr(task, "KIND", "math") == "code":
        from lrtune.sandbox import require_isolation

        require_isolation(opts.unsafe_exec)
    problems = task.load(limit=opts.limit, seed=opts.task_seed, path=opts.data)
    if not problems:
        raise ConfigError("no problems to collect")
    mine = [(i, p) for i, p in enumerate(problems) if i % opts.num_shards == opts.shard_id]
    backup = check_collect_out(cfg)  # cheap: before the models, which may be built on first use
    from lrtune.api import check_configs, require_a_prompt_that_fits

    models = _decode_models(cfg, spec)
    check_configs(models, dcfg, progress=opts.progress, load_all_methods=dcfg.uses_sd)
    require_a_prompt_that_fits(models, dcfg, [task.prompt(p) for _, p in mine], progress=opts.progress)
    return _Plan(dcfg, task, mine, backup)


def run(cfg: CollectConfig, *, card: bool = True) -> dict:
    """Collect this shard's problems (resuming), write the card; returns counts."""
    plan = validate_run(cfg)
    # phase 2: every input is valid; only now is --out claimed, cleaned and written
    opts, dcfg, task, mine = cfg.options, plan.dcfg, plan.task, plan.mine
    out = prepare_out(cfg, plan.backup)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = ShardStore(out, opts.shard_id)
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
    live = spec.live if spec.live is not None else cfg.models.verifier  # what decodes (rollout: --verifier)
    return dataclasses.replace(cfg.models, verifier=live,
                               verifier_threshold=cfg.options.teacher_threshold if spec.kind != "rollout"
                               else cfg.models.verifier_threshold)


def _collect(cfg: CollectConfig, dcfg: DecodeConfig, task, todo, store: ShardStore) -> None:
    """Decode ``todo`` (batched, ``--max-concurrent`` in flight) and store each problem's
    labelled pairs and problem row as it ends (:class:`_Collector`)."""
    from data_gen.rollout import parse_teacher

    spec = parse_teacher(cfg.options.teacher)
    models = _decode_models(cfg, spec)
    _Collector(cfg, dcfg, models, spec, models.verifier, task, todo, store).run()


class _Collector:
    """One collect run: the decoder and feature verifiers, and what happens as problems end
    (rows, rollout labels for outcome teachers, features, the store)."""

    def __init__(self, cfg: CollectConfig, dcfg: DecodeConfig, models, spec, live: str, task, todo,
                 store: ShardStore) -> None:
        from lrtune.api import Decoder
        from lrtune.verifiers.simple import ExactVerifier

        self.cfg, self.dcfg, self.opts, self.spec, self.live = cfg, dcfg, cfg.options, spec, live
        self.task, self.todo, self.store = task, todo, store
        self.teacher = teacher_name(self.opts)
        self.dec = Decoder.from_configs(models, dcfg, progress=self.opts.progress, load_all_methods=dcfg.uses_sd)
        self.dec.start_engines(dcfg)
        self.exact = ExactVerifier()
        self.embed = self.scorer = None
        if self.opts.embedding_feature:
            from lrtune.verifiers.embedding import EmbeddingVerifier

            self.embed = self.dec.verifier if self.dec.verifier.name == "embedding" else EmbeddingVerifier()
        if self.opts.target_score_feature:
            from lrtune.verifiers import make_verifier

            self.scorer = make_verifier("target_score", backend=self.dec.target)
        self.judges = {}
        if self.opts.judge_features:
            from lrtune.verifiers import make_verifier

            self.judges = {col: make_verifier(spec, backend=self.dec.target) for col, spec in JUDGE_FEATURES.items()}
        self.schemas = arrow_schema(PAIR_FIELDS), arrow_schema(PROBLEM_FIELDS)
        self.encoded = [self.dec.encode(task.prompt(prob)) for _, prob in todo]
        self.n_conc = self.opts.max_concurrent or _default_concurrency(self.dec, dcfg, self.opts, self.encoded)
        self.rounds: dict[int, list] = {k: [] for k in range(len(todo))}
        self.pending: list[tuple] = []  # finished problems whose pairs wait for their rollouts
        self.labels = [0, 0]
        self.bar = None

    def run(self) -> None:
        from lrtune.control import ProblemInfo

        self.bar = ProgressBar("collect", len(self.todo), self.opts.progress)
        try:
            self.dec.decoder.decode_many(
                self.encoded, self.dcfg, max_concurrent=self.n_conc, max_len=self.cfg.models.max_model_len,
                problems=[ProblemInfo(prob.id, self.task.prompt(prob), len(ids), self.opts.task)
                          for (_, prob), ids in zip(self.todo, self.encoded)],
                on_round=lambda k, r: self.rounds[k].append(r), on_done=self.finish)
            if self.pending:
                self.flush()
        finally:
            self.bar.close()

    def finish(self, k: int, result) -> None:
        """A problem ended: its pairs and its problem row go to the store at once (rollout
        teachers: once the pending problems' rollouts ran, in one call per ``n_conc``)."""
        if isinstance(result, Exception):
            log(f"skipping {self.todo[k][1].id}: {result}")
            self.bar.advance(1)
            return
        res, st = result
        rows, items = self.pair_rows(k, res)
        if self.spec.kind == "verifier":
            self.complete(k, res, st, rows)
            return
        self.pending.append((k, res, st, rows, items))
        if len(self.pending) >= self.n_conc:
            self.flush()

    def pair_rows(self, k: int, res) -> tuple[list[dict], list]:
        """The rows of every pair problem ``k`` compared and, for outcome teachers, what to
        roll out for each (``--rollout-pairs committed``: only the pairs on the answer's path;
        the answer itself is the committed branch's rollout where it is the target's greedy
        continuation)."""
        from data_gen.rollout import RolloutItem, trajectory_continuation

        (_, prob), ids, opts = self.todo[k], self.encoded[k], self.opts
        rows, items = [], []
        done_rounds = self.rounds.pop(k)
        divergent = divergent_starts(done_rounds, len(ids))
        for r in done_rounds:
            prefix = ids + res.token_ids[:max(0, r.prefix_len - len(ids))]
            prefix_text = self.dec.target.decode(prefix, skip_special_tokens=True)
            for row in pair_rows(prob.id, prob.meta.get("task", opts.task), self.teacher, r):
                chain = (r.branches or [r.drafts])[row["branch"]]
                targets = (r.branch_targets or [r.targets])[row["branch"]]
                pos = row["position"]
                pre = prefix + [t for d in chain[:pos] for t in d.token_ids]
                row.update(prefix_sha=hashlib.sha256(json.dumps(pre).encode()).hexdigest()[:16], prefix_text=prefix_text,
                           decode_verifier=self.live, verifier_score=row["teacher_score"], verifier_label=row["label"])
                on_path = row["chosen_branch"] and pos <= r.committed_drafts
                if self.spec.kind != "verifier" and opts.rollout_pairs == "committed" and not on_path:
                    continue
                item = RolloutItem(prob, len(ids), pre, list(chain[pos].token_ids), list(targets[pos].token_ids))
                if on_path and self.dcfg.temperature == 0:
                    branch = "draft" if pos < r.committed_drafts else "target"
                    start = len(pre) - len(ids) + len(getattr(item, branch))
                    room = min(opts.rollout_tokens, self.cfg.models.max_model_len - len(ids) - start - 1)
                    known = trajectory_continuation(res.token_ids, res.finish, start, room=room,
                                                    divergent_starts=divergent)
                    if known is not None:
                        item.known[branch] = known
                items.append(item)
                rows.append(row)
        return rows, items

    def flush(self) -> None:
        """Outcome labels of the pending problems' pairs, one engine call; then store them."""
        from data_gen.rollout import rollout_labels, sampled_outcomes, vote_on

        batch, self.pending = self.pending, []
        items = [it for *_, its in batch for it in its]
        outcomes, secs = rollout_labels(self.dec.target, self.task, items, max_tokens=self.opts.rollout_tokens,
                                        max_len=self.cfg.models.max_model_len,
                                        gamma2=self.dcfg.gamma2 if self.dcfg.uses_sd else 0)
        votes = [None] * len(items)
        if self.opts.rollout_samples:  # the vote teacher: sampled rollouts beside the greedy ones
            votes, vsecs = sampled_outcomes(self.dec.target, self.task, items, samples=self.opts.rollout_samples,
                                            temperature=self.opts.rollout_temperature, seed=self.dcfg.seed,
                                            max_tokens=self.opts.rollout_tokens, max_len=self.cfg.models.max_model_len)
            secs += vsecs
        at = 0
        for k, res, st, rows, _ in batch:
            for row, lab, vote, it in zip(rows, outcomes[at:at + len(rows)], votes[at:at + len(rows)],
                                          items[at:at + len(rows)]):
                row.update(lab)
                row["label"] = row["rollout_greedy_label"] = bool(row.pop("rollout_label"))
                row["teacher_score"] = float(row["label"])
                if vote is not None:
                    greedy = lab["rollout_draft_answer"], lab["rollout_target_answer"]
                    row["label"], row["teacher_score"], d, t = vote_on(self.task, it.problem, greedy, vote,
                                                                       identical=it.draft == it.target)
                    row["rollout_votes"] = json.dumps({"draft": d, "target": t})
                row["judge_s"] = secs / len(items) + (row["judge_s"] if self.spec.kind == "consensus" else 0.0)
            at += len(rows)
            disagreements = None
            if self.spec.kind == "consensus":  # keep the pairs both teachers agree on
                kept = [row for row in rows if row["label"] == row["verifier_label"]]
                disagreements = len(rows) - len(kept)
                rows = kept
            self.complete(k, res, st, rows, disagreements)

    def complete(self, k: int, res, st, rows: list[dict], disagreements: int | None = None) -> None:
        """Features of the labelled pairs, the problem row, and both to the store."""
        from lrtune.verifiers import StepPair

        (i, prob), ids, opts, dcfg = self.todo[k], self.encoded[k], self.opts, self.dcfg
        pairs = [StepPair(r["context"], r["draft_step"], r["target_step"]) for r in rows]
        for row, ok in zip(rows, self.exact.score(pairs)):
            row["exact_match"] = bool(ok)
        cos = self.embed.score(pairs) if self.embed is not None else [None] * len(rows)
        ts = self.scorer.score(pairs) if self.scorer is not None else [None] * len(rows)
        for row, c, t in zip(rows, cos, ts):
            row["embedding_cosine"] = c
            row["target_score"] = t
        for col, judge in self.judges.items():
            for row, v in zip(rows, judge.score(pairs)):
                row[col] = v
        answer, ok = self.task.check(prob, res.text)
        t_tok = st.target_s / st.target_step_tokens if st.target_step_tokens else None
        d_tok = st.draft_s / st.draft_step_tokens if st.draft_step_tokens else None
        c1 = d_tok / t_tok if d_tok and t_tok else None
        prow = {"problem_id": prob.id, "index": i, "task": prob.meta.get("task", opts.task), "method": dcfg.method,
                "gamma1": dcfg.gamma1, "gamma2": dcfg.gamma2 if dcfg.uses_sd else 0,
                "alpha1": st.alpha1, "alpha2": st.alpha2, "c1": c1, "c2": c1, "rounds": st.rounds,
                "steps": len(res.steps), "tokens": len(res.token_ids), "wall_s": st.wall_s,
                "answer": None if answer is None else str(answer), "expected": prob.answer, "correct": bool(ok),
                "pairs": len(rows), "baseline_answer": None, "baseline_correct": None, "baseline_wall_s": None,
                "baseline_tokens": None, "finished": res.finish == "eos", "teacher_disagreements": disagreements}
        if opts.with_baseline:
            bres, bst = self.dec.decoder.decode(ids, dataclasses.replace(dcfg, method="target"))
            banswer, bok = self.task.check(prob, bres.text)
            prow.update(baseline_answer=None if banswer is None else str(banswer), baseline_correct=bool(bok),
                        baseline_wall_s=bst.wall_s, baseline_tokens=len(bres.token_ids))
        self.store.add(prob.id, i, [{c: _finite(v) for c, v in r.items()} for r in rows], prow, *self.schemas)
        for r in rows:
            self.labels[r["label"]] += 1
        n = sum(self.labels)
        self.bar.advance(1, f"{n} rows, accepted {self.labels[1] / n:.0%}" if n else f"{n} rows")


JUDGE_FEATURES = {"llm_judge_context_score": "llm_judge(context)", "llm_judge_paper_score": "llm_judge(paper)"}


def _default_concurrency(dec, dcfg: DecodeConfig, opts: CollectOptions, prompts: list[list[int]]) -> int:
    """Problems in flight: the best for the b(n) curve (``--profile``, else measured now on
    the target with a few of the problems' prompts; ``lrtune.batchcost.choose_concurrency``)."""
    from lrtune.batchcost import choose_concurrency, measure_batch_cost, read_profile_curve

    rows = dcfg.width * dcfg.gamma1 + 1  # target rows per problem and round (at most)
    cap = max(1, min(16, len(prompts)))
    if opts.profile:
        curve, source = read_profile_curve(opts.profile), opts.profile
    else:
        sizes = sorted({rows * n for n in (1, 2, 4, 8, 16) if n <= cap})
        curve, source = measure_batch_cost(dec.target, prompts[:cap], sizes, tokens=16, repeats=1), "measured"
    n = min(cap, choose_concurrency(curve, rows, max_concurrent=cap))
    log(f"collect: {n} problem(s) in flight (b(n) {source}: " + ", ".join(f"b({k})={v:.2f}" for k, v in curve.items())
        + "; --max-concurrent overrides)")
    return n


# ---- Ray --------------------------------------------------------------------------------
RAY_ENV_PREFIXES = ("HF_", "TRANSFORMERS_", "LRTUNE", "VLLM_", "OMP_", "TOKENIZERS_", "CUDA_VISIBLE_DEVICES")
_SECRET = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL")


def ray_env(environ) -> dict[str, str]:
    """The variables a Ray shard needs (hub, cache, engine and thread settings), never
    secrets: a name with TOKEN, SECRET, PASSWORD, KEY or CREDENTIAL in it (e.g. ``HF_TOKEN``)
    stays here, also with ``--ray-address`` (a remote cluster)."""
    return {k: v for k, v in environ.items()
            if k.startswith(RAY_ENV_PREFIXES) and not any(w in k.upper() for w in _SECRET)}


def run_ray(cfg: CollectConfig) -> dict:
    """Every shard of ``cfg`` as one Ray task writing into the same ``--out`` (each shard has
    its own manifest, so tasks never touch each other's files); the card is written once at
    the end. A failed task is reported and the finished shards stay (re-run to resume)."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray: pip install 'lrtune[ray]'") from None
    opts = cfg.options
    plan = validate_run(dataclasses.replace(cfg, options=dataclasses.replace(opts, shard_id=0, ray=False)))
    prepare_out(cfg, plan.backup)  # config check and the config file, before any task starts
    env = ray_env(os.environ)
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=opts.ray_address, runtime_env={"env_vars": env}, include_dashboard=False,
                 log_to_driver=opts.progress, logging_level="ERROR")
    try:
        task = ray.remote(num_cpus=opts.ray_cpus_per_shard, num_gpus=opts.ray_gpus_per_shard, max_retries=0)(_ray_shard)
        shard_cfgs = [dataclasses.replace(cfg, options=dataclasses.replace(opts, shard_id=i, ray=False, progress=False))
                      for i in range(opts.num_shards)]
        refs = {task.remote(c): c.options.shard_id for c in shard_cfgs}
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
        raise LrtuneError(f"{len(failed)} of {opts.num_shards} shard(s) failed ({'; '.join(failed)}); "
                          "finished problems are kept: re-run the same command to resume")
    return counts


def _ray_shard(cfg: CollectConfig) -> dict:
    """One shard inside a Ray worker (no card: the driver writes it once)."""
    return run(cfg, card=False)


def print_stats(s: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    c = Console()
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


COMMAND = Command(("collect",), __doc__.splitlines()[0], (
    Section(CollectOptions),
    Section(ModelConfig, skip=("verifier_threshold",),
            help={"verifier": "the verifier that decodes under a rollout teacher (a verifier or consensus teacher "
                              "decodes with itself)"}),
    Section(DecodeConfig, skip=("logprobs",), defaults={k: getattr(CollectConfig().decode, k) for k in
                                                         ("method", "gamma1", "max_new_tokens", "max_step_tokens")})),
    extra=_merge_and_stats_flags)
add_arguments, make_parser = COMMAND.add_arguments, COMMAND.make_parser


def config_from_args(args) -> CollectConfig:
    options, models, decode = COMMAND.configs(args)
    return CollectConfig(options=options, models=models, decode=decode)


def main_from_args(args) -> int:
    if args.stats:
        src = Path(args.stats).expanduser()
        if not src.is_dir():
            raise ConfigError(f"not a directory: {src}")
        s = summarize_pairs(src)
        print_stats(s)
        return 0
    cfg = config_from_args(args)
    if args.merge:
        s = merge(args.merge, cfg.options.out, force_new=cfg.options.force_new)
        log(f"merged {s['problems']} problems, {s['rows']} rows into {cfg.options.out}")
        return 0
    counts = run_ray(cfg) if cfg.options.ray else run(cfg)
    log(f"{counts['problems']} problems, {counts['rows']} step pairs in {cfg.options.out}")
    print_stats(counts)
    return 0


if __name__ == "__main__":  # pragma: no cover
    COMMAND.main()
