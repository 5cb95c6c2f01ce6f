"""Building a decoder, phase 1 (no engine started): every option, the verifier spec, the model
directories, the GPU memory plan (:func:`check_configs`), and the parts a decoder is built
from: its verifier, its controller (priced by the run's plan, :mod:`lrtune.pricing`), the
prompts it will take. Commands call these before they claim an output directory."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from lrtune.decodeconfig import DecodeConfig
from lrtune.errors import ConfigError, ConfigTypeError
from lrtune.modelconfig import ModelConfig, VerifierConfig
from lrtune.verifiers import MODEL_VERIFIERS, Verifier, VerifierSpec, make_verifier


def verifier_of(models: ModelConfig, verifier=None) -> VerifierSpec | Verifier:
    """The verifier a decoder is built with, parsed once: ``verifier`` (a spec text is parsed,
    a parsed spec or a built Verifier is kept) or else ``models.verification.parsed``."""
    if verifier is None:
        return models.verification.parsed
    return VerifierSpec.of(verifier) if isinstance(verifier, (str, VerifierSpec)) else verifier


def judge_path(models: ModelConfig, verifier, progress: bool) -> str | None:
    """The ``--judge-model`` directory when the verifier is a model verifier that uses it
    (``llm_judge``/``target_score``), else None (the target judges itself)."""
    from lrtune.models import resolve_model

    spec, judge = verifier_of(models, verifier), models.verification.judge_model
    if judge and isinstance(spec, VerifierSpec) and spec.kind in MODEL_VERIFIERS:
        # role "target": "default" names the default target model
        return resolve_model(judge, "target", cache_dir=models.cache_dir, progress=progress)
    return None


def build_verifier(
    verification: VerifierConfig, device: str, cfg: DecodeConfig, verifier, target, judge_dir: str | None, load_judge
) -> Verifier:
    """The verifier: ``verifier`` (parsed, :func:`verifier_of`) at ``verification``'s threshold;
    model verifiers judge with the target, or with ``judge_dir`` (:func:`judge_path`) loaded
    by ``load_judge(path)`` on the same backend."""
    judge = load_judge(judge_dir) if judge_dir else target
    return make_verifier(
        verifier, threshold=verification.threshold, seed=cfg.seed, backend=judge, device=verifier_device(device)
    )


def build_controller(spec, cfg: DecodeConfig, pricing=None):
    """A controller from a policy name, a learned-controller directory, or an object with
    ``choose``/``update`` (passed through, unchanged); None stays None (fixed depths from ``cfg``).
    Built ones are priced by ``pricing`` (a :class:`lrtune.pricing.Pricing`, the run's plan;
    default costs when None), their bounds stopped at its engine's γ2. Without token-level SD
    in ``cfg.method`` the decoder runs γ2 = 0 whatever is chosen, so a built controller's bounds
    pin γ2 to 0 (it never picks, prices or waits on a γ2 > 0)."""
    if spec is None:
        return None
    if not isinstance(spec, str):
        from lrtune.control import checked_controller

        return checked_controller(spec)
    from pathlib import Path

    from lrtune.pricing import Pricing

    pricing = pricing or Pricing()
    if Path(spec).expanduser().is_dir():
        from lrtune.policies.learned import load

        ctl = load(spec, seed=cfg.seed, pricing=pricing)
        return ctl if cfg.uses_sd else ctl.derive(bounds=replace(ctl.bounds, gamma2_max=0, gamma2_min=0))
    from lrtune.control import Bounds
    from lrtune.policies import make_controller

    gamma2 = cfg.sd_gamma2
    bounds = Bounds.covering(cfg.gamma1, gamma2)
    if not cfg.uses_sd:
        bounds = replace(bounds, gamma2_max=0)
    return make_controller(
        spec, gamma1=cfg.gamma1, gamma2=gamma2, bounds=pricing.cap(bounds), pricing=pricing, seed=cfg.seed
    )


def encode_prompts(models: ModelConfig, prompts: Sequence[str], *, progress: bool = True) -> list[list[int]]:
    """Token ids of ``prompts`` as the target will see them (chat template applied), from
    the target's tokenizer alone: lengths can be checked before any model loads."""
    from lrtune.backends.tokenizer import TokenizerMixin
    from lrtune.models import resolve_model

    tok = TokenizerMixin()
    tok.model = resolve_model(models.target, "target", cache_dir=models.cache_dir, progress=progress)
    tok._load_tokenizer()
    return [tok.encode_prompt(p) for p in prompts]


