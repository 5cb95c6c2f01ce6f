"""Which models, engine and verifier a decoder uses (:class:`ModelConfig`): one config every
command and the Python API share, split by concern into sub-configs that each consumer takes
on its own (:class:`EngineConfig` with its :class:`GpuMemoryConfig`, :class:`VerifierConfig`,
:class:`ControlConfig`). Every option keeps one flat name (``--kv-cache-gib``, ``kv_cache_gib:``
in YAML, ``ModelConfig(kv_cache_gib=2)`` in Python); each field's type states its range
(:mod:`lrtune.schema`), checked when it is built."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, Literal

from annotated_types import Interval
from pydantic import StringConstraints

from lrtune import schema
from lrtune.configshape import flat_fields, flat_name, nested
from lrtune.errors import ConfigError, ConfigTypeError
from lrtune.schema import STRICT, Checked, ContextLength, Fraction, Share, Text

if TYPE_CHECKING:
    from lrtune.verifiers import VerifierSpec

BACKENDS = ("vllm", "transformers")
FLAT = {"prefix": ""}  # a sub-config whose options keep their flat names (--kv-cache-gib, not --engine-...)


@dataclass
class GpuMemoryConfig(Checked):
    """How lrtune's vLLM engines share each GPU (GPU only): a cap for all of them together and,
    optionally, a fixed share per role (:func:`lrtune.memory.plan_gpu_memory`)."""

    __pydantic_config__ = STRICT

    utilization: Share = field(
        default=0.9,
        metadata={
            "flat": "gpu_memory_utilization",
            "help": "share of each GPU that lrtune's vLLM engines use together; target, draft and judge split it by "
            "weight size unless --*-gpu-share fixes theirs (GPU only)",
        },
    )
    target_share: Share | None = field(
        default=None,
        metadata={
            "flat": "target_gpu_share",
            "help": "GPU memory share of the target engine (with its SD drafter); default: its part of "
            "--gpu-memory-utilization by weight size",
        },
    )
    draft_share: Share | None = field(
        default=None,
        metadata={
            "flat": "draft_gpu_share",
            "help": "GPU memory share of the LR draft engine (default: by weight size)",
        },
    )
    judge_share: Share | None = field(
        default=None,
        metadata={
            "flat": "judge_gpu_share",
            "help": "GPU memory share of the --judge-model engine (default: by weight size)",
        },
    )

    def fixed(self) -> dict[str, float | None]:
        """Role -> its fixed share (None: planned by weight size)."""
        return {"target": self.target_share, "draft": self.draft_share, "judge": self.judge_share}

    def check_rules(self) -> None:
        """The fixed shares together hold at most the whole GPU (checked on every device: a CPU
        run ignores them, but a config that cannot run on a GPU is refused wherever it is given)."""
        given = {r: s for r, s in self.fixed().items() if s is not None}
        if sum(given.values()) > 1 + 1e-9:
            spelled = " + ".join(f"--{r}-gpu-share {s:g}" for r, s in given.items())
            raise ConfigError(f"{spelled} = {sum(given.values()):.2f}: the GPU shares must sum to at most 1")


@dataclass
class EngineConfig(Checked):
    """How each engine runs: context, KV cache, batching, parallelism, graphs, the shared SD
    engine, and the GPU memory plan's inputs."""

    __pydantic_config__ = STRICT

    kv_cache_gib: Annotated[float, Interval(gt=0, le=4096)] | None = field(
        default=None,
        metadata={
            "help": "KV cache per engine on CPU, GiB (VLLM_CPU_KVCACHE_SPACE overrides); default: 4 sequences of "
            "--max-model-len tokens of the engine's models, at most 1 GiB"
        },
    )
    max_model_len: ContextLength = field(default=4096, metadata={"help": "engine context length (prompt + generation)"})
    tensor_parallel_size: Annotated[int, Interval(ge=1, le=1024)] = field(
        default=1, metadata={"help": "vLLM tensor parallelism for the target (GPU)"}
    )
    gpu: GpuMemoryConfig = field(default_factory=GpuMemoryConfig, metadata=FLAT)
    enforce_eager: bool | None = field(
        default=None, metadata={"help": "vLLM eager mode (no CUDA graphs); default: on for CPU, off for GPU"}
    )
    max_num_batched_tokens: Annotated[int, Interval(ge=16, le=10_000_000)] | None = field(
        default=None,
        metadata={
            "help": "vLLM tokens per engine step (CPU default: --max-model-len, no prompt split; a value set turns "
            "vLLM's chunked prefill on, where vLLM-CPU crashes on seeded sampling of a split prompt)"
        },
    )
    max_num_seqs: Annotated[int, Interval(ge=1, le=100_000)] | None = field(
        default=None,
        metadata={"help": "vLLM sequences scheduled at once (CPU default 64: smaller sampler buffers, less RAM)"},
    )
    memory_budget_gib: Annotated[float, Interval(gt=0, le=1_000_000)] | None = field(
        default=None,
        metadata={
            "help": "refuse, before any model loads, a CPU run whose planned resident memory exceeds this many GiB "
            "(lrtune doctor prints the plan)"
        },
    )
    share_weights: bool = field(
        default=True,
        metadata={
            "help": "vLLM on CPU: an engine loading a model another engine of the process holds takes its weights "
            "(the draft's own engine and the SD engine's drafter: 1.4 GiB less on the default pair)"
        },
    )
    numerics: Literal["fast", "exact"] = field(
        default="fast",
        metadata={
            "help": "fast | exact: exact makes a token's logits independent of how many tokens share its engine "
            "call, so target, sd and LR's own steps agree token for token (vLLM on CPU; cost in docs/limits.md)"
        },
    )
    shared_engine: bool = field(
        default=True,
        metadata={
            "help": "serve gamma2=0 target calls on the SD engine with its drafter off, instead of a second copy of "
            "the target (saves the target's weights in RAM; vLLM, draft-model SD)"
        },
    )


