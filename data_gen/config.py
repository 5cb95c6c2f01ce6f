"""``lrtune collect``'s configuration: what to collect and where (:class:`CollectOptions`),
with the models and decoding (:class:`CollectConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Literal

from annotated_types import Interval

from lrtune.modelconfig import ModelConfig
from lrtune.decoder import DecodeConfig
from lrtune.schema import STRICT, Checked, Count, Fraction, Problems, Seed, Text


@dataclass
class TeacherOptions(Checked):
    """Who labels the pairs (flat options ``--teacher``, ``--teacher-threshold``)."""

    __pydantic_config__ = STRICT

    spec: Text = field(
        default="llm_judge",
        metadata={
            "flat": "teacher",
            "help": "teacher: a verifier spec (llm_judge, llm_judge(paper), embedding, ...), rollout (outcome of "
            "target continuations; decodes with --verifier), or consensus(rollout,VERIFIER)",
        },
    )
    threshold: Fraction | None = field(
        default=None, metadata={"help": "the teacher accepts when its score >= this (default: the verifier's own)"}
    )

    @cached_property
    def parsed(self):
        """``spec`` parsed once (:func:`lrtune.data_gen.rollout.parse_teacher`); every step reads it."""
        from lrtune.data_gen.rollout import parse_teacher

        return parse_teacher(self.spec)


@dataclass
class RolloutOptions(Checked):
    """How a rollout teacher labels (``--rollout-*``)."""

    __pydantic_config__ = STRICT

    tokens: Count = field(default=256, metadata={"help": "rollout teachers: tokens each continuation may generate"})
    samples: Annotated[int, Interval(ge=0, le=64)] = field(
        default=0,
        metadata={
            "help": "rollout teachers: sampled rollouts per branch beside the greedy one; > 0 labels by vote (accept "
            "when the two branches' modal outcomes are the same; the teacher is recorded as "
            "rollout_vote(greedy+K@T))"
        },
    )
    temperature: Annotated[float, Interval(gt=0, le=100)] = field(
        default=0.7, metadata={"help": "rollout teachers: temperature of the --rollout-samples rollouts"}
    )
    pairs: Literal["all", "committed"] = field(
        default="all",
        metadata={
            "help": "rollout teachers: which pairs to label: all, or committed (only the pairs on the answer's own "
            "path, whose committed branch reuses the answer as its rollout when that is the target's greedy "
            "continuation, e.g. with --verifier exact)"
        },
    )


@dataclass
class ShardOptions(Checked):
    """Which problems this process collects (``--num-shards``, ``--shard-id``)."""

    __pydantic_config__ = STRICT

    num_shards: Annotated[int, Interval(ge=1, le=100_000)] = field(
        default=1, metadata={"help": "split problems into this many shards (problem i -> shard i % N)"}
    )
    shard_id: Annotated[int, Interval(ge=0, le=100_000)] = field(
        default=0, metadata={"help": "the shard this process collects"}
    )


@dataclass
class FeatureColumns(Checked):
    """Feature columns recorded beside the teacher's label."""

    __pydantic_config__ = STRICT

    embedding_feature: bool = field(default=True, metadata={"help": "record the embedding cosine of each pair"})
    target_score_feature: bool = field(
        default=True, metadata={"help": "record the target's 0-9 score of each draft step"}
    )
    judge_features: bool = field(
        default=False,
        metadata={
            "help": "also score every pair with both llm_judge forms (context and paper; the target judges) as feature "
            "columns, so --stats compares them with the teacher (two judge calls per non-identical pair)"
        },
    )


@dataclass
class RayOptions(Checked):
    """Running the shards as Ray tasks (``--ray``, ``--ray-*``)."""

    __pydantic_config__ = STRICT

    enabled: bool = field(
        default=False,
        metadata={"flat": "ray", "help": "run all --num-shards shards as Ray tasks (pip install lrtune[ray])"},
    )
    address: Text | None = field(default=None, metadata={"help": "Ray cluster to join (default: start a local one)"})
    cpus_per_shard: Annotated[float, Interval(ge=0, le=4096)] = field(
        default=1.0, metadata={"help": "CPUs Ray reserves for each shard task"}
    )
    gpus_per_shard: Annotated[float, Interval(ge=0, le=1024)] = field(
        default=0.0, metadata={"help": "GPUs Ray reserves for each shard task (tensor parallel: the TP size)"}
    )


@dataclass
class CollectOptions(Checked):
    """What to collect and where; the teacher, rollouts, shards, features and Ray are typed
    sub-configs whose flags keep their flat names."""

    __pydantic_config__ = STRICT

    task: Text = field(
        default="gsm_symbolic+humaneval",
        metadata={
            "help": "task or a mix A+B (see lrtune evaluate --help); the default pair is a Coder pair, so its home "
            "task humaneval (sandboxed tests) is in the default mix"
        },
    )
    data: Text | None = field(default=None, metadata={"help": "problem file for file tasks"})
    limit: Problems = field(default=50, metadata={"help": "number of problems (all shards together)"})
    task_seed: Seed = field(default=0, metadata={"help": "problem generator seed (gsm_symbolic)"})
    teacher: TeacherOptions = field(default_factory=TeacherOptions, metadata={"prefix": "teacher_"})
    rollout: RolloutOptions = field(default_factory=RolloutOptions, metadata={"prefix": "rollout_"})
    out: Text = field(default="results/collect", metadata={"help": "output directory"})
    max_concurrent: Annotated[int, Interval(ge=1, le=4096)] | None = field(
        default=None,
        metadata={
            "help": "problems decoded together (batched LR rounds); default: the best for the b(n) curve of --profile, "
            "or of a short measurement at start"
        },
    )
    profile: Text | None = field(
        default=None, metadata={"help": "lrtune profile JSON whose b(n) curve picks the default --max-concurrent"}
    )
    with_baseline: bool = field(
        default=False, metadata={"help": "also decode target-only per problem (reference answer and time)"}
    )
    shards: ShardOptions = field(default_factory=ShardOptions, metadata={"prefix": ""})
    features: FeatureColumns = field(default_factory=FeatureColumns, metadata={"prefix": ""})
    force_new: bool = field(
        default=False,
        metadata={
            "help": "start a new dataset (or, with --merge, a new merge) in --out even if it holds another config or "
            "run (old files move to backup-*/)"
        },
    )
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    unsafe_exec: bool = field(
        default=False,
        metadata={
            "help": "code tasks: run generated code without OS-level isolation when bubblewrap is missing (only the "
            "in-process Python guard; not isolation)"
        },
    )
    ray: RayOptions = field(default_factory=RayOptions, metadata={"prefix": "ray_"})


@dataclass
class CollectConfig:
    options: CollectOptions = field(default_factory=CollectOptions)
    models: ModelConfig = field(default_factory=ModelConfig)
    decode: DecodeConfig = field(
        default_factory=lambda: DecodeConfig(method="lr", gamma1=3, max_new_tokens=512, max_step_tokens=96)
    )


def teacher_name(opts: CollectOptions) -> str:
    """The teacher as recorded in every row (:func:`lrtune.dataset.teacher_spec`)."""
    from lrtune.configs import flat_dict
    from lrtune.dataset import teacher_spec

    return teacher_spec(flat_dict(opts))


def collect_options(**flat) -> CollectOptions:
    """:class:`CollectOptions` from its flat option names, as the command line spells them
    (``teacher="rollout", rollout_tokens=64, num_shards=2``); ConfigError for a name it lacks."""
    from lrtune.configs import check_unknown_keys, from_flat

    check_unknown_keys(flat, CollectOptions)
    return from_flat(CollectOptions, flat)
