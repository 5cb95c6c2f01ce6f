"""Which models, engine and verifier a decoder uses (:class:`ModelConfig`): one config every
command and the Python API share; each field's type states its range (:mod:`lrtune.schema`),
checked when it is built."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Literal

from annotated_types import Interval
from pydantic import StringConstraints

from lrtune import schema
from lrtune.errors import ConfigError
from lrtune.schema import STRICT, Checked, Fraction, Share, Text

if TYPE_CHECKING:
    from lrtune.verifiers import VerifierSpec

BACKENDS = ("vllm", "transformers")


@dataclass
class ModelConfig(Checked):
    """Which models, engine and verifier to use (each field's type states its range)."""

    __pydantic_config__ = STRICT

    target: Text = field(default="default", metadata={"help": "target model: 'default', a local HF dir, or a hub id"})
    draft: Text = field(default="default", metadata={"help": "draft model (same tokenizer as the target)"})
    backend: Literal["vllm", "transformers"] = field(default="vllm", metadata={"help": "inference engine: vllm | transformers"})
    device: Annotated[str, StringConstraints(pattern=r"^(auto|cpu|cuda(:[0-9]{1,2})?)$")] = field(default="auto", metadata={"help": "transformers backend: auto | cpu | cuda[:i]"})
    verifier: Text = field(default="embedding", metadata={"help": "exact | never | always | random(p) | embedding | llm_judge | target_score | target_logprob"})
    judge_model: Text | None = field(default=None, metadata={"help": "model of llm_judge/target_score (default: the target itself)"})
    verifier_threshold: Fraction | None = field(default=None, metadata={"help": "accept when score >= this (embedding: 0.95)"})
    sd_method: Literal["draft", "ngram"] = field(default="draft", metadata={"help": "token-level SD drafter: draft | ngram"})
    draft_quantization: Literal["none", "int8", "auto"] = field(default="none", metadata={"help": "the draft's weights for LR drafting and SD (vLLM): none (as saved) | int8 (a W8A8 copy built once into the model cache) | auto (int8 only where it timed faster on this machine; timed once)"})
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = field(default="auto", metadata={"help": "model dtype (auto = as saved; float32 on CPUs without native bf16)"})
    kv_cache_gib: Annotated[float, Interval(gt=0, le=4096)] = field(default=1.0, metadata={"help": "KV cache per engine on CPU, GiB (VLLM_CPU_KVCACHE_SPACE overrides)"})
    max_model_len: Annotated[int, Interval(ge=16, le=10_000_000)] = field(default=4096, metadata={"help": "engine context length (prompt + generation)"})
    tensor_parallel_size: Annotated[int, Interval(ge=1, le=1024)] = field(default=1, metadata={"help": "vLLM tensor parallelism for the target (GPU)"})
    gpu_memory_utilization: Share = field(default=0.9, metadata={"help": "share of each GPU that lrtune's vLLM engines use together; target, draft and judge split it by weight size unless --*-gpu-share fixes theirs (GPU only)"})
    target_gpu_share: Share | None = field(default=None, metadata={"help": "GPU memory share of the target engine (with its SD drafter); default: its part of --gpu-memory-utilization by weight size"})
    draft_gpu_share: Share | None = field(default=None, metadata={"help": "GPU memory share of the LR draft engine (default: by weight size)"})
    judge_gpu_share: Share | None = field(default=None, metadata={"help": "GPU memory share of the --judge-model engine (default: by weight size)"})
    enforce_eager: bool | None = field(default=None, metadata={"help": "vLLM eager mode (no CUDA graphs); default: on for CPU, off for GPU"})
    max_num_batched_tokens: Annotated[int, Interval(ge=16, le=10_000_000)] | None = field(default=None, metadata={"help": "vLLM tokens per engine step (CPU default 16384; lower saves RAM, but seeded sampling crashes on chunked prefills)"})
    controller: Text | None = field(default=None, metadata={"help": "γ1/γ2 per round: fixed | heuristic | bandit | bandit-pooled | grid-ucb | a "
                                                                    "directory from lrtune train controller (sync LR)"})
    shared_engine: bool = field(default=True, metadata={"help": "serve gamma2=0 target calls on the SD engine with its drafter off, instead of a second copy of the target (saves the target's weights in RAM; vLLM, draft-model SD)"})
    cache_dir: Text | None = field(default=None, metadata={"help": "where the default pair is built (default ~/.cache/lrtune)"})

    @cached_property
    def verifier_spec(self) -> VerifierSpec:
        """``verifier`` parsed, once per config (:meth:`lrtune.verifiers.VerifierSpec.parse`);
        every consumer reads this typed value. Parsed when first read, since a checkpoint
        directory it names may be written by an earlier stage of the same run."""
        from lrtune.verifiers import VerifierSpec

        return VerifierSpec.parse(self.verifier)

    def validate(self) -> ModelConfig:
        """The schema and the rules between options, again (both ran when this was built); returns self."""
        schema.check(self)
        self.check_rules()
        return self

    def check_rules(self) -> None:
        if self.draft_quantization == "int8" and self.backend != "vllm":
            raise ConfigError("--draft-quantization int8 needs --backend vllm (transformers would dequantize the "
                              "int8 weights and run no faster)")