def require_a_prompt_that_fits(
    models: ModelConfig, cfg: DecodeConfig, prompts: Sequence[str], *, progress: bool = True
) -> None:
    """ConfigError unless at least one prompt fits ``max_model_len`` with its budget
    (``max_new_tokens + max_step_tokens``); checked from the tokenizer, before any model loads."""
    need = cfg.max_new_tokens + cfg.max_step_tokens
    if not any(
        len(ids) + need <= models.engine.max_model_len for ids in encode_prompts(models, prompts, progress=progress)
    ):
        raise ConfigError(
            f"no problem fits max_model_len {models.engine.max_model_len} with --max-new-tokens "
            f"{cfg.max_new_tokens} and --max-step-tokens {cfg.max_step_tokens}; raise --max-model-len "
            "or lower them"
        )


def prompt_list(prompts) -> list:
    """``generate``'s ``prompts`` as a list of prompts, each a text or a list of token ids (one
    text or one list of ids is one prompt); :class:`ConfigTypeError` / :class:`ConfigError`
    naming the argument otherwise (ids themselves are checked against the vocabulary later)."""
    if isinstance(prompts, str):
        return [prompts]
    if not isinstance(prompts, (list, tuple)):
        raise ConfigTypeError(f"prompts: a text, a list of token ids, or a list of those; got {type(prompts).__name__}")
    if not prompts:
        raise ConfigError("prompts: an empty list; give at least one prompt")
    if all(isinstance(t, int) and not isinstance(t, bool) for t in prompts):
        return [list(prompts)]  # one prompt of token ids
    for i, p in enumerate(prompts):
        if not isinstance(p, (str, list, tuple)):
            raise ConfigTypeError(f"prompts[{i}]: a text or a list of token ids, got {type(p).__name__}")
    return list(prompts)


def verifier_device(device: str) -> str:
    """Where a distilled verifier runs: ``auto`` is CUDA when present, else CPU."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class ResolvedModels:
    """What :func:`check_configs` found: model directories and the GPU memory plan."""

    target: str
    draft: str | None
    judge: str | None
    memory: object | None = None  # lrtune.memory.MemoryPlan on a GPU with vLLM
    draft_quantization: str = "none"  # what the draft engines run: "none" (as saved), "int8" or "int8-weights"
    target_quantization: str = "none"  # what the target engines run: the same choices
    heterogeneous_vocab: bool = False  # one tokenizer, padded vocab sizes that differ (vllm_platform rule B)
    shared_spec_tokens: int = 0  # γ2 of the shared SD engine (0: one target engine per γ2)
    target_engines: tuple[int, ...] = (0,)  # γ2 keys of every target engine the memory plan counts
    cpu_memory: object | None = None  # lrtune.cpumemory.CpuMemoryPlan where the run holds its models in RAM
    kv_gib: dict = field(default_factory=dict)  # KV cache per engine role on the CPU: "target" | "draft" | "judge"


def check_configs(
    models: ModelConfig,
    cfg: DecodeConfig,
    *,
    verifier=None,
    load_all_methods: bool = False,
    progress: bool = True,
    gamma2s: Iterable[int] = (),
    controller_gamma2_max: int = 0,
    build: bool = False,
) -> ResolvedModels:
    """Phase 1 of building a decoder, with no engine started: every option (schema and rules),
    the verifier spec, the model directories (config and weight headers readable; the default
    pair is built once if missing), tokenizer compatibility and vocab sizes, the judge model
    and the GPU memory plan, which counts every target engine: the γ2 values a run asks for
    besides ``cfg.gamma2`` (``gamma2s``: an evaluate sweep) and a controller's range up to
    ``controller_gamma2_max``. Commands call it before they claim an output directory;
    ``Decoder.from_configs`` calls it too, with ``build``: only then are a quantized copy built
    and ``auto``'s timings taken (phase 2, :mod:`lrtune.gate`); before, the memory plan counts a
    copy from its source's headers and the paths are those the copies will have."""
    from lrtune.models import check_tokenizers_compatible, needs_heterogeneous_vocab, resolve_model

    spec = _checked_options(models, cfg, verifier)
    needs_draft = load_all_methods or cfg.uses_lr or (cfg.uses_sd and models.sd_method == "draft")
    target_path = resolve_model(models.target, "target", cache_dir=models.cache_dir, progress=progress)
    draft_path = None
    if needs_draft:
        draft_path = resolve_model(models.draft, "draft", cache_dir=models.cache_dir, progress=progress)
        check_tokenizers_compatible(target_path, draft_path)
    elif models.draft != "default":  # named though this run loads none: a mistyped path still fails here
        resolve_model(models.draft, "draft", cache_dir=models.cache_dir, progress=progress)
    padded = bool(draft_path) and needs_heterogeneous_vocab(target_path, draft_path)
    judge_dir = judge_path(models, spec, progress)
    check_positions(models, {"target": target_path, "draft": draft_path, "judge": judge_dir})
    # every model is found before a copy is built into the cache (a mistyped judge builds nothing)
    # the plans read the models as saved (a copy is counted from its source's headers: as_copy)
    target_src, draft_src = target_path, draft_path
    target_path, target_quant = _engines_copy(
        models, "target", models.target_quantization, target_path, progress, build
    )
    draft_path, quant = _engines_copy(models, "draft", models.draft_quantization, draft_path, progress, build)
    copies = {"target": target_quant != "none", "draft": quant != "none"}
    plan, shared, keys = None, 0, (0,)
    if models.backend == "vllm":
        plan, shared, keys = _gpu_plan(
            models, cfg, (target_src, draft_src, judge_dir), copies, load_all_methods, gamma2s, controller_gamma2_max
        )
    sd_draft = bool(draft_path) and models.sd_method == "draft"
    kv = kv_cache_plan(models, target_src, draft_src if sd_draft else None, draft_src, judge_dir)
    cpu_plan = cpu_memory_plan(
        models,
        cfg,
        target_src,
        draft_src,
        judge_dir,
        keys,
        on_gpu=plan is not None,
        quantized=quant != "none",
        target_quantized=target_quant != "none",
        kv=kv,
    )
    if cpu_plan is not None:
        from lrtune.cpumemory import check_budget

        check_budget(cpu_plan, models.engine.memory_budget_gib)
    return ResolvedModels(
        target_path, draft_path, judge_dir, plan, quant, target_quant, padded, shared, keys, cpu_plan, kv
    )


