"""Public Python API: one of the core's faces (with ``cli.py`` and ``pipeline.py``); it
reaches no stage but ``policies`` (the controller a decoder runs).

>>> from lrtune import Decoder                                   # doctest: +SKIP
>>> dec = Decoder.from_pretrained(target="default", draft="default", method="lr+sd")
>>> out = dec.generate(["Tom has 3 apples and buys 4 more. How many?"], max_new_tokens=256)
>>> out[0].text, out[0].token_ids[:5], out[0].stats.alpha1
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Literal

from annotated_types import Interval
from pydantic import StringConstraints

from lrtune import schema
from lrtune.backends.base import Backend
from lrtune.decoder import DecodeConfig, LookaheadDecoder, stable_digest
from lrtune.roundstate import Failed
from lrtune.errors import ConfigError, ConfigTypeError
from lrtune.schema import STRICT, Fraction, Share, Text
from lrtune.stats import BatchStats, DecodeStats
from lrtune.control import ProblemInfo
from lrtune.verifiers import MODEL_VERIFIERS, Verifier, make_verifier

BACKENDS = ("vllm", "transformers")


@dataclass
class ModelConfig:
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

    def validate(self) -> ModelConfig:
        schema.check(self)
        if self.draft_quantization == "int8" and self.backend != "vllm":
            raise ConfigError("--draft-quantization int8 needs --backend vllm (transformers would dequantize the "
                              "int8 weights and run no faster)")
        return self


def judge_path(models: ModelConfig, verifier, progress: bool) -> str | None:
    """The ``--judge-model`` directory when the verifier is a model verifier that uses it
    (``llm_judge``/``target_score``), else None (the target judges itself)."""
    from lrtune.models import resolve_model

    from lrtune.verifiers import VerifierSpec

    spec = verifier if verifier is not None else models.verifier
    if models.judge_model and isinstance(spec, str) and VerifierSpec.parse(spec).kind in MODEL_VERIFIERS:
        # role "target": "default" names the default target model
        return resolve_model(models.judge_model, "target", cache_dir=models.cache_dir, progress=progress)
    return None


def _build_verifier(models: ModelConfig, cfg: DecodeConfig, verifier, target, judge_dir: str | None,
                    load_judge) -> Verifier:
    """The verifier; model verifiers judge with the target, or with ``judge_dir``
    (:func:`judge_path`) loaded by ``load_judge(path)`` on the same backend."""
    spec = verifier if verifier is not None else models.verifier
    judge = load_judge(judge_dir) if judge_dir else target
    return make_verifier(spec, threshold=models.verifier_threshold, seed=cfg.seed, backend=judge,
                         device=verifier_device(models.device))


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

    gamma2 = cfg.gamma2 if cfg.uses_sd else 0
    bounds = Bounds.covering(cfg.gamma1, gamma2)
    if not cfg.uses_sd:
        bounds = replace(bounds, gamma2_max=0)
    return make_controller(spec, gamma1=cfg.gamma1, gamma2=gamma2, bounds=pricing.cap(bounds), pricing=pricing,
                           seed=cfg.seed)


def encode_prompts(models: ModelConfig, prompts: Sequence[str], *, progress: bool = True) -> list[list[int]]:
    """Token ids of ``prompts`` as the target will see them (chat template applied), from
    the target's tokenizer alone: lengths can be checked before any model loads."""
    from lrtune.backends.tokenizer import TokenizerMixin
    from lrtune.models import resolve_model

    tok = TokenizerMixin()
    tok.model = resolve_model(models.target, "target", cache_dir=models.cache_dir, progress=progress)
    tok._load_tokenizer()
    return [tok.encode_prompt(p) for p in prompts]


def require_a_prompt_that_fits(models: ModelConfig, cfg: DecodeConfig, prompts: Sequence[str], *,
                               progress: bool = True) -> None:
    """ConfigError unless at least one prompt fits ``max_model_len`` with its budget
    (``max_new_tokens + max_step_tokens``); checked from the tokenizer, before any model loads."""
    need = cfg.max_new_tokens + cfg.max_step_tokens
    if not any(len(ids) + need <= models.max_model_len for ids in encode_prompts(models, prompts, progress=progress)):
        raise ConfigError(f"no problem fits max_model_len {models.max_model_len} with --max-new-tokens "
                          f"{cfg.max_new_tokens} and --max-step-tokens {cfg.max_step_tokens}; raise --max-model-len "
                          "or lower them")


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
    draft_quantization: str = "none"  # what the draft engines run: "none" (as saved) or "int8"
    heterogeneous_vocab: bool = False  # one tokenizer, padded vocab sizes that differ (vllm_platform rule B)
    shared_spec_tokens: int = 0  # γ2 of the shared SD engine (0: one target engine per γ2)
    target_engines: tuple[int, ...] = (0,)  # γ2 keys of every target engine the memory plan counts


