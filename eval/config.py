"""``lrtune evaluate``'s configuration: what to evaluate and where (:class:`EvalOptions`),
with the models and decoding (:class:`EvalConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from annotated_types import Interval

from lrtune.modelconfig import ModelConfig
from lrtune.decoder import DecodeConfig
from lrtune.schema import STRICT, Checked, Problems, Seed, Size, Text

MODES = ("latency", "throughput")


@dataclass
class EvalOptions(Checked):
    """What to evaluate and where to write it (models/decoding: ModelConfig, DecodeConfig)."""

    __pydantic_config__ = STRICT

    task: Text = field(
        default="gsm_symbolic", metadata={"help": "gsm_symbolic | gsm8k | math500 | aime24 | humaneval | custom"}
    )
    data: Text | None = field(
        default=None, metadata={"help": "problem file (JSONL/JSON/parquet) or hub dataset for file tasks"}
    )
    limit: Problems = field(
        default=10, metadata={"help": "number of problems (a larger limit later resumes the same run)"}
    )
    task_seed: Seed = field(default=0, metadata={"help": "problem generator seed (gsm_symbolic)"})
    heldout_from: Text | None = field(
        default=None,
        metadata={
            "help": "comma list of collect dirs (a verifier's or controller's training data): evaluate only problems "
            "whose template none of them holds (gsm_symbolic: the generator template; other tasks: the problem "
            "itself)"
        },
    )
    problem_ids: Text | None = field(
        default=None,
        metadata={
            "help": "comma list of problem ids, or @FILE with one per line: evaluate exactly these, in this order "
            "(from the task's first 20 x --limit + 100 problems; e.g. the problems of an earlier run); --limit "
            "caps them"
        },
    )
    methods: Text = field(
        default="target,sd,lr,lr+sd",
        metadata={
            "help": "comma list of target | sd | lr | lr+sd, each optionally with a schedule /async, /abort (early "
            "abort), /reuse (draft-prefix reuse), /reuse+abort, /score (score rounds; score and score+sd name "
            "lr/score and lr+sd/score), and /w=N, /v=VERIFIER (e.g. lr+sd/async/v=llm_judge), and adaptive | "
            "oracle | best-fixed (depths from --controller; adaptive/c=POLICY_OR_DIR: from another controller; "
            "adaptive/score and adaptive/lr+score: the controller also picks score rounds, or either kind, per "
            "round, with /v=VERIFIER), and auto (target, sd or adaptive, chosen from --profile and the verifier's "
            "promise before any model loads)"
        },
    )
    sweep: Text | None = field(
        default=None, metadata={"help": "grid, e.g. 'gamma1=1,2,4 gamma2=0,2,4' (adds one method per point)"}
    )
    mode: Literal["latency", "throughput"] = field(
        default="latency",
        metadata={
            "help": "latency: methods interleaved per problem, one problem at a time; throughput: each method over the "
            "whole set with --max-concurrent problems in flight"
        },
    )
    max_concurrent: Annotated[int, Interval(ge=1, le=4096)] = field(
        default=8, metadata={"help": "throughput mode: problems in flight at once"}
    )
    warmup_tokens: Size = field(default=32, metadata={"help": "tokens per method in the untimed warm-up (0 = none)"})
    profile: Text | None = field(
        default=None,
        metadata={
            "help": "take the batch-cost curve b(n) from this `lrtune profile` JSON instead of measuring it after the "
            "warm-up"
        },
    )
    out: Text = field(default="results/eval", metadata={"help": "output directory"})
    overwrite: bool = field(default=False, metadata={"help": "start over in --out (old records are kept as a backup)"})
    record_pairs: bool = field(
        default=True,
        metadata={
            "help": "keep every step pair a sync LR row's verifier judged (its input, score and verdict) in the row's "
            "record, for re-scoring and decode-time acceptance"
        },
    )
    plots: bool = field(default=True, metadata={"help": "write PNG plots"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    unsafe_exec: bool = field(
        default=False,
        metadata={
            "help": "code tasks: run generated code without OS-level isolation when bubblewrap is missing (only the "
            "in-process Python guard; not isolation)"
        },
    )


@dataclass
class EvalConfig:
    """Everything ``run`` needs; build with :func:`config_from_args` or directly."""

    options: EvalOptions = field(default_factory=EvalOptions)
    models: ModelConfig = field(default_factory=ModelConfig)
    decode: DecodeConfig = field(default_factory=lambda: DecodeConfig(max_new_tokens=512, max_step_tokens=96))
