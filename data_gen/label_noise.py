"""How much of a rollout label is chaos? The rollout teacher on semantically null edits.

The rollout teacher (``data_gen/rollout.py``) labels a pair (prefix P, draft step ŝ, target
step s) *accept* when the target's greedy continuations from P·ŝ and from P·s reach the same
outcome. For a sample of collected pairs this script asks the same teacher, by the same code,
about pairs whose "draft" is the target's own step s under an edit that changes no meaning:

- ``space``: one space before the step's closing blank line (``s[:-2] + " \\n\\n"``);
- ``bold``: the step without its Markdown bold markers (``**``), where it has any.

A verifier that judges meaning must accept every such pair, so the share the teacher
rejects (the *flip rate*) is label noise no student can predict from the pair: its outcome
was decided by the 1.5B model's sensitivity to its own wording. Flip rates come per task
with 95% bootstrap intervals over problems. The script also re-rolls the unedited step
(same prefix, same engine) and counts how often it reproduces the collect's recorded answer
(``reproduced``): the teacher's determinism on this machine. With ``--samples K`` the same
edited pairs also go to the vote teacher (``lrtune labels vote``: the greedy rollout
and K sampled ones per branch, modal outcomes compared), whose flip rates are ``vote``.

Only position-0 pairs are probed (their prefix P is the prompt and the committed answer,
rebuilt from the recorded text and checked token by token against the collect's
``prefix_sha``; pairs whose rebuilt prefix differs are skipped and counted). Models and
engine settings come from the dataset's ``collect_config.json``.

    lrtune labels noise --data results/rollout_gsm --sample 80 --out results/label_noise.json
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from lrtune import gate
from lrtune.configs import Command, Section
from lrtune.errors import ConfigError
from lrtune.schema import STRICT, Checked, Count, NonNegative, Seed, Size, Text

EDITS = ("space", "bold")


@dataclass
class LabelNoiseConfig(Checked):
    """Settings of ``lrtune labels noise`` (models and engine: the collect's own)."""

    __pydantic_config__ = STRICT

    data: Text = field(default="", metadata={"help": "a rollout-labelled collect directory (one task)"})
    out: Text = field(default="", metadata={"help": "JSON file to write"})
    sample: Count = field(default=80, metadata={"help": "pairs probed (a seeded sample of the position-0 pairs)"})
    seed: Seed = field(default=0, metadata={"help": "seed of the sample and the bootstrap"})
    edits: Text = field(default=",".join(EDITS), metadata={"help": f"comma list of {', '.join(EDITS)}"})
    problems: Count = field(
        default=200,
        metadata={"help": "problems of the task loaded to find the pairs' problems (at least the collect's --limit)"},
    )
    samples: Size = field(
        default=0,
        metadata={
            "help": "also ask the vote teacher (lrtune labels vote): this many "
            "sampled rollouts per branch beside the greedy one (0: none)"
        },
    )
    temperature: NonNegative = field(default=0.7, metadata={"help": "temperature of the vote teacher's samples"})

    def validate(self) -> "LabelNoiseConfig":
        if not self.data or not self.out:
            raise ConfigError("lrtune labels noise needs --data DIR and --out FILE")
        for e in self.edit_list:
            if e not in EDITS:
                raise ConfigError(f"--edits: unknown edit {e!r}; choose from {', '.join(EDITS)}")
        if self.samples > 0 and self.temperature <= 0:
            raise ConfigError("--temperature must be > 0 when --samples asks the vote teacher")
        return self

    @property
    def edit_list(self) -> list[str]:
        return [e.strip() for e in self.edits.split(",") if e.strip()]


def edit_step(step: str, edit: str) -> str | None:
    """``step`` under a meaning-preserving ``edit``; None where the edit does not apply (no
    closing blank line, or no bold marker) or changes nothing."""
    if edit == "space":
        out = step[:-2] + " \n\n" if step.endswith("\n\n") and not step.endswith(" \n\n") else None
    elif edit == "bold":
        out = step.replace("**", "") if "**" in step else None
    else:
        raise ValueError(f"unknown edit {edit!r}: choose from {', '.join(EDITS)}")
    return out if out != step else None


def prefix_sha(ids) -> str:
    """What collect records as ``prefix_sha``."""
    return hashlib.sha256(json.dumps(list(ids)).encode()).hexdigest()[:16]


def rebuild_prefix(row: dict, prompt_ids: list[int], target, earlier_steps: tuple[str, ...] = ()) -> list[int] | None:
    """The ids of a pair's prefix -- the prompt, the committed answer (the recorded
    ``prefix_text``) and, past position 0, the draft's ``earlier_steps`` of the same round and
    branch, each encoded on its own -- or None unless they hash to the recorded ``prefix_sha``."""
    head = target.decode(prompt_ids, skip_special_tokens=True)
    text = row.get("prefix_text") or ""
    if not text.startswith(head):
        return None
    gen = text[len(head) :]
    enc = lambda s: list(target.tokenizer.encode(s, add_special_tokens=False)) if s else []  # noqa: E731
    ids = prompt_ids + enc(gen) + [t for s in earlier_steps for t in enc(s)]
    return ids if prefix_sha(ids) == row.get("prefix_sha") else None


def collect_settings(data: Path):
    """(ModelConfig, DecodeConfig, CollectOptions) a collect directory was made with, from its
    ``collect_config.json`` (keys this lrtune does not know are ignored)."""
    from lrtune.data_gen.collect import CollectOptions
    from lrtune.modelconfig import ModelConfig
    from lrtune.dataset import read_config
    from lrtune.decoder import DecodeConfig

    from lrtune.configs import from_flat

    path = data / "collect_config.json"
    conf = read_config(path)
    missing = [k for k in ("options", "models", "decode") if k not in conf]
    if missing:
        raise ConfigError(f"{path}: not a collect config (no {', '.join(missing)})")
    try:  # each value through the config's own schema, so a bad one names its option
        return (
            from_flat(ModelConfig, conf["models"]),
            from_flat(DecodeConfig, conf["decode"]),
            from_flat(CollectOptions, conf["options"]),
        )
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def flip_rates(rows: list[dict], seed: int) -> dict:
    """Per edit: probed pairs, the share the teacher rejects with a 95% bootstrap interval
    over problems; ``rows``: {edit, problem, accept}."""
    from lrtune.pairstats import bootstrap_interval

    out = {}
    for edit in dict.fromkeys(r["edit"] for r in rows):
        mine = [r for r in rows if r["edit"] == edit]

        def flip(idx: list[int], mine=mine) -> float | None:
            return sum(not mine[i]["accept"] for i in idx) / len(idx) if idx else None

        everyone = list(range(len(mine)))
        out[edit] = {
            "pairs": len(mine),
            "problems": len({r["problem"] for r in mine}),
            "flip_rate": flip(everyone),
            "flip_rate_ci95": list(bootstrap_interval(flip, [r["problem"] for r in mine], seed=seed)),
        }
    return out


@dataclass
class _NoiseJob:
    """What ``main`` reads before any model loads: the output file, the collect's settings,
    task and problems, and its labelled position-0 pairs in a seeded order."""

    out: Path
    data: Path
    models: object
    dcfg: object
    opts: object
    task: object
    problems: dict
    rows: list[dict]


def main(args: LabelNoiseConfig) -> int:
    """Probe the rollout teacher (phase 1 -- every input checked -- before any model loads)."""
    from lrtune.build import check_configs
    from lrtune.data_gen.rollout import rollout_labels
    from lrtune.decoding import Decoder
    from lrtune.runfiles import write_json_file

    job = _read_collect(args)
    check_configs(job.models, job.dcfg, progress=True, load_all_methods=job.dcfg.uses_sd)
    gate.passed("labels noise")
    from lrtune.outdir import claim_json_out

    claim_json_out(job.out)
    dec = Decoder.from_configs(job.models, job.dcfg, progress=True, load_all_methods=job.dcfg.uses_sd)
    dec.start_engines(job.dcfg)
    target = dec.target
    items, meta, skipped = _probe_items(args, job, target)
    print(
        f"probing {len({m['row'] for m in meta})} pairs ({len(items)} rollout items); {skipped} skipped "
        "(rebuilt prefix differs from the recorded one)",
        flush=True,
    )
    outcomes, secs = rollout_labels(
        target,
        job.task,
        items,
        max_tokens=job.opts.rollout.tokens,
        max_len=job.models.engine.max_model_len,
        gamma2=job.dcfg.sd_gamma2,
    )
    votes = [None] * len(items)
    if args.samples > 0:
        votes, vsecs = _vote_accepts(args, job, target, items, meta, outcomes)
        secs += vsecs
    probed = _probed_pairs(meta, outcomes, votes)
    res = _results(args, job, meta, probed, skipped, secs)
    write_json_file(job.out, res)
    _print_results(args, res, secs)
    return 0


def _read_collect(args: LabelNoiseConfig) -> _NoiseJob:
    """Phase 1: the settings and output file checked, the collect's settings (a rollout
    teacher's), its task's problems and its labelled position-0 pairs, shuffled by ``--seed``."""
    from lrtune.dataset import load_tables
    from lrtune.outdir import json_out_file
    from lrtune.tasks import get_task

    args.validate()
    out = json_out_file(args.out, inputs=(args.data,))
    data = Path(args.data)
    models, dcfg, opts = collect_settings(data)
    if opts.teacher.spec != "rollout":
        raise ConfigError(f"{data} is labelled by {opts.teacher.spec!r}: the noise probe asks the rollout teacher")
    task = get_task(opts.task)
    problems = {p.id: p for p in task.load(limit=args.problems, seed=opts.task_seed, path=opts.data)}
    pairs, _ = load_tables(data, pair_columns=("problem_id", "position", "target_step"))
    rows = [
        r
        for r in pairs.to_pylist()
        if r["position"] == 0
        and r.get("label") is not None
        and r.get("rollout_target_answer") is not None
        and r["problem_id"] in problems
    ]
    random.Random(args.seed).shuffle(rows)
    return _NoiseJob(out, data, models, dcfg, opts, task, problems, rows)


def _probe_items(args: LabelNoiseConfig, job: _NoiseJob, target) -> tuple[list, list[dict], int]:
    """The rollout items of up to ``--sample`` pairs whose prefix rebuilds: per pair its
    unedited step (``none``) and each edit that applies; their meta, and the pairs skipped."""
    from lrtune.data_gen.rollout import RolloutItem

    edits = args.edit_list
    items, meta, skipped = [], [], 0
    for r in job.rows:
        if len({m["row"] for m in meta}) >= args.sample:
            break
        prob = job.problems[r["problem_id"]]
        prompt = target.encode_prompt(job.task.prompt(prob))
        pre = rebuild_prefix(r, prompt, target)
        if pre is None:
            skipped += 1
            continue
        step = list(target.tokenizer.encode(r["target_step"], add_special_tokens=False))
        variants = [("none", step)] + [
            (e, list(target.tokenizer.encode(t, add_special_tokens=False)))
            for e in edits
            if (t := edit_step(r["target_step"], e)) is not None
        ]
        for edit, ids in variants:
            items.append(RolloutItem(prob, len(prompt), pre, ids, step))
            meta.append(
                {
                    "row": id(r),
                    "edit": edit,
                    "problem": r["problem_id"],
                    "recorded_target_answer": r["rollout_target_answer"],
                    "recorded_label": bool(r["label"]),
                }
            )
    return items, meta, skipped


def _vote_accepts(
    args: LabelNoiseConfig, job: _NoiseJob, target, items: list, meta: list[dict], outcomes: list[dict]
) -> tuple[list, float]:
    """The vote teacher's verdict on every item (its greedy outcomes and ``--samples`` sampled
    rollouts per branch) and the sampling call's seconds."""
    from lrtune.data_gen.rollout import sampled_outcomes, vote_on

    votes = [None] * len(items)
    got, vsecs = sampled_outcomes(
        target,
        job.task,
        items,
        samples=args.samples,
        temperature=args.temperature,
        seed=args.seed,
        max_tokens=job.opts.rollout.tokens,
        max_len=job.models.engine.max_model_len,
    )
    for i, (m, o, g) in enumerate(zip(meta, outcomes, got)):
        greedy = o["rollout_draft_answer"], o["rollout_target_answer"]
        votes[i] = vote_on(job.task, job.problems[m["problem"]], greedy, g, identical=m["edit"] == "none")[0]
    return votes, vsecs


def _probed_pairs(meta: list[dict], outcomes: list[dict], votes: list) -> list[dict]:
    """One record per edited pair (the teacher's and vote teacher's verdicts); an unedited
    one instead gets ``reproduced`` (its rollout reached the recorded answer) in its meta."""
    probed = []
    for m, o, vote in zip(meta, outcomes, votes):
        if m["edit"] == "none":  # identical steps: the teacher accepts by construction; is the answer the recorded one?
            m["reproduced"] = o["rollout_target_answer"] == m["recorded_target_answer"]
        else:
            probed.append(
                {
                    "edit": m["edit"],
                    "problem": m["problem"],
                    "accept": bool(o["rollout_label"]),
                    "answers": [o["rollout_draft_answer"], o["rollout_target_answer"]],
                    "recorded_label": m["recorded_label"],
                    "vote_accept": vote,
                }
            )
    return probed


def _results(args: LabelNoiseConfig, job: _NoiseJob, meta: list[dict], probed: list[dict], skipped: int, secs) -> dict:
    """The JSON the probe writes: reproduction and recorded accept rates, flip rates per edit
    (and the vote teacher's, with ``--samples``) and every probed pair."""
    base = [m for m in meta if m["edit"] == "none"]
    res = {
        "data": str(job.data),
        "task": job.opts.task,
        "teacher": "rollout",
        "rollout_tokens": job.opts.rollout.tokens,
        "gamma2": job.dcfg.sd_gamma2,
        "sample": args.sample,
        "seed": args.seed,
        "pairs_probed": len(base),
        "skipped_prefix_mismatch": skipped,
        "rollout_seconds": secs,
        "reproduced": sum(m["reproduced"] for m in base) / max(1, len(base)),
        "recorded_accept_rate": sum(m["recorded_label"] for m in base) / max(1, len(base)),
        "edits": flip_rates(probed, args.seed),
        "pairs": probed,
    }
    if args.samples > 0:
        res["vote"] = {
            "samples": args.samples,
            "temperature": args.temperature,
            "edits": flip_rates([{**r, "accept": r["vote_accept"]} for r in probed], args.seed),
        }
    return res


def _print_results(args: LabelNoiseConfig, res: dict, secs) -> None:
    """Print the probe's rates: reproduction, recorded accepts, then each edit's flip rates."""
    print(
        f"{res['task']}: {res['pairs_probed']} pairs; the unedited step reproduced the recorded answer on "
        f"{res['reproduced']:.2f}; recorded accept rate {res['recorded_accept_rate']:.2f}"
    )
    for e, f in res["edits"].items():
        print(
            f"  edit {e:6s}: {f['pairs']} pairs, teacher rejects {f['flip_rate']:.3f} "
            f"[{f['flip_rate_ci95'][0]:.3f}, {f['flip_rate_ci95'][1]:.3f}]"
        )
    for e, f in res.get("vote", {}).get("edits", {}).items():
        print(
            f"  edit {e:6s}: the vote teacher (greedy + {args.samples} samples) rejects {f['flip_rate']:.3f} "
            f"[{f['flip_rate_ci95'][0]:.3f}, {f['flip_rate_ci95'][1]:.3f}]"
        )
    print(f"wrote {args.out} ({secs:.0f} s of rollouts)")


COMMAND = Command(("labels", "noise"), __doc__.splitlines()[0], (Section(LabelNoiseConfig),))
add_arguments, make_parser, config_from_args = COMMAND.add_arguments, COMMAND.make_parser, COMMAND.config

if __name__ == "__main__":  # pragma: no cover
    COMMAND.main(lambda args: main(config_from_args(args)))
