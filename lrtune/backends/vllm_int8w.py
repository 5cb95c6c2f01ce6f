"""Weight-only int8 linears for vLLM on a CPU: the ``lrtune_int8_weights`` quantization method.

A linear layer holds int8 weights ``Q`` (out × in) and one scale per output row ``s`` (a
bfloat16 value, so the product below needs no further rounding), and computes

    y = (x ⊙ bf16) · (s ⊙ Q)ᵀ   in bfloat16 (torch's ``_weight_int8pack_mm``), then y in x's dtype,

so each token reads 1 byte per weight instead of 4 (float32) or 2 (bf16). Activations are not
quantized: unlike W8A8 this needs no int8 dot-product units (VNNI, AMX), which AVX2-only CPUs
lack and without which vLLM's W8A8 GEMM is slower than float32. The output head can be
quantized the same way (``lm_head`` in the config); the embedding table is not.

Registered with vLLM's public ``register_quantization_config`` in every process lrtune's
patches run in (:func:`lrtune.backends.vllm_patches.apply_patches`); a checkpoint selects it
with ``"quantization_config": {"quant_method": "lrtune_int8_weights", "lm_head": bool}``
(:func:`lrtune.quantize.ensure_copy` writes such copies). :func:`methods_in` reports which
linear methods a loaded model really runs, which the engine checks after start-up.
"""

from __future__ import annotations

NAME = "lrtune_int8_weights"
METHOD = "Int8WeightsLinearMethod"
_registered = False


def register() -> None:
    """Register the ``lrtune_int8_weights`` method with vLLM (idempotent)."""
    global _registered
    if _registered:
        return
    import torch
    from vllm.model_executor.layers.linear import LinearBase, LinearMethodBase
    from vllm.model_executor.layers.quantization import register_quantization_config
    from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
    from vllm.model_executor.parameter import ChannelQuantScaleParameter, ModelWeightParameter

    class Int8WeightsLinearMethod(LinearMethodBase):
        """int8 weights with a bf16 scale per output row, bf16 compute (module docstring)."""

        def create_weights(self, layer, input_size_per_partition, output_partition_sizes, *args, **extra):
            loader = extra["weight_loader"]
            rows = sum(output_partition_sizes)
            layer.logical_widths = output_partition_sizes
            weight = ModelWeightParameter(
                data=torch.empty(rows, input_size_per_partition, dtype=torch.int8),
                input_dim=1,
                output_dim=0,
                weight_loader=loader,
            )
            scale = ChannelQuantScaleParameter(
                data=torch.empty((rows, 1), dtype=torch.float32), output_dim=0, weight_loader=loader
            )
            layer.register_parameter("weight", weight)
            layer.register_parameter("weight_scale", scale)

        def process_weights_after_loading(self, layer) -> None:
            w = layer.weight.data.contiguous()
            s = layer.weight_scale.data.reshape(-1).to(torch.bfloat16).contiguous()
            layer.weight = torch.nn.Parameter(w, requires_grad=False)
            layer.weight_scale = torch.nn.Parameter(s, requires_grad=False)

        def apply(self, layer, x, bias=None):
            flat = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
            y = torch.ops.aten._weight_int8pack_mm(flat, layer.weight, layer.weight_scale)
            y = y.to(x.dtype).reshape(*x.shape[:-1], y.shape[-1])
            return y if bias is None else y + bias

    Int8WeightsLinearMethod.__name__ = Int8WeightsLinearMethod.__qualname__ = METHOD

    @register_quantization_config(NAME)
    class Int8WeightsConfig(QuantizationConfig):
        """``lrtune_int8_weights``: every linear layer (and the output head when ``lm_head``)."""

        def __init__(self, lm_head: bool = False) -> None:
            super().__init__()
            self.lm_head = lm_head

        def get_name(self) -> str:
            return NAME

        def get_supported_act_dtypes(self) -> list:
            return [torch.float32, torch.bfloat16, torch.float16]

        @classmethod
        def get_min_capability(cls) -> int:
            return -1

        @staticmethod
        def get_config_filenames() -> list[str]:
            return []

        @classmethod
        def from_config(cls, config: dict) -> Int8WeightsConfig:
            return cls(lm_head=config.get("lm_head") is True)

        def get_quant_method(self, layer, prefix: str):
            if isinstance(layer, ParallelLMHead):
                return Int8WeightsLinearMethod() if self.lm_head else None
            if isinstance(layer, LinearBase):
                return Int8WeightsLinearMethod()
            return None

    _registered = True


def methods_in(model) -> list[str]:
    """Class names of the quantization methods of ``model``'s linear layers and output head
    (what the engine really runs; [] for no model)."""
    if model is None:
        return []
    found = {getattr(m, "quant_method", None) for m in model.modules()}
    return sorted({type(q).__name__ for q in found if q is not None})


def expected_method(model_dir: str) -> str | None:
    """:data:`METHOD` when ``model_dir``'s config selects ``lrtune_int8_weights``, else None."""
    from lrtune.errors import ConfigError
    from lrtune.filekinds import model_side_config

    try:
        q = model_side_config(model_dir).quantization_config
    except ConfigError:
        return None
    return METHOD if isinstance(q, dict) and q.get("quant_method") == NAME else None
