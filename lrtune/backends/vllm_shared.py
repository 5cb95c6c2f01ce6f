"""Engines of one process share the weights of a model they both load (vLLM on the CPU).

LR runs the draft twice over: as the drafter inside the target's SD engine and in its own
engine for the draft steps. vLLM engines share nothing, so each holds the draft's weights
(1.4 GiB for the default 0.5B in bf16, packed for oneDNN). On the CPU lrtune runs every engine
in its own process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so the second engine can take the
first one's tensors instead of loading its own.

:class:`SharedWeightsLoader` is a vLLM model loader (registered as ``load_format
"lrtune_shared"`` through vLLM's public ``register_model_loader``). For a model some engine of
this process already holds (same path, dtype and no quantization; :func:`publish` after each
engine starts), it builds the module tree as vLLM does (``torch.empty`` parameters, never
written, so never resident) and then points every parameter and packed GEMM
(``cpu_linear``) at the holder's; attention layers keep their own state (each engine has its
own KV cache). Any other model loads from disk as usual. The model it shares records where
from (``_lrtune_shared_from``), and the worker probe reports it.
"""

from __future__ import annotations

import os
import weakref

LOAD_FORMAT = "lrtune_shared"
_HOLDERS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # key -> nn.Module


def model_key(model_config) -> tuple | None:
    """What two loads must agree on to share weights: the checkpoint's real path, the dtype
    and the architecture; None for a quantized model (its layers carry kernel state)."""
    if getattr(model_config, "quantization", None):
        return None
    arch = tuple(getattr(model_config.hf_config, "architectures", None) or ())
    return (os.path.realpath(str(model_config.model)), str(model_config.dtype), arch)


def _unquantized(model) -> bool:
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    methods = (getattr(m, "quant_method", None) for m in model.modules())
    return all(q is None or isinstance(q, (UnquantizedLinearMethod, UnquantizedEmbeddingMethod)) for q in methods)


def publish(model, model_config) -> bool:
    """Offer a started engine's ``model`` to later loads in this process (True when taken)."""
    key = model_key(model_config)
    if key is None or model is None or not _unquantized(model):
        return False
    _HOLDERS.setdefault(key, model)
    return True


def holder(model_config):
    """The module tree this process holds for ``model_config``'s weights, or None."""
    key = model_key(model_config)
    return None if key is None else _HOLDERS.get(key)


def _is_attention(module) -> bool:
    from vllm.model_executor.layers.attention import is_deferred_attention_layer

    return is_deferred_attention_layer(module) or hasattr(module, "kv_cache")


def share_weights(model, source) -> int:
    """Point ``model``'s parameters and packed GEMMs at ``source``'s (same architecture),
    module by module, attention layers excepted; the number of parameters shared. Raises
    ValueError where the trees differ."""
    sources = dict(source.named_modules())
    shared = 0
    own: list[str] = []  # attention layers and what they hold
    for name, module in model.named_modules():
        if _is_attention(module) or any(name.startswith(p + ".") for p in own):
            own.append(name)
            continue
        src = sources.get(name)
        if src is None or type(src) is not type(module):
            raise ValueError(f"module {name or '<root>'} differs from the holder's")
        for pname, param in list(module._parameters.items()):
            theirs = src._parameters.get(pname)
            if param is None:
                continue
            packed_away = theirs is not None and theirs.numel() == 0 and hasattr(src, "cpu_linear")
            if theirs is None or (theirs.shape != param.shape and not packed_away) or theirs.dtype != param.dtype:
                raise ValueError(f"parameter {name}.{pname} differs from the holder's")
            module._parameters[pname] = theirs
            shared += 1
        if hasattr(src, "cpu_linear"):
            module.cpu_linear = src.cpu_linear
    return shared


def _finish_own_layers(model, model_config) -> None:
    """vLLM's post-load step for the layers a shared model keeps (attention), and the model's
    own hook; the shared layers were processed by the holder."""
    from vllm.model_executor.layers.attention import is_deferred_attention_layer

    for module in model.modules():
        if is_deferred_attention_layer(module):
            module.process_weights_after_loading(model_config.dtype)
    if hasattr(model, "process_weights_after_loading"):
        model.process_weights_after_loading()


def register_loader() -> None:
    """Register :class:`SharedWeightsLoader` with vLLM (idempotent)."""
    from dataclasses import replace

    import torch
    from vllm.model_executor.model_loader import BaseModelLoader, DefaultModelLoader, register_model_loader
    from vllm.utils.torch_utils import set_default_torch_dtype

    global SharedWeightsLoader
    if SharedWeightsLoader is not None:
        return

    @register_model_loader(LOAD_FORMAT)
    class _Loader(BaseModelLoader):
        """vLLM's default loader (``load_format="auto"``), except for a model this process
        already holds: then the new tree takes the holder's tensors (module docstring)."""

        def __init__(self, load_config) -> None:
            super().__init__(load_config)
            self.default = DefaultModelLoader(replace(load_config, load_format="auto"))

        def download_model(self, model_config) -> None:
            self.default.download_model(model_config)

        def load_weights(self, model, model_config) -> None:
            self.default.load_weights(model, model_config)

        def load_model(self, vllm_config, model_config, prefix: str = ""):
            source = holder(model_config)
            if source is None:
                return self.default.load_model(vllm_config, model_config, prefix)
            with set_default_torch_dtype(model_config.dtype), torch.device(vllm_config.device_config.device):
                model = self.create_model(vllm_config=vllm_config, model_config=model_config, prefix=prefix)
            share_weights(model, source)
            _finish_own_layers(model, model_config)
            model._lrtune_shared_from = id(source)
            return model.eval()

    SharedWeightsLoader = _Loader


SharedWeightsLoader = None  # the registered class, once register_loader ran


def runner_models(runner) -> dict:
    """A vLLM model runner's loaded modules: ``model`` (the target) and ``drafter`` (its SD
    draft model, when speculating with one), None where it has none."""
    return {
        "model": getattr(runner, "model", None),
        "drafter": getattr(getattr(runner, "drafter", None), "model", None),
    }


def shared_report(runner) -> dict:
    """For the worker probe: which of a runner's models took another engine's weights."""
    return {name: hasattr(m, "_lrtune_shared_from") for name, m in runner_models(runner).items() if m is not None}