def check_configs(models: ModelConfig, cfg: DecodeConfig, *, verifier=None, load_all_methods: bool = False,
                  progress: bool = True, gamma2s: Iterable[int] = (), controller_gamma2_max: int = 0) -> ResolvedModels:
    """Phase 1 of building a decoder, with no engine started: every option (schema and rules),
    the verifier spec, the model directories (config and weight headers readable; the default
    pair is built once if missing), tokenizer compatibility and vocab sizes, the judge model
    and the GPU memory plan, which counts every target engine: the γ2 values a run asks for
    besides ``cfg.gamma2`` (``gamma2s``: an evaluate sweep) and a controller's range up to
    ``controller_gamma2_max``. Commands call it before they claim an output directory;
    ``Decoder.from_configs`` calls it too."""
    from lrtune.models import check_tokenizers_compatible, needs_heterogeneous_vocab, resolve_model

    cfg.validate()
    models.validate()
    spec = verifier if verifier is not None else models.verifier
    if isinstance(spec, str):
        from lrtune.verifiers import check_verifier_spec

        parsed = check_verifier_spec(spec)
        if cfg.uses_lr and cfg.score_rounds:
            from lrtune.score_round import require_one_sided

            require_one_sided(parsed)
    if models.max_model_len < cfg.max_step_tokens + 2:
        raise ConfigError("max_model_len is too small for one step")
    if models.draft_quantization == "int8":
        from lrtune.quantize import check_int8_runs

        check_int8_runs(models.backend)
    needs_draft = load_all_methods or cfg.uses_lr or (cfg.uses_sd and models.sd_method == "draft")
    target_path = resolve_model(models.target, "target", cache_dir=models.cache_dir, progress=progress)
    draft_path = None
    if needs_draft:
        draft_path = resolve_model(models.draft, "draft", cache_dir=models.cache_dir, progress=progress)
        check_tokenizers_compatible(target_path, draft_path)
    padded = bool(draft_path) and needs_heterogeneous_vocab(target_path, draft_path)
    quant = "none"
    if models.draft_quantization != "none":
        from lrtune.quantize import draft_for_engines

        if draft_path:
            draft_path, quant = draft_for_engines(models.draft_quantization, draft_path, backend=models.backend,
                                                  dtype=models.dtype, cache_dir=models.cache_dir, progress=progress,
                                                  gpu_cap=models.gpu_memory_utilization)
    judge_dir = judge_path(models, verifier, progress)
    plan, shared, keys = None, 0, (0,)
    if models.backend == "vllm":
        from lrtune.backends.vllm import gpu_memory_plan
        from lrtune.memory import target_engine_keys

        shared = shared_spec_tokens(models, cfg, has_draft=bool(draft_path), load_all_methods=load_all_methods,
                                    controller_gamma2_max=controller_gamma2_max)
        sd = cfg.uses_sd or load_all_methods
        # a controller on the shared engine picks within its γ2 (Pricing.cap); without one, any γ2 of its range
        ranged = range(1, controller_gamma2_max + 1) if sd and not shared else ()
        asked = [*gamma2s, *ranged, cfg.gamma2 if sd else 0]
        keys = target_engine_keys(asked, shared=shared)
        spec_model = draft_path if models.sd_method == "draft" else None
        plan = gpu_memory_plan(models, {"target": target_path, "draft": draft_path, "judge": judge_dir}, spec_model,
                               engines={"target": len(keys)})
    return ResolvedModels(target_path, draft_path, judge_dir, plan, quant, padded, shared, keys)


def shared_spec_tokens(models: ModelConfig, cfg: DecodeConfig, *, has_draft: bool, load_all_methods: bool,
                       controller_gamma2_max: int = 0) -> int:
    """γ2 of the one vLLM SD engine that serves every γ2 up to it (drafts cut per request),
    or 0 when each γ2 gets its own engine (no draft model, ngram SD, ``shared_engine=False``).
    With a controller it drafts the controller's largest γ2."""
    if not (models.shared_engine and has_draft and models.sd_method == "draft" and cfg.gamma2 > 0
            and (cfg.uses_sd or load_all_methods)):
        return 0
    return max(cfg.gamma2, controller_gamma2_max)


