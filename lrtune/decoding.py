"""The loaded decoder of the Python API (:class:`Decoder`): models loaded once, ``generate``
decodes prompts with any method, one or many at a time; :class:`DecodeOutput` per prompt."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
import os
from dataclasses import dataclass, replace

from lrtune.backends.base import Backend
from lrtune.build import build_verifier, auto_controller, build_controller, check_configs, prompt_list, verifier_of
from lrtune.control import ProblemInfo
from lrtune.decoder import DecodeConfig, LookaheadDecoder
from lrtune.errors import ConfigError, ConfigTypeError
from lrtune.modelconfig import ModelConfig
from lrtune.slots import Failed, stable_digest
from lrtune.stats import BatchStats, DecodeStats
from lrtune.verifiers import Verifier


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


def checked_token_ids(prompt: Sequence[int], vocab: int | None) -> list[int]:
    """A token-id prompt as a list; ConfigError unless it is a non-empty list of integer ids
    in [0, ``vocab``) (None: no upper bound known)."""
    if isinstance(prompt, bytes) or not isinstance(prompt, Sequence):
        raise ConfigTypeError(f"prompt: a text or a list of token ids, got {type(prompt).__name__}")
    ids = list(prompt)
    if (
        not ids
        or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids)
        or (vocab is not None and max(ids) >= vocab)
    ):
        raise ConfigError("a token-id prompt must be a non-empty list of ids the target's vocabulary holds")
    return ids


class Outputs(list):
    """What :meth:`Decoder.generate` returns: one :class:`DecodeOutput` per prompt, in order,
    and ``batch``, the set's throughput record (:class:`~lrtune.stats.BatchStats`)."""

    def __init__(self, outputs, batch: BatchStats) -> None:
        super().__init__(outputs)
        self.batch = batch


def auto_choice_for(
    models: ModelConfig,
    gamma1: int,
    gamma2: int,
    max_step_tokens: int,
    seed: int,
    profile,
    controller,
    own_verifier: bool,
):
    """What ``method="auto"`` runs for these models (:func:`lrtune.build.auto_choice`), priced
    like the decoder would price an lr+sd run (its shared SD engine, its verifier)."""
    from lrtune import pricing as pricing_mod
    from lrtune.build import auto_choice, shared_spec_tokens

    if controller is not None and not isinstance(controller, str):
        raise ConfigTypeError("controller: method='auto' takes a policy name or a controller directory")
    if profile is not None and not isinstance(profile, (str, os.PathLike)):
        raise ConfigTypeError(f"profile: a path to an lrtune profile JSON, got {type(profile).__name__}")
    cfg = DecodeConfig(method="lr+sd", gamma1=gamma1, gamma2=gamma2, max_step_tokens=max_step_tokens, seed=seed)
    shared = shared_spec_tokens(models, cfg, has_draft=bool(models.draft), load_all_methods=False)
    if models.backend != "vllm":
        shared = 0
    profile = None if profile is None else str(profile)
    plan = pricing_mod.plan(
        profile=profile, engine_drafts=shared, verifier=None if own_verifier else models.verification.parsed
    )
    if controller is not None:
        models = replace(models, controller=controller)
    return auto_choice(models, cfg, plan, profile, own_verifier=own_verifier)


