"""Every vLLM internal :mod:`lrtune.backends.vllm_patches` relies on, checked: an upgrade that
changes one fails loudly (a test asserts the list is empty) instead of miscounting."""

from __future__ import annotations

import inspect
from dataclasses import fields

from lrtune.backends.vllm_patches import embedding_method, int8_kernel, runtime_problems


def internals_problems(llm=None) -> list[str]:
    """Every vLLM internal the patches above rely on that is missing or changed shape
    (empty on the supported version), and, given a started ``llm``, every way its engine
    does not run the patched path (:func:`runtime_problems` on its workers' probes)."""
    problems = _spec_internals() + _stats_internals() + _weight_internals() + _exact_internals(_params)
    if llm is not None:
        from vllm.platforms import current_platform

        speculative = llm.llm_engine.vllm_config.speculative_config is not None
        problems += runtime_problems(
            list(llm.collective_rpc("lrtune_probe")),
            async_scheduling=bool(llm.llm_engine.vllm_config.scheduler_config.async_scheduling),
            speculative=speculative,
            on_cpu=current_platform.is_cpu(),
        )
    return problems


def _params(fn) -> list[str]:
    return list(inspect.signature(getattr(fn, "__wrapped__", fn)).parameters)


def _missing(checks: list[tuple[bool, str]]) -> list[str]:
    """The names of the checks that failed."""
    return [what for ok, what in checks if not ok]


def _spec_internals() -> list[str]:
    """Token-level SD: the runner's draft hand-over, the rejection sampler, prompt logprobs."""
    from vllm.v1.outputs import DraftTokenIds, LogprobsTensors
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    import vllm.v1.sample.rejection_sampler as rs

    take = getattr(GPUModelRunner, "take_draft_token_ids", None)
    checks = [
        (callable(getattr(GPUModelRunner, "propose_draft_token_ids", None)), "GPUModelRunner.propose_draft_token_ids"),
        (callable(take) and _params(take) == ["self"], "GPUModelRunner.take_draft_token_ids(self)"),
        (
            {f.name for f in fields(DraftTokenIds)} >= {"req_ids", "draft_token_ids"},
            "DraftTokenIds.req_ids / draft_token_ids",
        ),
        (
            "requests" in inspect.getsource(GPUModelRunner.__init__)
            and "input_batch" in inspect.getsource(GPUModelRunner.__init__),
            "GPUModelRunner.requests / input_batch",
        ),
        (
            "request.num_computed_tokens" in inspect.getsource(GPUModelRunner._get_prompt_logprobs_dict),
            "GPUModelRunner._get_prompt_logprobs_dict fills from num_computed_tokens",
        ),
        (
            callable(getattr(GPUModelRunner, "_get_draft_token_ids_cpu", None))
            and "isinstance(self._draft_token_ids, list)" in inspect.getsource(GPUModelRunner._get_draft_token_ids_cpu),
            "GPUModelRunner passes list drafts on as they are",
        ),
    ]
    fn = getattr(rs.expand_batch_to_tokens, "__wrapped__", rs.expand_batch_to_tokens)
    if not getattr(fn, "_lrtune_fixed", False):
        checks.append(
            (
                _params(fn) == ["x", "cu_num_tokens", "num_tokens", "replace_from", "replace_to"],
                "rejection_sampler.expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from, replace_to)",
            )
        )
    empty = getattr(LogprobsTensors.empty_cpu, "__wrapped__", LogprobsTensors.empty_cpu)
    if not getattr(empty, "_lrtune_fixed", False):
        checks.append(
            (
                _params(empty) == ["num_positions", "num_tokens_per_position"],
                "LogprobsTensors.empty_cpu(num_positions, num_tokens_per_position)",
            )
        )
    return _missing(checks)


