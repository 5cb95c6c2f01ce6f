"""The resident memory a run will hold on a CPU, planned before any model loads.

A vLLM-CPU engine holds its model's weights in oneDNN's packed layout (the packed copy replaces
the loaded one, but the output head keeps both), its runtime buffers, and a KV cache that
is partly resident from the start. Measured on the default pair (``benchmarks/memory``,
2-core AVX-512 CPU, vLLM-CPU 0.32, max_num_seqs 64), starting an engine grows the resident set
by 7.56 GiB (SD engine: target + drafter, W = 4.48 GiB of weights) and 3.04 GiB (draft engine,
W = 1.17 GiB) with a 1 GiB KV cache, 7.22 and 2.47 GiB with 0.25 GiB (a fit: 1.37 W + 0.95 +
0.5 K, within 0.2 GiB of all four); so each engine is planned at

    R(engine) = ENGINE_FACTOR · W + ENGINE_OVERHEAD_GIB + K        (GiB)

with W its weights (the SD engine: target + drafter) and K its whole KV cache (an upper bound:
after start-up about half of K is resident, a run that fills its cache holds all of it), plus
PROCESS_BASE_GIB once (Python, torch, vLLM, tokenizers). On the default pair the plan is
about 1 GiB above what the engines hold after start-up. The transformers backend holds each
model once: TORCH_FACTOR · W.
"""

from __future__ import annotations

from dataclasses import dataclass

from lrtune.errors import ConfigError

GiB = 2**30
ENGINE_FACTOR = 1.37  # resident GiB per GiB of weights, fitted to the two engines above
ENGINE_OVERHEAD_GIB = 0.95
PROCESS_BASE_GIB = 0.75  # measured: 0.74 GiB after imports and the decoder's tokenizers
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
) -> CpuMemoryPlan:
    """The plan of a vLLM run on the CPU: one target engine per key of ``target_engines`` (γ2 > 0:
    with an SD drafter of ``spec_bytes``), the draft's own engine where LR needs it, a judge's."""
    parts = {}
    for k in target_engines:
        name = f"target SD engine (γ2 {k})" if k else "target engine"
        parts[name] = round(engine_gib(target_bytes + (spec_bytes if k else 0), kv_cache_gib), 2)
    if draft_engine and draft_bytes:
        parts["draft engine"] = round(engine_gib(draft_bytes, kv_cache_gib), 2)
    if judge_bytes:
        parts["judge engine"] = round(engine_gib(judge_bytes, kv_cache_gib), 2)
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


__all__ = ["CpuMemoryPlan", "check_budget", "engine_gib", "plan_torch", "plan_vllm"]