def check_positions(models: ModelConfig, dirs: dict[str, str | None]) -> None:
    """vLLM refuses a ``--max-model-len`` longer than a model's positions (its config.json's
    ``max_position_embeddings``) unless RoPE scaling stretches them or
    ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is set: refused here in one line, before any engine starts."""
    if models.backend != "vllm" or os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0") not in ("", "0"):
        return
    from lrtune.filekinds import model_side_config

    want = models.engine.max_model_len
    for role, path in dirs.items():
        if not path or not os.path.isdir(path):
            continue
        side = model_side_config(path)
        if side.rope_scaling is None and side.max_position_embeddings and want > side.max_position_embeddings:
            raise ConfigError(
                f"--max-model-len {want} is longer than the {role} model's {side.max_position_embeddings} "
                f"positions (max_position_embeddings in {path}/config.json): lower --max-model-len"
            )


def _engines_copy(models: ModelConfig, role: str, mode: str, path: str | None, progress: bool, build: bool):
    """(the directory ``role``'s engines load, its scheme) under ``--ROLE-quantization`` ``mode``
    (:func:`lrtune.quantize.for_engines`; built only with ``build``); ``path`` itself, "none",
    where there is no copy to make."""
    if mode == "none" or not path:
        return path, "none"
    from lrtune.quantize import for_engines

    return for_engines(
        mode,
        path,
        backend=models.backend,
        role=role,
        dtype=models.dtype,
        cache_dir=models.cache_dir,
        progress=progress,
        gpu_cap=models.engine.gpu.utilization,
        build=build,
    )


