"""Engines of one process share a model's weights (lrtune.backends.vllm_shared), checked on
plain module trees; tests/test_vllm_backend.py checks it on real engines."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from lrtune.backends import vllm_shared as vs  # noqa: E402


class Attn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(1), requires_grad=False)
        self.kv_cache = []  # what marks an attention layer: each engine keeps its own


class Block(torch.nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)
        self.attn = Attn()


def holder_block() -> Block:
    """A block as an engine holds it after loading: the linear packed (its weight dropped)."""
    b = Block()
    b.proj.cpu_linear = lambda x, weight, bias: x  # stands for the packed GEMM closure
    b.proj.weight = torch.nn.Parameter(torch.empty(0), requires_grad=False)
    return b


def test_a_shared_tree_takes_every_parameter_and_packed_gemm_but_keeps_its_attention():
    source, model = holder_block(), Block()
    shared = vs.share_weights(model, source)
    assert model.proj.weight is source.proj.weight and model.proj.bias is source.proj.bias
    assert model.norm.weight is source.norm.weight and model.proj.cpu_linear is source.proj.cpu_linear
    assert model.attn.scale is not source.attn.scale
    assert shared == 4  # proj weight + bias, norm weight + bias


def test_trees_that_differ_are_refused_by_name():
    source, model = holder_block(), Block(width=4)
    with pytest.raises(ValueError, match="proj.bias"):
        vs.share_weights(model, source)
    with pytest.raises(ValueError, match="differs"):
        vs.share_weights(torch.nn.Sequential(torch.nn.Linear(2, 2)), holder_block())


def config(path, dtype="torch.bfloat16", quantization=None):
    return SimpleNamespace(
        model=str(path), dtype=dtype, quantization=quantization, hf_config=SimpleNamespace(architectures=["X"])
    )


def test_a_holder_serves_the_same_checkpoint_and_dtype_only_while_it_lives(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "m")
    model = torch.nn.Linear(2, 2)
    assert vs.publish(model, config(tmp_path / "m"))
    assert vs.holder(config(tmp_path / "link")) is model  # the same checkpoint by another path
    assert vs.holder(config(tmp_path / "m", dtype="torch.float32")) is None
    assert vs.holder(config(tmp_path / "m", quantization="w8a8")) is None
    assert not vs.publish(torch.nn.Linear(2, 2), config(tmp_path / "q", quantization="w8a8"))
    del model
    import gc

    gc.collect()
    assert vs.holder(config(tmp_path / "m")) is None  # a closed engine's model is not kept alive