def _stats_internals() -> list[str]:
    """The stat loggers the SD counters are read from."""
    from vllm.v1.engine.llm_engine import LLMEngine
    from vllm.v1.metrics.loggers import StatLoggerBase, StatLoggerManager
    from vllm.v1.metrics.stats import SchedulerStats
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    return _missing(
        [
            (
                getattr(StatLoggerBase, "__abstractmethods__", set())
                <= {"__init__", "record", "log_engine_initialized"},
                "StatLoggerBase abstract methods",
            ),
            (
                callable(getattr(StatLoggerManager, "record_admission_rejection", None)),
                "StatLoggerManager.record_admission_rejection",
            ),
            ("self.logger_manager" in inspect.getsource(LLMEngine.__init__), "LLMEngine.logger_manager"),
            ("stat_loggers" in inspect.getsource(StatLoggerManager.__init__), "StatLoggerManager.stat_loggers"),
            ("spec_decoding_stats" in {f.name for f in fields(SchedulerStats)}, "SchedulerStats.spec_decoding_stats"),
            (
                {f.name for f in fields(SpecDecodingStats)}
                >= {"num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos"},
                "SpecDecodingStats fields",
            ),
        ]
    )


def _weight_internals() -> list[str]:
    """The packed head and embedding, and the int8 kernel's oneDNN path."""
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    embed = embedding_method().process_weights_after_loading
    kernel = int8_kernel()
    after = getattr(kernel.process_weights_after_loading, "__wrapped__", kernel.process_weights_after_loading)
    return _missing(
        [
            (
                "quant_method.apply" in inspect.getsource(LogitsProcessor._apply_head),
                "LogitsProcessor._apply_head projects through quant_method.apply (the packed head)",
            ),
            (
                "remove_weight=False" in inspect.getsource(getattr(embed, "__wrapped__", embed)),
                "UnquantizedEmbeddingMethod keeps the loaded weight beside the packed one",
            ),
            (
                all(callable(getattr(kernel, m, None)) for m in ("_apply_weights_onednn", "process_weights_for_onednn"))
                and "linear_method" in inspect.getsource(after),
                "CPUInt8ScaledMMLinearKernel picks linear_method in process_weights_after_loading (oneDNN path)",
            ),
        ]
    )


def _exact_internals(params) -> list[str]:
    """What ``--numerics exact`` (:mod:`lrtune.backends.vllm_exact`) relies on: the CPU
    attention builder's ``build`` and the metadata fields it rewrites, the scheduler-metadata
    call's keywords, the runner's per-group builders, and a ``cpu_linear`` per CPU linear layer."""
    from dataclasses import fields as dc_fields

    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadata, CPUAttentionMetadataBuilder
    from vllm.v1.worker.utils import AttentionGroup

    problems = []
    build = getattr(CPUAttentionMetadataBuilder.build, "__wrapped__", CPUAttentionMetadataBuilder.build)
    if not getattr(build, "_lrtune_exact", False) and params(build) != [
        "self",
        "common_prefix_len",
        "common_attn_metadata",
        "fast_build",
    ]:
        problems.append("CPUAttentionMetadataBuilder.build(self, common_prefix_len, common_attn_metadata, fast_build)")
    wanted = {"query_start_loc", "seq_lens", "block_table", "scheduler_metadata", "max_query_len", "causal"}
    if not wanted <= {f.name for f in dc_fields(CPUAttentionMetadata)}:
        problems.append(f"CPUAttentionMetadata fields {sorted(wanted)}")
    if not {"num_reqs", "seq_lens", "query_start_loc", "enable_kv_split"} <= set(
        params(ops.cpu_attn_get_scheduler_metadata)
    ):
        problems.append("cpu_attn_get_scheduler_metadata(num_reqs, ..., seq_lens, query_start_loc, enable_kv_split)")
    if "metadata_builders" not in {f.name for f in dc_fields(AttentionGroup)}:
        problems.append("AttentionGroup.metadata_builders")
    if "layer.cpu_linear" not in inspect.getsource(dispatch_cpu_unquantized_gemm):
        problems.append("dispatch_cpu_unquantized_gemm sets layer.cpu_linear")
    return problems