@dataclass
class VerifierConfig(Checked):
    """Which verifier judges draft steps, with which model and threshold."""

    __pydantic_config__ = STRICT

    spec: Text = field(
        default="embedding",
        metadata={
            "flat": "verifier",
            "help": "exact | never | always | random(p) | embedding | llm_judge | target_score | target_logprob",
        },
    )
    judge_model: Text | None = field(
        default=None, metadata={"help": "model of llm_judge/target_score (default: the target itself)"}
    )
    threshold: Fraction | None = field(
        default=None, metadata={"flat": "verifier_threshold", "help": "accept when score >= this (embedding: 0.95)"}
    )

    def check_rules(self) -> None:
        """One threshold: a spec's ``@T`` and ``--verifier-threshold`` both given must agree."""
        if self.threshold is None or "@" not in self.spec:
            return
        from lrtune.verifiers import split_threshold

        _, at = split_threshold(self.spec)
        if at is not None and abs(at - self.threshold) > 1e-12:
            raise ConfigError(
                f"--verifier-threshold {self.threshold:g} and --verifier {self.spec} (threshold {at:g}) disagree: "
                "give the threshold once"
            )

    @cached_property
    def parsed(self) -> VerifierSpec:
        """``spec`` parsed, once per config (:meth:`lrtune.verifiers.VerifierSpec.parse`); every
        consumer reads this typed value. Parsed when first read, since a checkpoint directory it
        names may be written by an earlier stage of the same run."""
        from lrtune.verifiers import VerifierSpec

        return VerifierSpec.parse(self.spec)


@dataclass
class ControlConfig(Checked):
    """Who picks γ1/γ2 each round (sync LR)."""

    __pydantic_config__ = STRICT

    controller: Text | None = field(
        default=None,
        metadata={
            "help": "γ1/γ2 per round: fixed | heuristic | bandit | bandit-pooled | grid-ucb | a "
            "directory from lrtune train controller (sync LR)"
        },
    )


# a model's weights for its engines (lrtune.quantize.SCHEMES, "none" and "auto")
Quantization = Literal["none", "int8", "int8-weights", "auto"]