class Decoder:
    """Loads models once; ``generate`` decodes prompts with any method, one or many at a time.
    A context manager: ``with Decoder.from_pretrained(...) as dec:`` closes the engines."""

    def __init__(self, decoder: LookaheadDecoder, models: ModelConfig, memory_plan=None, auto=None) -> None:
        self.decoder = decoder
        self.models = models
        self.memory_plan = memory_plan  # lrtune.cpumemory.CpuMemoryPlan where the engines hold their models in RAM
        self.last_batch: BatchStats | None = None  # the last generate()'s (also its outputs' .batch)
        self.auto = auto  # method="auto": what it chose and why (policies.auto.AutoChoice)
        self.closed = False

    def __enter__(self) -> Decoder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @classmethod
    def from_pretrained(
        cls,
        target: str = "default",
        draft: str = "default",
        *,
        method: str = "lr+sd",
        verifier: str | Verifier = "embedding",
        backend: str = "vllm",
        gamma1: int = 3,
        gamma2: int = 4,
        max_step_tokens: int = 128,
        seed: int = 0,
        verifier_threshold: float | None = None,
        controller=None,
        progress: bool = True,
        profile: str | None = None,
        **model_kwargs,
    ) -> Decoder:
        """Resolve and load target/draft, build the verifier (a kind or a distilled
        checkpoint directory) and the controller (a policy name, a learned controller
        directory, or an object with ``choose``/``update``), return a ready decoder.

        ``method="auto"`` picks target-only, sd or adaptive lr+sd (``controller``, or
        ``bandit``) before any model loads, from the ``lrtune profile`` JSON at ``profile``
        (measured SD, costs) and what the verifier promises (:mod:`policies.auto`); the
        decoder's ``auto`` says what it chose and why.

        ``model_kwargs`` are :class:`ModelConfig` fields (``sd_method``, ``dtype``,
        ``max_model_len``, ``tensor_parallel_size``, ``gpu_memory_utilization``, ``cache_dir``).
        """
        models = _pretrained_models(target, draft, backend, verifier, verifier_threshold, controller, model_kwargs)
        auto = None
        if method == "auto":
            auto = auto_choice_for(
                models,
                gamma1,
                gamma2,
                max_step_tokens,
                seed,
                profile,
                controller,
                own_verifier=not isinstance(verifier, str),
            )
            method = auto.decode_method
            controller = (controller or auto_controller()) if auto.method == "adaptive" else None
        elif profile is not None:
            raise ConfigError("profile: used by method='auto' only")
        cfg = DecodeConfig(
            method=method, gamma1=gamma1, gamma2=gamma2, max_step_tokens=max_step_tokens, seed=seed
        ).validate()
        built = cls.from_configs(models, cfg, verifier=verifier, controller=controller, progress=progress)
        return cls(built.decoder, built.models, built.memory_plan, auto=auto)

    @classmethod
    def from_configs(
        cls,
        models: ModelConfig,
        cfg: DecodeConfig,
        *,
        verifier: str | Verifier | None = None,
        controller=None,
        progress: bool = True,
        load_all_methods: bool = False,
        gamma2s: Iterable[int] = (),
    ) -> Decoder:
        """Build from configs. ``load_all_methods`` loads the draft even for ``target``;
        ``gamma2s`` are the other γ2 values the run will ask for (its memory plan counts their
        engines). A controller named by a policy or a directory is built with the run's pricing
        plan (:mod:`lrtune.pricing`); a controller object handed in is used as it is."""
        for name, flag in (("progress", progress), ("load_all_methods", load_all_methods)):
            if not isinstance(flag, bool):  # a string is not a switch: "no" would read as on
                raise ConfigTypeError(f"{name}: True or False, got {flag!r:.40}")
        spec = controller if controller is not None else models.control.controller
        return cls._from_configs(
            models,
            cfg,
            verifier=verifier,
            progress=progress,
            load_all_methods=load_all_methods,
            gamma2s=tuple(gamma2s),
            controller=build_controller(spec, cfg),
            price_controller=isinstance(spec, str),
        )

    @classmethod
    def _from_configs(
        cls,
        models: ModelConfig,
        cfg: DecodeConfig,
        *,
        verifier,
        progress: bool,
        load_all_methods: bool,
        controller,
        gamma2s: tuple[int, ...] = (),
        price_controller: bool = True,
    ) -> Decoder:
        verifier = verifier_of(models, verifier)  # parsed once for every part built below
        paths = check_configs(
            models,
            cfg,
            verifier=verifier,
            load_all_methods=load_all_methods,
            progress=progress,
            gamma2s=gamma2s,
            controller_gamma2_max=controller.bounds.gamma2_max if controller is not None else 0,
            build=True,  # phase 2: quantized copies are built (and timed) now
        )
        target_path, draft_path, judge_dir = paths.target, paths.draft, paths.judge
        from lrtune import pricing

        def priced(ver, drafts: int = 0):  # the pricing plan, decided once: engine drafts, verifier's needs
            return (
                pricing.priced(controller, pricing.plan(engine_drafts=drafts, verifier=ver))
                if price_controller
                else controller
            )

        if models.backend == "transformers":
            return cls._from_configs_hf(
                models, cfg, target_path, draft_path, verifier, judge_dir, priced, paths.cpu_memory
            )
        target, draft_backend, judge = _vllm_backends(models, cfg, paths)
        ver = build_verifier(models.verification, models.device, cfg, verifier, target, judge_dir, judge)
        shared = paths.shared_spec_tokens
        decoder = LookaheadDecoder(target, draft_backend, ver, cfg, controller=priced(ver, shared))
        return cls(decoder, models, paths.cpu_memory)

    @classmethod
    def _from_configs_hf(
        cls,
        models: ModelConfig,
        cfg: DecodeConfig,
        target_path: str,
        draft_path: str | None,
        verifier,
        judge_dir: str | None,
        controller_for,
        memory_plan=None,
    ) -> Decoder:
        """The transformers backend: one draft model serves LR drafting and SD; the controller
        is ``controller_for(verifier)``."""
        from lrtune.backends.hf import HFBackend, HFConfig

        if models.sd_method != "draft":
            raise ConfigError(
                "the transformers backend does token-level SD with the draft model only (--sd-method draft)"
            )
        hcfg = HFConfig(device=models.device, dtype=models.dtype, seed=cfg.seed)
        draft = HFBackend(draft_path, hcfg, name="draft") if draft_path else None
        target = HFBackend(target_path, hcfg, name="target", spec=draft)
        ver = build_verifier(
            models.verification,
            models.device,
            cfg,
            verifier,
            target,
            judge_dir,
            lambda path: HFBackend(path, hcfg, name="judge"),
        )
        return cls(LookaheadDecoder(target, draft, ver, cfg, controller=controller_for(ver)), models, memory_plan)

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
            return checked_token_ids(prompt, getattr(self.decoder.target, "vocab_size", None))
        if not prompt or not prompt.strip():
            raise ConfigError("empty prompt")
        return self.decoder.target.encode_prompt(prompt, chat=chat)

    def generate(
        self,
        prompts: str | Sequence[int] | Sequence[str | Sequence[int]],
        *,
        chat: bool = True,
        on_step: Callable[[int, str, str], None] | None = None,
        max_concurrent: int = 1,
        **overrides,
    ) -> Outputs:
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
        cfg = self._call_config(chat, on_step, max_concurrent, overrides)
        prompts = prompt_list(prompts)
        encoded = [self.encode(p, chat=chat) for p in prompts]
        self.start_engines(cfg)
        cb = None
        if on_step is not None:

            def cb(i: int, source: str, step_ids: list[int]) -> None:
                on_step(i, source, self.decoder.target.decode(step_ids, skip_special_tokens=True))

        problems = [
            ProblemInfo(
                id=f"prompt-{i}-{stable_digest(p)}",
                prompt_tokens=len(ids),
                text=p if isinstance(p, str) else self.decoder.target.decode(ids, skip_special_tokens=True),
            )
            for i, (p, ids) in enumerate(zip(prompts, encoded))
        ]
        results, batch = self.decoder.decode_many(
            encoded,
            cfg,
            max_concurrent=max_concurrent,
            max_len=self.models.engine.max_model_len,
            problems=problems,
            on_commit=cb,
        )
        if all(isinstance(r, Failed) for r in results):
            raise results[0].error
        outs = [_output(prompt, ids, res) for prompt, ids, res in zip(prompts, encoded, results)]
        self.last_batch = batch
        return Outputs(outs, batch)

    def _call_config(self, chat, on_step, max_concurrent, overrides: dict) -> DecodeConfig:
        """The config of one ``generate`` call, its arguments checked before anything runs."""
        if self.closed:
            raise ConfigError("this Decoder is closed: build another (Decoder.from_pretrained) to decode")
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
        if "schedule" in overrides:  # this call asks a schedule: its method must run it (the decoder's own need not)
            cfg.check_asked()
        if cfg.method != "auto":  # an option this call gives that its method does not read
            from lrtune.consumers import check_read, method_unread

            check_read(method_unread(cfg, self.models, given=set(overrides)))
        if cfg.uses_lr and self.decoder.draft is None:
            raise ConfigError(f"method {cfg.method!r} needs the draft model; load with a draft")
        return cfg

    def start_engines(self, cfg: DecodeConfig) -> None:
        """Start the engines ``cfg`` needs now, so their start-up is not billed to a decode."""
        self.target.start(cfg.sd_gamma2)
        if cfg.uses_lr and self.draft is not None:
            self.draft.start(0)

    def close(self) -> None:
        """Release the engines (vLLM keeps them until the process ends: see VLLMBackend.close);
        ``generate`` afterwards is a ConfigError."""
        self.closed = True
        self.decoder.target.close()
        if self.decoder.draft is not None:
            self.decoder.draft.close()


