"""What an lrtune vLLM engine does differently on a GPU, decided in one place (vLLM 0.32.0).

The CUDA wheel's Python is the CPU wheel's except three files, so every difference below is
a platform default; each rule cites the vLLM source it answers (``vllm/...:line``).

* **A. One engine-core process per GPU engine.** Every engine start with CUDA graphs runs
  ``profile_cudagraph_memory()``, whose ``finally`` calls ``CUDAGraphWrapper.clear_all_graphs()``
  (``v1/worker/gpu_model_runner.py:6446``) on a class-level set of every wrapper in the
  process (``compilation/cuda_graph.py:170-176, 209``): a second engine in one process wipes
  the first's graphs, whose next step must capture again and fails ("CUDA graph capturing
  detected at an inappropriate time", ``compilation/monitor.py:108``). On GPUs lrtune
  therefore leaves vLLM's own default, ``VLLM_ENABLE_V1_MULTIPROCESSING=1`` (each ``LLM`` runs
  its engine core, and with tensor parallelism 1 its worker, in a process of its own; the
  plugin patches it, ``tests/test_vllm_processes.py``). On CPUs there are no graphs and an
  in-process engine is what :mod:`benchmarks.engine_process` measured cheaper to start, so
  CPUs keep ``0``. A user who forces ``0`` on a GPU with graphs gets one engine that captures
  graphs per process (:func:`claim_graph_engine`), not a crash on the first LR round.
* **B. Padded vocabularies.** Draft-model SD requires equal ``vocab_size`` in both configs
  (``config/speculative.py:1866-1885``) although checkpoints of one tokenizer often pad their
  embedding differently (R1-Distill-Qwen-32B 152,064 rows, its 1.5B 151,936).
  :func:`vocab_plan` accepts such a pair when every id of the shared tokenizer fits both
  sizes and asks for ``use_heterogeneous_vocab`` (valid with ``method="draft_model"`` and
  greedy draft sampling, vLLM's default: ``config/speculative.py:1854-1863``); with
  identical tokenizers its mapping is the identity on every real token
  (``v1/spec_decode/vocab_mapping.py``).
* **D. One CUDA-graph kind for every method.** Under vLLM's default ``FULL_AND_PIECEWISE``, a
  batch counts as uniform decode only if every request has 1+k query tokens
  (``gpu_model_runner.py:3654-3671``): a γ2 = 0 request on the shared SD engine (the
  target-only baseline included) runs PIECEWISE graphs where a plain engine runs its FULL
  decode graph, which would make the baseline slower and every speedup larger than on plain
  vLLM. lrtune asks every engine for ``PIECEWISE`` (:func:`graph_kwargs`), so baseline and
  methods run the same kind; ``lrtune doctor --timing`` reports what that costs against a
  plain vLLM engine.
* **E. Ray workers.** vLLM's Ray executor copies only ``VLLM_*`` (and a few other) variables
  plus ``VLLM_RAY_EXTRA_ENV_VARS_TO_COPY`` to its workers (``ray/ray_env.py:81-96``);
  :func:`ray_vars_to_copy` adds lrtune's switch to that list.

* **F. Tokens per step on a CPU.** With chunked prefill on (vLLM's default), a prompt that
  does not fit a step's token budget is split, and for a seeded request the runner then
  rewinds its generator (``gpu_model_runner.py:3502``, ``gen.set_offset``), which a CPU
  generator refuses ("CPU Generator does not use offset"): seeded sampling crashes. lrtune
  used to avoid splits with 16384 tokens per step, whose activations cost 0.5 GiB of RAM
  more than 4096 on a step of long prompts (``benchmarks/memory``). :func:`step_budget` now
  gives a CPU engine ``max_model_len`` tokens per step with chunked prefill off: a prompt
  that does not fit waits for the next step (``v1/core/sched/scheduler.py:1161``), none is
  ever split, and vLLM accepts the pair (``config/scheduler.py:314``). A user's
  ``max_num_batched_tokens`` keeps vLLM's chunked prefill.

(C, the GPU memory plan that counts every engine, lives in :mod:`lrtune.memory`.)
"""