@dataclass(init=False)
class ModelConfig(Checked):
    """Which models to use (its own fields) and how they run, by concern: ``engine``,
    ``verification``, ``control``. Built from sub-configs or from flat options:
    ``ModelConfig(target=T, kv_cache_gib=2, verifier="exact")`` is
    ``ModelConfig(target=T, engine=EngineConfig(kv_cache_gib=2), verification=VerifierConfig("exact"))``;
    a flat option given beside its sub-config replaces that field of it (``dataclasses.replace``)."""

    __pydantic_config__ = STRICT

    target: Text = field(default="default", metadata={"help": "target model: 'default', a local HF dir, or a hub id"})
    draft: Text = field(default="default", metadata={"help": "draft model (same tokenizer as the target)"})
    backend: Literal["vllm", "transformers"] = field(
        default="vllm", metadata={"help": "inference engine: vllm | transformers"}
    )
    device: Annotated[str, StringConstraints(pattern=r"^(auto|cpu|cuda(:[0-9]{1,2})?)$")] = field(
        default="auto", metadata={"help": "transformers backend: auto | cpu | cuda[:i]"}
    )
    verification: VerifierConfig = field(default_factory=VerifierConfig, metadata=FLAT)
    sd_method: Literal["draft", "ngram"] = field(
        default="draft", metadata={"help": "token-level SD drafter: draft | ngram"}
    )
    draft_quantization: Quantization = field(
        default="none",
        metadata={
            "help": "the draft's weights for LR drafting and SD (vLLM): none (as saved) | int8 (a W8A8 copy built once "
            "into the model cache) | int8-weights (weight-only int8, CPUs) | auto (the fastest copy where it timed "
            "faster on this machine; timed once)"
        },
    )
    target_quantization: Quantization = field(
        default="none",
        metadata={
            "help": "the target's weights (vLLM): none (as saved) | int8 (a W8A8 copy built once into the model "
            "cache) | int8-weights (weight-only int8, CPUs) | auto (the fastest copy where it timed faster on "
            "this machine; timed once). A copy is a different model: lossless methods match it, not the target "
            "as saved"
        },
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = field(
        default="auto", metadata={"help": "model dtype (auto = as saved; float32 on CPUs without native bf16)"}
    )
    engine: EngineConfig = field(default_factory=EngineConfig, metadata=FLAT)
    control: ControlConfig = field(default_factory=ControlConfig, metadata=FLAT)
    cache_dir: Text | None = field(
        default=None, metadata={"help": "where the default pair is built (default ~/.cache/lrtune)"}
    )

    def __init__(self, **options: Any) -> None:
        for name, value in gathered(type(self), options).items():
            object.__setattr__(self, name, value)
        self.__post_init__()

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """Every option's flat name (what flags, YAML and the keyword arguments take)."""
        return tuple(n for n, _, _ in flat_fields(cls))

    def validate(self) -> ModelConfig:
        """The schema and the rules between options, again (both ran when this was built); returns self."""
        schema.check(self)
        self.check_rules()
        return self

    def check_rules(self) -> None:
        self.engine.gpu.check_rules()  # again: a sub-config changed after it was built
        if self.engine.numerics == "exact" and self.backend != "vllm":
            raise ConfigError(
                "--numerics exact needs --backend vllm (its batch-invariant attention and matmul checks are "
                "vLLM-CPU patches; the transformers backend has no exact mode)"
            )
        for role, mode in (("draft", self.draft_quantization), ("target", self.target_quantization)):
            if mode in ("int8", "int8-weights") and self.backend != "vllm":
                raise ConfigError(
                    f"--{role}-quantization {mode} needs --backend vllm (transformers would dequantize the "
                    "int8 weights and run no faster)"
                )


def gathered(
    cls: type, options: dict[str, Any], base: Any = None, prefix: str = "", *, top: bool = True
) -> dict[str, Any]:
    """The fields of ``cls`` from ``options`` (flat option names, or a sub-config's field name
    holding a whole instance), else from ``base`` (an instance being replaced), else the
    defaults; sub-configs are built from theirs. :class:`ConfigTypeError` naming an option
    ``cls`` does not have, or a sub-config given as something else."""
    if top:
        known = {n for n, _, _ in flat_fields(cls)} | set(_sub_names(cls))
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigTypeError(f"{cls.__name__}: unknown option(s) {', '.join(unknown)}")
    subs, out = nested(cls), {}
    for f in dataclasses.fields(cls):
        if f.name in subs:
            sub, sub_prefix = subs[f.name]
            given = options.get(f.name, getattr(base, f.name, None))
            if given is not None and not isinstance(given, sub):
                raise ConfigTypeError(f"{f.name}: expected {sub.__name__}, got {type(given).__name__}")
            out[f.name] = sub(**gathered(sub, options, given, prefix + sub_prefix, top=False))
        elif flat_name(f, prefix) in options:
            out[f.name] = options[flat_name(f, prefix)]
        elif base is not None:
            out[f.name] = getattr(base, f.name)
        elif f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        else:
            out[f.name] = f.default_factory()
    return out


def _sub_names(cls: type) -> list[str]:
    """The field names of every sub-config in ``cls``'s tree."""
    return [n for name, (sub, _) in nested(cls).items() for n in (name, *_sub_names(sub))]