def _pretrained_models(target, draft, backend, verifier, verifier_threshold, controller, model_kwargs) -> ModelConfig:
    """``from_pretrained``'s :class:`ModelConfig` (``model_kwargs``: its other fields, checked by name)."""
    unknown = sorted(set(model_kwargs) - set(ModelConfig.option_names()))
    if unknown:
        raise ConfigTypeError(
            f"Decoder.from_pretrained() has no option {', '.join(map(repr, unknown))} (model "
            f"options are ModelConfig's: {', '.join(ModelConfig.option_names())})"
        )
    return ModelConfig(
        target=target,
        draft=draft,
        backend=backend,
        verifier=verifier if isinstance(verifier, str) else getattr(verifier, "name", "custom"),
        verifier_threshold=verifier_threshold,
        controller=controller if isinstance(controller, str) else None,
        **model_kwargs,
    )


def _output(prompt, ids: list[int], res) -> DecodeOutput:
    """One prompt's :class:`DecodeOutput`: its result, or ``finish == "error"`` with why it failed."""
    if isinstance(res, Failed):
        stats = DecodeStats(prompt_tokens=len(ids))
        return DecodeOutput(
            prompt=prompt, text="", token_ids=[], finish="error", stats=stats, steps=[], error=res.message
        )
    r, stats = res
    return DecodeOutput(prompt=prompt, text=r.text, token_ids=r.token_ids, finish=r.finish, stats=stats, steps=r.steps)