from __future__ import annotations

from collections.abc import Mapping

from lrtune.errors import ConfigError, ModelError

MULTIPROC_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
RAY_COPY_ENV = "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY"
LRTUNE_CUDAGRAPH_MODE = "PIECEWISE"  # the one graph kind of every lrtune engine on a GPU

_GRAPH_ENGINES: list[str] = []  # in-process engines of this process that capture CUDA graphs


def multiproc_default(on_cpu: bool) -> str:
    """``VLLM_ENABLE_V1_MULTIPROCESSING`` lrtune sets unless the user did: ``0`` on CPUs
    (engines in this process), ``1`` on GPUs (rule A: one engine-core process per engine)."""
    return "0" if on_cpu else "1"


def engine_in_process(env: Mapping[str, str]) -> bool:
    """Whether vLLM runs an ``LLM``'s engine core in the calling process (its parse of the
    variable: ``bool(int(value))``, default ``1``)."""
    try:
        return not bool(int(env.get(MULTIPROC_ENV, "1")))
    except ValueError:
        return False  # vLLM itself fails on such a value when it reads it


def captures_graphs(on_cpu: bool, enforce_eager: bool) -> bool:
    """Whether an engine captures CUDA graphs (GPU and not eager)."""
    return not on_cpu and not enforce_eager


def graph_kwargs(on_cpu: bool, enforce_eager: bool, *, plain: bool = False) -> dict:
    """Extra ``vllm.LLM`` arguments for the graph kind (rule D): ``PIECEWISE`` on every
    lrtune engine that captures graphs; ``plain`` keeps vLLM's default (what a user's
    plain engine runs; the doctor's reference)."""
    if plain or not captures_graphs(on_cpu, enforce_eager):
        return {}
    return {"compilation_config": {"cudagraph_mode": LRTUNE_CUDAGRAPH_MODE}}


def claim_graph_engine(
    name: str, *, on_cpu: bool, enforce_eager: bool, env: Mapping[str, str], tensor_parallel_size: int = 1
) -> None:
    """Record an engine about to start; :class:`ConfigError` (one line, before it starts)
    when it would be the second engine in this process to capture CUDA graphs (rule A). With
    tensor parallelism > 1 the graphs live in the engine's worker processes, not here."""
    if not (captures_graphs(on_cpu, enforce_eager) and engine_in_process(env)) or tensor_parallel_size > 1:
        return
    if _GRAPH_ENGINES:
        raise ConfigError(
            f"vLLM engine {name!r} would be the second engine capturing CUDA graphs in this process (after "
            f"{_GRAPH_ENGINES[0]!r}): vLLM 0.32 clears every CUDA graph of a process when an engine starts, and the "
            f"first engine's next step fails ('CUDA graph capturing detected at an inappropriate time'); unset "
            f"{MULTIPROC_ENV}=0 (lrtune runs each GPU engine in its own process) or pass --enforce-eager"
        )
    _GRAPH_ENGINES.append(name)


def release_graph_engine(name: str) -> None:
    """Forget an engine :func:`claim_graph_engine` recorded whose start failed."""
    if name in _GRAPH_ENGINES:
        _GRAPH_ENGINES.remove(name)


def gpu_memory(device_id: int = 0) -> tuple[int, int] | None:
    """(free, total) bytes of a GPU, read through NVML (vLLM's own ``pynvml``) without creating
    a CUDA context in this process (a context would make vLLM spawn, not fork, its engine
    processes, which re-imports a user's script); None where NVML cannot answer."""
    try:
        from vllm.platforms import current_platform
        from vllm.utils.import_utils import import_pynvml

        pynvml = import_pynvml()
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML here: the caller falls back or skips the check
        return None
    try:
        index = current_platform.device_id_to_physical_device_id(device_id)
        info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index))
        return int(info.free), int(info.total)
    except Exception:  # noqa: BLE001
        return None
    finally:
        pynvml.nvmlShutdown()