def _checked_options(models: ModelConfig, cfg: DecodeConfig, verifier):
    """Every option (schema and rules) and the verifier spec, before anything is read; the spec."""
    cfg.validate()
    models.validate()
    spec = verifier_of(models, verifier)
    if isinstance(spec, VerifierSpec):
        from lrtune.verifiers import check_verifier_spec

        parsed = check_verifier_spec(spec)
        if cfg.uses_lr and cfg.score_rounds:
            from lrtune.score_round import require_one_sided

            require_one_sided(parsed)
    if models.engine.max_model_len < cfg.max_step_tokens + 2:
        raise ConfigError("max_model_len is too small for one step")
    from lrtune.consumers import check_device, check_read, engine_unread, engines_on_gpu

    if models.backend == "transformers":  # vLLM picks its own device
        check_device(models.device)
    check_read(engine_unread(models, on_gpu=engines_on_gpu(models)))
    if isinstance(models.control.controller, str):  # a policy name or a directory: built (no model loads)
        build_controller(models.control.controller, cfg)
    if models.backend == "vllm":
        from lrtune.backends.vllm_patches import check_environment

        check_environment()
    from lrtune.quantize import check_int8_runs

    for role, mode in (("draft", models.draft_quantization), ("target", models.target_quantization)):
        if mode in ("int8", "int8-weights"):
            check_int8_runs(models.backend, role, mode)
    return spec


def _gpu_plan(models, cfg, dirs, copies, load_all_methods, gamma2s, controller_gamma2_max):
    """vLLM: the GPU memory plan (None on a CPU), the shared SD engine's γ2, and the keys of the
    target engines the run will start (every γ2 it asks for). ``dirs``: (target, draft, judge)
    as saved; ``copies``: which role's engines load a quantized copy."""
    from lrtune.backends.vllm import gpu_memory_plan
    from lrtune.memory import target_engine_keys

    target_path, draft_path, judge_dir = dirs
    shared = shared_spec_tokens(
        models,
        cfg,
        has_draft=bool(draft_path),
        load_all_methods=load_all_methods,
        controller_gamma2_max=controller_gamma2_max,
    )
    sd = cfg.uses_sd or load_all_methods
    # a controller on the shared engine picks within its γ2 (Pricing.cap); without one, any γ2 of its range
    ranged = range(1, controller_gamma2_max + 1) if sd and not shared else ()
    asked = [*gamma2s, *ranged, cfg.gamma2 if sd else 0]
    keys = target_engine_keys(asked, shared=shared)
    spec_model = draft_path if models.sd_method == "draft" else None
    plan = gpu_memory_plan(
        models.engine,
        {"target": target_path, "draft": draft_path, "judge": judge_dir},
        spec_model,
        engines={"target": len(keys)},
        copies=copies,
    )
    return plan, shared, keys


def kv_token_bytes(model_dir: str, dtype: str) -> int:
    """Bytes a token of ``model_dir`` holds in a vLLM engine's KV cache at ``--dtype``
    (:func:`lrtune.cpumemory.kv_bytes_per_token`); 0 where its config.json does not say."""
    from lrtune.backends.vllm import resolve_dtype
    from lrtune.cpumemory import kv_bytes_per_token
    from lrtune.filekinds import model_side_config

    side = model_side_config(model_dir)
    if side.kv_shape is None:
        return 0
    resolved = resolve_dtype(dtype, model_dir)
    if resolved == "auto":
        resolved = side.saved_dtype or "float32"
    return kv_bytes_per_token(*side.kv_shape, 4 if resolved in ("float32", "float") else 2)


def kv_cache_plan(models: ModelConfig, target: str, spec: str | None, draft: str | None, judge: str | None) -> dict:
    """GiB of KV cache per engine role on the CPU (vLLM): ``--kv-cache-gib`` where given, else
    :func:`lrtune.cpumemory.auto_kv_gib` of the role's models (the SD engine holds its drafter's
    cache beside the target's); empty for the transformers backend, which sizes no cache."""
    if models.backend != "vllm":
        return {}
    eng = models.engine
    roles = {"target": [target, spec], "draft": [draft], "judge": [judge]}
    if eng.kv_cache_gib is not None:
        return {role: eng.kv_cache_gib for role, paths in roles.items() if paths[0]}
    from lrtune.cpumemory import auto_kv_gib

    out = {}
    for role, paths in roles.items():
        if paths[0]:
            sizes = [kv_token_bytes(p, models.dtype) for p in paths if p]
            out[role] = auto_kv_gib(0 if 0 in sizes else sum(sizes), eng.max_model_len)
    return out


