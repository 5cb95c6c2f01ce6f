"""Vote labels: the rollout teacher with K sampled rollouts per branch beside the greedy one.

The rollout teacher (``data_gen/rollout.py``) labels a pair (prefix P, draft step ŝ, target
step s) by one greedy continuation of P·ŝ and one of P·s: *accept* when both reach the same
outcome. One greedy path per branch is chaotic: ``lrtune labels noise`` finds the teacher
rejecting a share of one-space edits. The vote teacher asks the target
K + 1 times per branch -- the recorded greedy rollout and K sampled ones (``--temperature``,
seeds ``--seed + i``) -- and accepts when the two branches' *modal* outcomes are the same
(:func:`lrtune.data_gen.rollout.vote_label`; ties go to the greedy outcome; no answer never matches).
Its soft score, the share of (draft, target) rollout couples that end alike, is the pair's
``teacher_score``.

Every pair of a collect dataset (any position) whose prefix rebuilds token for token from
its recorded ``prefix_text`` (checked against ``prefix_sha``) is relabelled, problem by
problem in a seeded order, ``--chunk`` problems per engine call; votes are appended to
``OUT/votes.jsonl`` as each call ends, so a stopped run resumes where it stopped (and a
partial run is a random subset of whole problems). At the end OUT is written as a collect
dataset (``pairs.parquet`` with the vote labels, the source's ``problems.parquet`` and
config), which ``lrtune train verifier`` and ``benchmarks/student_crossfit.py`` read as they
read any collect; ``--summary`` gets the accept rates of both teachers and their agreement,
per task, with 95% bootstrap intervals over problems.

    lrtune labels vote --data results/rollout_labels --samples 4 --out results/rollout_vote
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from lrtune import gate
from lrtune.configs import Command, Section
from lrtune.errors import ConfigError
from lrtune.runfiles import append_jsonl
from lrtune.schema import STRICT, Checked, Count, Positive, Seed, Size, Text


@dataclass
class VoteLabelsConfig(Checked):
    """Settings of ``lrtune labels vote`` (models and engine: the collect's own)."""

    __pydantic_config__ = STRICT

    data: Text = field(default="", metadata={"help": "a rollout-labelled collect (or merged) directory"})
    out: Text = field(default="", metadata={"help": "output directory (votes.jsonl, then the relabelled dataset)"})
    samples: Count = field(default=4, metadata={"help": "sampled rollouts per branch (the greedy one is the +1)"})
    temperature: Positive = field(default=0.7, metadata={"help": "sampling temperature of the sampled rollouts"})
    seed: Seed = field(default=0, metadata={"help": "seed of the problem order, the samples and the bootstrap"})
    chunk: Count = field(default=4, metadata={"help": "problems per engine call"})
    max_problems: Size = field(default=0, metadata={"help": "stop after this many problems (0: all)"})
    tasks: Text = field(default="", metadata={"help": "comma list of the tasks whose pairs are voted (default: all)"})
    greedy_out: Text | None = field(
        default=None,
        metadata={"help": "also write the voted pairs with their greedy labels here (a like-for-like dataset)"},
    )
    problems: Count = field(
        default=200,
        metadata={"help": "problems of the task loaded to find the pairs' problems (at least the collect's --limit)"},
    )
    summary: Text | None = field(
        default=None, metadata={"help": "JSON file for the summary (default OUT/summary.json)"}
    )

    def validate(self) -> "VoteLabelsConfig":
        if not self.data or not self.out:
            raise ConfigError("lrtune labels vote needs --data DIR and --out DIR")
        if self.greedy_out and Path(self.greedy_out).resolve() == Path(self.out).resolve():
            raise ConfigError("--greedy-out must differ from --out")
        return self


def pair_key(row: dict) -> str:
    """A pair's identity within a dataset."""
    return f"{row['task']}/{row['problem_id']}#{row['round']}.{row['position']}.{row['branch']}"


def recorded_outcomes(row: dict) -> tuple[str | None, str | None]:
    """The greedy rollout's outcomes the collect recorded for (draft, target)."""
    return row.get("rollout_draft_answer"), row.get("rollout_target_answer")


def summarize(votes: list[dict], seed: int) -> dict:
    """Accept rates of the greedy and vote teachers and their agreement, overall and per task,
    with 95% bootstrap intervals over problems; the share of branches whose greedy outcome is
    their modal one (``greedy_is_mode``)."""
    from lrtune.pairstats import bootstrap_interval

    def block(rows: list[dict]) -> dict:
        groups = [r["problem"] for r in rows]

        def rate(key):
            return lambda idx: sum(bool(key(rows[i])) for i in idx) / len(idx) if idx else None

        out = {"pairs": len(rows), "problems": len(set(groups))}
        for name, key in (
            ("greedy_accept", lambda r: r["greedy_label"]),
            ("vote_accept", lambda r: r["vote_label"]),
            ("agreement", lambda r: r["greedy_label"] == r["vote_label"]),
        ):
            out[name] = rate(key)(list(range(len(rows))))
            out[name + "_ci95"] = list(bootstrap_interval(rate(key), groups, seed=seed))
        out["greedy_is_mode"] = sum(r["greedy_is_mode"][0] + r["greedy_is_mode"][1] for r in rows) / max(
            1, 2 * len(rows)
        )
        return out

    res = {"all": block(votes)}
    for task in sorted({r["task"] for r in votes}):
        res[task] = block([r for r in votes if r["task"] == task])
    return res


def write_dataset(src: Path, out: Path, votes: dict[str, dict], teacher: str | None, vote_cfg: dict) -> int:
    """``out`` as a collect dataset: the source's pairs that have votes, labelled by them
    (``teacher`` None: the same pairs with their recorded greedy labels)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lrtune.dataset import CONFIG, PAIR_FIELDS, load_tables, read_config, schema, write_card
    from lrtune.runfiles import write_atomic

    pairs, problems = load_tables(src)
    rows = []
    for r in pairs.to_pylist():
        v = votes.get(pair_key(r))
        if v is not None and teacher is None:
            rows.append(r)
        elif v is not None:
            rows.append({**r, "label": v["vote_label"], "teacher_score": v["vote_score"], "teacher": teacher})
    keep = {r["problem_id"] for r in rows}
    probs = problems.filter(pa.array([p in keep for p in problems.column("problem_id").to_pylist()]))
    out.mkdir(parents=True, exist_ok=True)
    names = [n for n, _ in PAIR_FIELDS]
    table = pa.Table.from_pylist([{n: r.get(n) for n in names} for r in rows], schema=schema(PAIR_FIELDS))
    for name, t in (("pairs.parquet", table), ("problems.parquet", probs)):
        sink = pa.BufferOutputStream()
        pq.write_table(t, sink)
        write_atomic(out / name, sink.getvalue().to_pybytes())
    conf = read_config(src / CONFIG)
    conf["vote_relabel"] = vote_cfg
    write_atomic(out / CONFIG, json.dumps(conf, indent=1))
    write_card(out)
    return len(rows)


def read_votes(log: Path, vote_cfg: dict) -> dict[str, dict]:
    """The votes already in ``log`` (``votes.jsonl``, appended as each call ends), by pair key. A
    torn last line (a kill mid-append) is dropped with a warning and its pair voted again; a log
    of other settings, or a line that is neither the settings nor a vote, is a ConfigError."""
    from lrtune.filekinds import VoteLogHead, VoteRecord
    from lrtune.runfiles import load_jsonl

    done: dict[str, dict] = {}
    for v in load_jsonl(log, keys=(), what="lrtune vote", kinds=(VoteRecord, VoteLogHead)):
        if "config" in v:
            if v["config"] != vote_cfg:
                changed = sorted(k for k in set(v["config"]) | set(vote_cfg) if v["config"].get(k) != vote_cfg.get(k))
                raise ConfigError(f"{log} holds votes of other settings ({', '.join(changed)}): pick another --out")
            continue
        done[v["key"]] = v
    return done


@dataclass
class _VoteJob:
    """What ``main`` reads before it claims OUT: the collect's settings, task and problems,
    and its labelled pairs by problem with the seeded order to vote the problems in."""

    data: Path
    out: Path
    models: object
    dcfg: object
    opts: object
    task: object
    problems: dict
    by_problem: dict[str, list[dict]]
    order: list[str]


def main(args: VoteLabelsConfig) -> int:
    """Relabel a rollout-labelled collect with the vote teacher (resumable; phase 1 first)."""
    from lrtune.build import check_configs

    _check_outputs(args)
    job = _read_collect(args)
    check_configs(job.models, job.dcfg, progress=True, load_all_methods=job.dcfg.uses_sd)  # the rollouts' engines
    gate.passed("labels vote")
    log, vote_cfg, done, todo = _open_vote_log(args, job)
    skipped = _vote(args, job, todo, done, log) if todo else 0
    _write_results(args, job, done, vote_cfg, skipped)
    return 0


def _check_outputs(args: VoteLabelsConfig) -> None:
    """Phase 1 for the outputs: the settings, OUT, ``--greedy-out`` and ``--summary`` can be written."""
    from lrtune import outdir
    from lrtune.outdir import json_out_file

    args.validate()
    outdir.check_out(args.out, "labels vote")
    if args.greedy_out:
        outdir.check_out(args.greedy_out, "labels vote", "--greedy-out")
    if args.summary:
        json_out_file(args.summary, "--summary", inputs=(args.data,))


def _read_collect(args: VoteLabelsConfig) -> _VoteJob:
    """Phase 1 for the input: the collect's settings (a rollout teacher's), its task's problems
    and the labelled pairs of the asked tasks, grouped by problem in a seeded order."""
    from lrtune.data_gen.label_noise import collect_settings
    from lrtune.dataset import load_tables
    from lrtune.tasks import get_task

    data, out = Path(args.data), Path(args.out)
    models, dcfg, opts = collect_settings(data)
    if opts.teacher.spec != "rollout":
        raise ConfigError(
            f"{data} is labelled by {opts.teacher.spec!r}: the vote teacher extends a rollout-labelled collect"
        )
    task = get_task(opts.task)
    problems = {p.id: p for p in task.load(limit=args.problems, seed=opts.task_seed, path=opts.data)}
    pairs, _ = load_tables(
        data, pair_columns=("problem_id", "task", "round", "branch", "position", "draft_step", "target_step")
    )
    tasks = {t.strip() for t in args.tasks.split(",") if t.strip()}
    rows = [
        r
        for r in pairs.to_pylist()
        if r.get("label") is not None and r["problem_id"] in problems and (not tasks or r["task"] in tasks)
    ]
    if not rows:
        raise ConfigError(f"no labelled pairs of {', '.join(sorted(tasks)) or 'any task'} in {data}")
    by_problem: dict[str, list[dict]] = {}
    for r in rows:
        by_problem.setdefault(r["problem_id"], []).append(r)
    order = sorted(by_problem)
    random.Random(args.seed).shuffle(order)
    if args.max_problems:
        order = order[: args.max_problems]
    return _VoteJob(data, out, models, dcfg, opts, task, problems, by_problem, order)


def _open_vote_log(args: VoteLabelsConfig, job: _VoteJob) -> tuple[Path, dict, dict[str, dict], list[str]]:
    """Claim OUT and open ``votes.jsonl`` (its settings line first); returns the log, the vote
    settings, the votes it already holds by pair key and the problems still to vote."""
    from lrtune import outdir

    outdir.claim_out(job.out, "labels vote")
    log = job.out / "votes.jsonl"
    vote_cfg = {
        "source": str(job.data),
        "samples": args.samples,
        "temperature": args.temperature,
        "seed": args.seed,
        "rollout_tokens": job.opts.rollout.tokens,
    }
    done = read_votes(log, vote_cfg)
    if not log.is_file():
        append_jsonl(log, {"config": vote_cfg})
    todo = [p for p in job.order if any(pair_key(r) not in done for r in job.by_problem[p])]
    print(
        f"{len(job.order)} problems, {len(job.order) - len(todo)} already voted; {args.samples} sampled rollouts per "
        f"branch at temperature {args.temperature}",
        flush=True,
    )
    return log, vote_cfg, done, todo


def _vote(args: VoteLabelsConfig, job: _VoteJob, todo: list[str], done: dict[str, dict], log: Path) -> int:
    """Vote the ``todo`` problems' pairs, ``--chunk`` problems per engine call, each call's votes
    added to ``done`` and appended to ``log``; returns the pairs skipped (prefix mismatch)."""
    from lrtune.data_gen.rollout import sampled_outcomes
    from lrtune.decoding import Decoder

    dec = Decoder.from_configs(job.models, job.dcfg, progress=True, load_all_methods=job.dcfg.uses_sd)
    dec.start_engines(job.dcfg)
    target = dec.target
    from tqdm import tqdm

    bar = tqdm(total=len(todo), desc="vote rollouts", unit="problem")
    skipped = 0
    for c in range(0, len(todo), args.chunk):
        items, meta, missed = _chunk_items(job, todo[c : c + args.chunk], target)
        skipped += missed
        t0 = time.perf_counter()
        got, _ = sampled_outcomes(
            target,
            job.task,
            items,
            samples=args.samples,
            temperature=args.temperature,
            seed=args.seed,
            max_tokens=job.opts.rollout.tokens,
            max_len=job.models.engine.max_model_len,
        )
        secs = time.perf_counter() - t0
        lines = _vote_records(job, meta, got, secs / max(1, len(items)))
        for v in lines:
            done[v["key"]] = v
        append_jsonl(log, *lines)  # appended whole, after the call: a stop loses at most this chunk
        bar.update(len(todo[c : c + args.chunk]))
    bar.close()
    return skipped


def _chunk_items(job: _VoteJob, pids: list[str], target) -> tuple[list, list[dict], int]:
    """The rollout items of the pairs of problems ``pids`` whose prefix rebuilds, the pairs
    they come from, and how many pairs did not rebuild (skipped)."""
    from lrtune.data_gen.label_noise import rebuild_prefix
    from lrtune.data_gen.rollout import RolloutItem

    enc = lambda s: list(target.tokenizer.encode(s, add_special_tokens=False))  # noqa: E731
    items, meta, skipped = [], [], 0
    for pid in pids:
        prob = job.problems[pid]
        prompt = target.encode_prompt(job.task.prompt(prob))
        steps = {(r["round"], r["branch"], r["position"]): r["draft_step"] for r in job.by_problem[pid]}
        for r in job.by_problem[pid]:
            earlier = [steps.get((r["round"], r["branch"], q)) for q in range(r["position"])]
            pre = None if None in earlier else rebuild_prefix(r, prompt, target, tuple(earlier))
            if pre is None:
                skipped += 1
                continue
            items.append(RolloutItem(prob, len(prompt), pre, enc(r["draft_step"]), enc(r["target_step"])))
            meta.append(r)
    return items, meta, skipped


def _vote_records(job: _VoteJob, meta: list[dict], got: list[dict], seconds: float) -> list[dict]:
    """One ``votes.jsonl`` record per pair: its greedy label, the vote teacher's label, score
    and votes, whether each greedy outcome is its branch's mode, and its share of the call's seconds."""
    from lrtune.data_gen.rollout import modal_outcome, outcome_equality, vote_on

    lines = []
    for r, g in zip(meta, got):
        prob = job.problems[r["problem_id"]]
        gd, gt = recorded_outcomes(r)
        label, score, d_votes, t_votes = vote_on(
            job.task, prob, (gd, gt), g, identical=r["draft_step"] == r["target_step"]
        )
        eq = outcome_equality(job.task, prob)
        lines.append(
            {
                "key": pair_key(r),
                "task": r["task"],
                "problem": f"{r['task']}/{r['problem_id']}",
                "position": r["position"],
                "greedy_label": bool(r["label"]),
                "vote_label": label,
                "vote_score": score,
                "draft_votes": d_votes,
                "target_votes": t_votes,
                "greedy_is_mode": [
                    gd is not None and modal_outcome(d_votes, eq) == gd,
                    gt is not None and modal_outcome(t_votes, eq) == gt,
                ],
                "seconds": seconds,
            }
        )
    return lines


def _write_results(args: VoteLabelsConfig, job: _VoteJob, done: dict[str, dict], vote_cfg: dict, skipped: int) -> None:
    """Write OUT (and ``--greedy-out``) as collect datasets and the summary JSON, and print the summary."""
    from lrtune import outdir
    from lrtune.dataset import vote_teacher
    from lrtune.runfiles import write_json_file

    teacher = vote_teacher(args.samples, args.temperature)
    n = write_dataset(job.data, job.out, done, teacher, vote_cfg)
    if args.greedy_out:
        write_dataset(job.data, outdir.claim_out(args.greedy_out, "labels vote", "--greedy-out"), done, None, vote_cfg)
    votes = list(done.values())
    res = {
        "data": str(job.data),
        "out": str(job.out),
        "teacher": teacher,
        **vote_cfg,
        "problems": len(job.order),
        "pairs_voted": len(votes),
        "pairs_written": n,
        "skipped_prefix_mismatch_this_run": skipped,
        "seconds_per_pair_mean": sum(v["seconds"] for v in votes) / max(1, len(votes)),
        "summary": summarize(votes, args.seed),
    }
    dest = Path(args.summary) if args.summary else job.out / "summary.json"
    write_json_file(dest, res)
    for name, s in res["summary"].items():
        print(
            f"{name}: {s['pairs']} pairs of {s['problems']} problems; greedy accepts {s['greedy_accept']:.3f}, "
            f"vote accepts {s['vote_accept']:.3f}; they agree on {s['agreement']:.3f} "
            f"[{s['agreement_ci95'][0]:.3f}, {s['agreement_ci95'][1]:.3f}]; greedy outcome is the mode on "
            f"{s['greedy_is_mode']:.3f} of branches"
        )
    print(f"wrote {job.out} ({n} pairs) and {dest}")


COMMAND = Command(("labels", "vote"), __doc__.splitlines()[0], (Section(VoteLabelsConfig),))
add_arguments, make_parser, config_from_args = COMMAND.add_arguments, COMMAND.make_parser, COMMAND.config

if __name__ == "__main__":  # pragma: no cover
    COMMAND.main(lambda args: main(config_from_args(args)))