def check_free_memory(name: str, share: float, free: int, total: int) -> None:
    """Rule C before an engine starts: vLLM refuses to start unless ``share × total`` bytes
    are free (``v1/worker/utils.py:761-770``), and with the engine core in its own process
    that refusal reaches this process only as "Engine core initialization failed";
    :class:`ConfigError` naming the engine, in one line, instead."""
    need = share * total
    if free < need:
        raise ConfigError(
            f"vLLM engine {name!r} needs {share:.3f} of the GPU ({need / 2**30:.1f} GiB) free to start, but "
            f"{free / 2**30:.1f} GiB of {total / 2**30:.1f} GiB are free [cause {CAUSES[2][1]}]"
        )


def ray_vars_to_copy(current: str | None, name: str) -> str:
    """``VLLM_RAY_EXTRA_ENV_VARS_TO_COPY`` with ``name`` added (rule E; the user's names kept)."""
    names = [n.strip() for n in (current or "").split(",") if n.strip()]
    return ",".join(names if name in names else names + [name])


def config_vocab_size(config: Mapping) -> int | None:
    """``vocab_size`` of a model's ``config.json`` (top level or ``text_config``), or None."""
    for cfg in (config, config.get("text_config") if isinstance(config.get("text_config"), Mapping) else {}):
        v = cfg.get("vocab_size")
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def vocab_plan(target_vocab: int | None, draft_vocab: int | None, tokenizer_ids: int) -> bool:
    """Whether draft-model SD needs vLLM's ``use_heterogeneous_vocab`` (rule B) for a pair
    that shares one tokenizer of ``tokenizer_ids`` ids: False when the sizes are equal (or
    unknown), True when they differ and every tokenizer id fits both; otherwise
    :class:`ModelError` in one line."""
    if target_vocab is None or draft_vocab is None or target_vocab == draft_vocab:
        return False
    if tokenizer_ids > min(target_vocab, draft_vocab):
        small = "target" if target_vocab < draft_vocab else "draft"
        raise ModelError(
            f"the shared tokenizer has {tokenizer_ids} ids but the {small}'s vocab_size is "
            f"{min(target_vocab, draft_vocab)} (target {target_vocab}, draft {draft_vocab}): its "
            "embedding cannot hold every token, so it cannot draft for or verify this pair"
        )
    return True


CAUSES = (
    (
        "CUDA graph capturing detected at an inappropriate time",
        "A: a second vLLM engine in this process cleared this engine's CUDA graphs (vLLM 0.32 clears every graph of "
        f"a process at each engine start); leave {MULTIPROC_ENV} unset on GPUs or pass --enforce-eager",
    ),
    (
        "should have the same vocabulary size",
        "B: vLLM's draft-model SD needs equal vocab_size in both configs; lrtune passes use_heterogeneous_vocab when "
        "the tokenizers match (is this vLLM 0.32.0?)",
    ),
    (
        "is less than desired GPU memory utilization",
        "C: another engine or process holds the memory this engine's share needs; lower --gpu-memory-utilization or "
        "the role's --*-gpu-share (lrtune doctor prints the plan)",
    ),
    (
        "Engine core initialization failed",
        "the engine's own process failed to start; its reason is in the lines vLLM printed above (often C: the "
        "memory its share needs is not free)",
    ),
)


def explain(error: BaseException | str) -> str | None:
    """The cause (A–C of the module docstring) of a vLLM error message, or None."""
    text = str(error)
    return next((cause for marker, cause in CAUSES if marker in text), None)


def with_cause(error: BaseException | str) -> str:
    """The error's first line, followed by its cause when :func:`explain` knows it."""
    first = (str(error).splitlines() or [type(error).__name__])[0]
    cause = explain(error)
    return f"{first} [cause {cause}]" if cause else first


def step_budget(max_num_batched_tokens: int | None, max_model_len: int, *, on_cpu: bool) -> dict:
    """vLLM's tokens-per-step settings (rule F): a user's value as given, chunked prefill on;
    by default on a CPU ``max_model_len`` tokens with chunked prefill off; elsewhere vLLM's."""
    if max_num_batched_tokens is not None:
        return {"max_num_batched_tokens": max_num_batched_tokens}
    if on_cpu:
        return {"max_num_batched_tokens": max_model_len, "enable_chunked_prefill": False}
    return {}