@dataclass
class DecodeOutput:
    """One prompt's result: text (special tokens removed), generated ids, stats; or, when the
    prompt could not run, ``finish == "error"`` and ``error`` says why (nothing else is set)."""

    prompt: str | list[int]
    text: str
    token_ids: list[int]
    finish: str
    stats: DecodeStats
    steps: list[tuple[str, list[int]]]
    error: str | None = None  # why this prompt was not decoded (finish == "error")

    @property
    def ok(self) -> bool:
        return self.error is None


class Outputs(list):
    """What :meth:`Decoder.generate` returns: one :class:`DecodeOutput` per prompt, in order,
    and ``batch``, the set's throughput record (:class:`~lrtune.stats.BatchStats`)."""

    def __init__(self, outputs, batch: BatchStats) -> None:
        super().__init__(outputs)
        self.batch = batch


class Decoder:
    """Loads models once; ``generate`` decodes prompts with any method, one or many at a time.
    A context manager: ``with Decoder.from_pretrained(...) as dec:`` closes the engines."""

    def __init__(self, decoder: LookaheadDecoder, models: ModelConfig) -> None:
        self.decoder = decoder
        self.models = models
        self.last_batch: BatchStats | None = None  # the last generate()'s (also its outputs' .batch)

    def __enter__(self) -> Decoder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @classmethod
    def from_pretrained(cls, target: str = "default", draft: str = "default", *, method: str = "lr+sd",
                        verifier: str | Verifier = "embedding", backend: str = "vllm", gamma1: int = 3,
                        gamma2: int = 4, max_step_tokens: int = 128, seed: int = 0,
                        verifier_threshold: float | None = None, controller=None, progress: bool = True,
                        **model_kwargs) -> Decoder:
        """Resolve and load target/draft, build the verifier (a kind or a distilled
        checkpoint directory) and the controller (a policy name, a learned controller
        directory, or an object with ``choose``/``update``), return a ready decoder.

        ``model_kwargs`` are :class:`ModelConfig` fields (``sd_method``, ``dtype``,
        ``max_model_len``, ``tensor_parallel_size``, ``gpu_memory_utilization``, ``cache_dir``).
        """
        unknown = sorted(set(model_kwargs) - set(ModelConfig.__dataclass_fields__))
        if unknown:
            raise ConfigTypeError(f"Decoder.from_pretrained() has no option {', '.join(map(repr, unknown))} (model "
                                  f"options are ModelConfig's fields: {', '.join(ModelConfig.__dataclass_fields__)})")
        models = ModelConfig(target=target, draft=draft, backend=backend,
                             verifier=verifier if isinstance(verifier, str) else getattr(verifier, "name", "custom"),
                             verifier_threshold=verifier_threshold,
                             controller=controller if isinstance(controller, str) else None, **model_kwargs)
        cfg = DecodeConfig(method=method, gamma1=gamma1, gamma2=gamma2, max_step_tokens=max_step_tokens,
                           seed=seed).validate()
        return cls.from_configs(models, cfg, verifier=verifier, controller=controller, progress=progress)

    @classmethod
    def from_configs(cls, models: ModelConfig, cfg: DecodeConfig, *, verifier: str | Verifier | None = None,
                     controller=None, progress: bool = True, load_all_methods: bool = False,
                     gamma2s: Iterable[int] = ()) -> Decoder:
        """Build from configs. ``load_all_methods`` loads the draft even for ``target``;
        ``gamma2s`` are the other γ2 values the run will ask for (its memory plan counts their
        engines). A controller named by a policy or a directory is built with the run's pricing
        plan (:mod:`lrtune.pricing`); a controller object handed in is used as it is."""
        spec = controller if controller is not None else models.controller
        return cls._from_configs(models, cfg, verifier=verifier, progress=progress, load_all_methods=load_all_methods,
                                 gamma2s=tuple(gamma2s), controller=build_controller(spec, cfg),
                                 price_controller=isinstance(spec, str))

    @classmethod
    def _from_configs(cls, models: ModelConfig, cfg: DecodeConfig, *, verifier, progress: bool,
                      load_all_methods: bool, controller, gamma2s: tuple[int, ...] = (),
                      price_controller: bool = True) -> Decoder:
        paths = check_configs(models, cfg, verifier=verifier, load_all_methods=load_all_methods, progress=progress,
                              gamma2s=gamma2s,
                              controller_gamma2_max=controller.bounds.gamma2_max if controller is not None else 0)
        target_path, draft_path, judge_dir = paths.target, paths.draft, paths.judge
        from lrtune import pricing

        def priced(ver, drafts: int = 0):  # the pricing plan, decided once: engine drafts, verifier's needs
            return pricing.priced(controller, pricing.plan(engine_drafts=drafts, verifier=ver)) if price_controller \
                else controller

        if models.backend == "transformers":
            return cls._from_configs_hf(models, cfg, target_path, draft_path, verifier, judge_dir, priced)
        from lrtune.backends.vllm import VLLMBackend, VLLMConfig
        from lrtune.memory import engine_share

        plan = paths.memory
        common = dict(dtype=models.dtype, max_model_len=models.max_model_len, seed=cfg.seed, kv_cache_gib=models.kv_cache_gib,
                      max_num_batched_tokens=models.max_num_batched_tokens, enforce_eager=models.enforce_eager)
        # One SD engine (γ2 = cfg.gamma2) also serves target-only and LR target calls.
        # With a controller, the engine drafts its largest γ2 and smaller ones are cut per request.
        shared = paths.shared_spec_tokens
        if shared > cfg.gamma2 and cfg.uses_sd:
            from lrtune.runfiles import log

            log(f"note: the SD engine drafts {shared} tokens per pass (the controller's largest γ2); calls with "
                f"γ2 = {cfg.gamma2} verify only their first {cfg.gamma2} but pay for all {shared} drafts "
                "(train the controller with --gamma2-max to match)")
        target = VLLMBackend(target_path, VLLMConfig(tensor_parallel_size=models.tensor_parallel_size,
                                                     spec_method=models.sd_method, spec_model=draft_path,
                                                     shared_spec_tokens=shared,
                                                     heterogeneous_vocab=paths.heterogeneous_vocab,
                                                     gpu_memory_utilization=engine_share(plan, "target"),
                                                     max_engines=len(paths.target_engines) if plan else None,
                                                     **common),
                             name="target")
        draft_backend = (VLLMBackend(draft_path, VLLMConfig(gpu_memory_utilization=engine_share(plan, "draft"), **common),
                                     name="draft") if draft_path else None)
        ver = _build_verifier(models, cfg, verifier, target, judge_dir,
                              lambda path: VLLMBackend(path, VLLMConfig(gpu_memory_utilization=engine_share(plan, "judge"),
                                                                        **common), name="judge"))
        return cls(LookaheadDecoder(target, draft_backend, ver, cfg, controller=priced(ver, shared)), models)

    @classmethod
    def _from_configs_hf(cls, models: ModelConfig, cfg: DecodeConfig, target_path: str, draft_path: str | None,
                         verifier, judge_dir: str | None, controller_for) -> Decoder:
        """The transformers backend: one draft model serves LR drafting and SD; the controller
        is ``controller_for(verifier)``."""
        from lrtune.backends.hf import HFBackend, HFConfig

        if models.sd_method != "draft":
            raise ConfigError("the transformers backend does token-level SD with the draft model only (--sd-method draft)")
        hcfg = HFConfig(device=models.device, dtype=models.dtype, seed=cfg.seed)
        draft = HFBackend(draft_path, hcfg, name="draft") if draft_path else None
        target = HFBackend(target_path, hcfg, name="target", spec=draft)
        ver = _build_verifier(models, cfg, verifier, target, judge_dir, lambda path: HFBackend(path, hcfg, name="judge"))
        return cls(LookaheadDecoder(target, draft, ver, cfg, controller=controller_for(ver)), models)

    @property
    def target(self) -> Backend:
        """The target engine (token ids in, :class:`GenBatch` out)."""
        return self.decoder.target

    @property
    def draft(self) -> Backend | None:
        """The draft engine (None when only target-only / EAGLE methods were loaded)."""
        return self.decoder.draft

    @property
    def verifier(self) -> Verifier:
        """The configured verifier (``LookaheadDecoder.decode_many(..., verifier=...)`` takes
        another per call)."""
        return self.decoder.verifier

    def encode(self, prompt: str | Sequence[int], *, chat: bool = True) -> list[int]:
        """Token ids of ``prompt``: a text (the chat template applied unless ``chat=False``)
        or already token ids (passed through, checked against the vocabulary)."""
        if not isinstance(prompt, str):
            ids = list(prompt)
            vocab = getattr(self.decoder.target, "vocab_size", None)
            if not ids or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids) or (
                    vocab is not None and max(ids) >= vocab):
                raise ConfigError("a token-id prompt must be a non-empty list of ids the target's vocabulary holds")
            return ids
        if not prompt or not prompt.strip():
            raise ConfigError("empty prompt")
        return self.decoder.target.encode_prompt(prompt, chat=chat)

    def generate(self, prompts: str | Sequence[int] | Sequence[str | Sequence[int]], *, chat: bool = True,
                 on_step: Callable[[int, str, str], None] | None = None, max_concurrent: int = 1,
                 **overrides) -> Outputs:
        """Decode prompts, ``max_concurrent`` at a time (batched: one engine call per round for
        all of them; greedy outputs equal decoding each alone). A prompt is a text or a list of
        token ids (one prompt of ids: ``generate([ids])``). ``overrides`` are
        :class:`DecodeConfig` fields (``max_new_tokens``, ``temperature``, ``top_p``, ``seed``,
        ``method``, ``gamma1``, ``gamma2``, ``schedule``, ...).

        ``on_step(prompt_index, source, text)`` streams every committed step as it lands. A
        prompt that cannot run (too long for ``max_model_len``) fails alone: its output has
        ``finish == "error"`` and ``error`` says why; the others are decoded (when no prompt
        can run, :class:`ConfigError` is raised with the first reason). Returns
        :class:`Outputs`: the outputs in order, with the set's throughput record as ``.batch``.
        """
        prompts = prompt_list(prompts)
        if not isinstance(chat, bool):
            raise ConfigTypeError(f"chat: True or False, got {chat!r}")
        if on_step is not None and not callable(on_step):
            raise ConfigTypeError(f"on_step: a function (prompt_index, source, text), got {type(on_step).__name__}")
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int):
            raise ConfigTypeError(f"max_concurrent: an integer >= 1, got {max_concurrent!r}")
        unknown = set(overrides) - set(DecodeConfig.__dataclass_fields__)
        if unknown:
            raise ConfigError(f"unknown decode option(s): {', '.join(sorted(unknown))}")
        cfg = replace(self.decoder.config, **overrides).validate()
        if cfg.uses_lr and self.decoder.draft is None:
            raise ConfigError(f"method {cfg.method!r} needs the draft model; load with a draft")
        encoded = [self.encode(p, chat=chat) for p in prompts]
        self.start_engines(cfg)
        cb = None
        if on_step is not None:
            def cb(i: int, source: str, step_ids: list[int]) -> None:
                on_step(i, source, self.decoder.target.decode(step_ids, skip_special_tokens=True))
        problems = [ProblemInfo(id=f"prompt-{i}-{stable_digest(p)}", prompt_tokens=len(ids),
                                text=p if isinstance(p, str) else self.decoder.target.decode(ids, skip_special_tokens=True))
                    for i, (p, ids) in enumerate(zip(prompts, encoded))]
        results, batch = self.decoder.decode_many(
            encoded, cfg, max_concurrent=max_concurrent, max_len=self.models.max_model_len, problems=problems,
            on_commit=cb)
        if all(isinstance(r, Failed) for r in results):
            raise results[0].error
        outs = []
        for prompt, ids, res in zip(prompts, encoded, results):
            if isinstance(res, Failed):
                outs.append(DecodeOutput(prompt=prompt, text="", token_ids=[], finish="error",
                                         stats=DecodeStats(prompt_tokens=len(ids)), steps=[], error=res.message))
            else:
                r, stats = res
                outs.append(DecodeOutput(prompt=prompt, text=r.text, token_ids=r.token_ids, finish=r.finish,
                                         stats=stats, steps=r.steps))
        self.last_batch = batch
        return Outputs(outs, batch)

    def start_engines(self, cfg: DecodeConfig) -> None:
        """Start the engines ``cfg`` needs now, so their start-up is not billed to a decode."""
        self.target.start(cfg.gamma2 if cfg.uses_sd else 0)
        if cfg.uses_lr and self.draft is not None:
            self.draft.start(0)

    def close(self) -> None:
        """Release the engines (vLLM keeps them until the process ends: see VLLMBackend.close)."""
        self.decoder.target.close()
        if self.decoder.draft is not None:
            self.decoder.draft.close()