def cpu_memory_plan(
    models: ModelConfig,
    cfg: DecodeConfig,
    target,
    draft,
    judge,
    keys,
    *,
    on_gpu: bool,
    kv: dict,
    quantized: bool = False,
    target_quantized: bool = False,
):
    """The resident memory the run's engines will hold in RAM (:mod:`lrtune.cpumemory`); None on a GPU.
    ``target``, ``draft``, ``judge``: the models as saved; ``quantized`` / ``target_quantized``:
    the draft / target engines run a quantized copy of it (counted from its headers; engines
    cannot share one: :mod:`lrtune.backends.vllm_shared`); ``kv``: the KV cache per engine role
    (:func:`kv_cache_plan`)."""
    from lrtune import cpumemory
    from lrtune.memory import held_weight_bytes

    if on_gpu:
        return None
    if models.backend == "transformers" and verifier_device(models.device) != "cpu":  # auto: CUDA when present
        return None
    if models.backend == "vllm":
        from lrtune.backends.vllm import on_cpu_platform

        if not on_cpu_platform():
            return None
        from lrtune.backends.vllm import resolve_dtype

        def weight_bytes(path, as_copy=False):  # as the engine holds them: bf16 runs in float32 without native bf16
            float32 = bool(path) and resolve_dtype(models.dtype, path) == "float32"
            return held_weight_bytes(path, float32=float32, as_copy=as_copy)

        spec = weight_bytes(draft, quantized) if draft and models.sd_method == "draft" else 0
        # engines of one process take the weights a first one loaded (one process holds them all: TP 1)
        share = models.engine.share_weights and models.engine.tensor_parallel_size == 1
        return cpumemory.plan_vllm(
            weight_bytes(target, target_quantized),
            weight_bytes(draft, quantized),
            target_engines=keys,
            draft_engine=bool(draft) and cfg.uses_lr,
            spec_bytes=spec,
            kv_cache_gib=kv["target"],
            judge_bytes=weight_bytes(judge),
            draft_shared=bool(spec) and share and not quantized,
            target_shared=share and not target_quantized,
            judge_is_target=bool(judge)
            and not target_quantized
            and os.path.realpath(judge) == os.path.realpath(target),
            draft_kv_gib=kv.get("draft"),
            judge_kv_gib=kv.get("judge"),
        )
    float32 = models.dtype in ("auto", "float32")  # the transformers backend's "auto" on a CPU: float32
    return cpumemory.plan_torch(*(held_weight_bytes(p, float32=float32) for p in (target, draft, judge)))


def auto_controller() -> str:
    """The controller an adaptive ``auto`` choice runs without ``--controller``
    (:data:`lrtune.policies.auto.CONTROLLER`)."""
    from lrtune.policies.auto import CONTROLLER

    return CONTROLLER


def auto_choice(models: ModelConfig, decode: DecodeConfig, pricing, profile: str | None = None, *, own_verifier=False):
    """What ``auto`` runs (:func:`lrtune.policies.auto.choose`) for ``models`` and ``decode``,
    priced by ``pricing``: SD as ``profile`` measured it, the verifier's promise (none when a
    threshold other than its calibrated one is set), the bounds and round kinds of the run's controller
    (``bandit`` without one); ``own_verifier``: a verifier object handed in, which states no
    bound. Reads files only; no model loads."""
    from lrtune.policies.auto import CONTROLLER as AUTO_CONTROLLER, accuracy_promise, choose, measured_sd

    speed, alpha2 = measured_sd(profile)
    ver = models.verification
    promise = None
    if not own_verifier and (ver.threshold is None or ver.parsed.kind in ("exact", "never")):
        promise = accuracy_promise(ver.parsed)
    ctl = build_controller(models.control.controller or AUTO_CONTROLLER, decode, pricing)
    return choose(
        pricing,
        has_draft=bool(models.draft),
        promise=promise,
        bounds=getattr(ctl, "bounds", None),
        measured_sd_speedup=speed,
        alpha2=alpha2,
        round_kinds=tuple(getattr(ctl, "round_kinds", ("lr",))),
        alpha1_max=0.0 if not own_verifier and ver.parsed.kind == "never" else None,
    )


def shared_spec_tokens(
    models: ModelConfig, cfg: DecodeConfig, *, has_draft: bool, load_all_methods: bool, controller_gamma2_max: int = 0
) -> int:
    """γ2 of the one vLLM SD engine that serves every γ2 up to it (drafts cut per request),
    or 0 when each γ2 gets its own engine (no draft model, ngram SD, ``shared_engine=False``).
    With a controller it drafts the controller's largest γ2."""
    if not (
        models.engine.shared_engine
        and has_draft
        and models.sd_method == "draft"
        and cfg.gamma2 > 0
        and (cfg.uses_sd or load_all_methods)
    ):
        return 0
    return max(cfg.gamma2, controller_gamma2_max)