def _note_shared_drafts(shared: int, cfg: DecodeConfig) -> None:
    """One line when the shared SD engine drafts more tokens than this run's calls verify."""
    if shared > cfg.gamma2 and cfg.uses_sd:
        from lrtune.runfiles import log

        log(
            f"note: the SD engine drafts {shared} tokens per pass (the controller's largest γ2); calls with "
            f"γ2 = {cfg.gamma2} verify only their first {cfg.gamma2} but pay for all {shared} drafts "
            "(train the controller with --gamma2-max to match)"
        )


def _vllm_backends(models: ModelConfig, cfg: DecodeConfig, paths):
    """The vLLM target backend (its engine runs SD with the shared γ2 and serves every method's
    target calls), the draft backend (None without a draft), and how to build a judge backend,
    each with its share of the memory plan."""
    from lrtune.backends.vllm import VLLMBackend, VLLMConfig
    from lrtune.memory import engine_share

    plan = paths.memory
    eng = models.engine
    common = dict(
        dtype=models.dtype,
        max_model_len=eng.max_model_len,
        seed=cfg.seed,
        max_num_batched_tokens=eng.max_num_batched_tokens,
        max_num_seqs=eng.max_num_seqs,
        enforce_eager=eng.enforce_eager,
        share_weights=eng.share_weights,
        numerics=eng.numerics,
    )
    # One SD engine (γ2 = cfg.gamma2) also serves target-only and LR target calls.
    # With a controller, the engine drafts its largest γ2 and smaller ones are cut per request.
    shared = paths.shared_spec_tokens
    _note_shared_drafts(shared, cfg)
    target = VLLMBackend(
        paths.target,
        VLLMConfig(
            tensor_parallel_size=eng.tensor_parallel_size,
            spec_method=models.sd_method,
            spec_model=paths.draft,
            shared_spec_tokens=shared,
            heterogeneous_vocab=paths.heterogeneous_vocab,
            gpu_memory_utilization=engine_share(plan, "target"),
            max_engines=len(paths.target_engines) if plan else None,
            kv_cache_gib=paths.kv_gib["target"],
            **common,
        ),
        name="target",
    )
    draft_backend = (
        VLLMBackend(
            paths.draft,
            VLLMConfig(
                gpu_memory_utilization=engine_share(plan, "draft"), kv_cache_gib=paths.kv_gib["draft"], **common
            ),
            name="draft",
        )
        if paths.draft
        else None
    )

    def judge(path: str) -> VLLMBackend:
        kv = paths.kv_gib.get("judge", paths.kv_gib["target"])
        return VLLMBackend(
            path,
            VLLMConfig(gpu_memory_utilization=engine_share(plan, "judge"), kv_cache_gib=kv, **common),
            name="judge",
        )

    return target, draft_backend, judge
