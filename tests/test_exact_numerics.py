"""Exact numerics (lrtune.backends.vllm_exact): the pure parts, with no engine.

The engine-level checks (a token's logprob through prefill equals its logprob through decode,
and target = sd = lr/never = lr+sd/never) are in tests/test_exact_engine.py."""

from __future__ import annotations

import pytest
import torch

from lrtune.backends.vllm_exact import (
    GEMM_BLOCK,
    blocked,
    exact_problems,
    exact_requested,
    make_gemms_exact,
    numerics_kwargs,
    per_token_queries,
    row_invariant,
)
from lrtune.errors import ConfigError
from lrtune.modelconfig import ModelConfig


def test_per_token_queries_gives_each_query_token_its_position_and_its_sequence_blocks():
    # request 0: 3 query tokens of a 10-token sequence (positions 7, 8, 9); request 1: one decode
    # token at position 4; request 2: a 2-token prefill (positions 0, 1)
    qsl = torch.tensor([0, 3, 4, 6], dtype=torch.int32)
    seq_lens = torch.tensor([10, 5, 2], dtype=torch.int32)
    table = torch.tensor([[7, 8], [3, 0], [5, 0]], dtype=torch.int32)
    q, s, t = per_token_queries(qsl, seq_lens, table)
    assert q.tolist() == [0, 1, 2, 3, 4, 5, 6] and q.dtype == torch.int32
    assert s.tolist() == [8, 9, 10, 5, 1, 2] and s.dtype == torch.int32
    assert t.tolist() == [[7, 8]] * 3 + [[3, 0]] + [[5, 0]] * 2


def test_per_token_queries_of_decode_only_batches_is_the_identity():
    qsl = torch.tensor([0, 1, 2], dtype=torch.int32)
    seq_lens = torch.tensor([40, 7], dtype=torch.int32)
    table = torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)
    q, s, t = per_token_queries(qsl, seq_lens, table)
    assert torch.equal(q, qsl) and torch.equal(s, seq_lens) and torch.equal(t, table)


def _row_dependent_kernel(x, weight, bias):
    """A matmul whose rows see the row count (a different reduction per M), as a kernel that
    switches tiles with M does: not row-invariant."""
    y = x @ weight.t()
    return y + 1e-3 * x.shape[0]


def test_blocked_calls_take_exactly_block_rows_and_drop_the_padding():
    seen = []

    def kernel(x, weight, bias):
        seen.append(x.shape[0])
        return x @ weight.t()

    w = torch.randn(5, 4)
    x = torch.randn(2, 19, 4)  # leading dims are flattened and restored
    y = blocked(kernel, 8)(x, w, None)
    assert seen == [8] * 5 and y.shape == (2, 19, 5)  # 38 rows: four blocks and one padded
    assert torch.allclose(y, x @ w.t())


def test_a_row_dependent_kernel_fails_the_probe_and_passes_once_blocked():
    w = torch.randn(6, 32)
    assert not row_invariant(_row_dependent_kernel, 32, w, None, torch.float32)
    assert row_invariant(blocked(_row_dependent_kernel, GEMM_BLOCK), 32, w, None, torch.float32)


class _Linear(torch.nn.Module):
    def __init__(self, k: int, n: int, kernel) -> None:
        super().__init__()
        self.input_size_per_partition, self.output_size_per_partition = k, n
        self.weight = torch.nn.Parameter(torch.randn(n, k), requires_grad=False)
        self.bias = None
        self.cpu_linear = kernel


def test_make_gemms_exact_blocks_only_the_shapes_whose_kernel_is_not_row_invariant():
    def invariant(x, weight, bias):  # one row at a time: row-invariant by construction
        return torch.cat([r[None] @ weight.t() for r in x])

    model = torch.nn.Sequential(
        _Linear(16, 8, _row_dependent_kernel), _Linear(16, 8, _row_dependent_kernel), _Linear(8, 4, invariant)
    )
    report = make_gemms_exact(model, torch.float32)
    assert report == {"shapes": 2, "blocked": ["16x8"], "failed": []}
    assert getattr(model[0].cpu_linear, "_lrtune_block", None) == GEMM_BLOCK
    assert getattr(model[1].cpu_linear, "_lrtune_block", None) == GEMM_BLOCK  # same shape: same decision
    assert model[2].cpu_linear is invariant
    again = make_gemms_exact(model, torch.float32)  # idempotent: nothing wrapped twice
    assert again["failed"] == [] and getattr(model[0].cpu_linear, "_lrtune_block") == GEMM_BLOCK


def test_a_kernel_that_depends_on_row_contents_fails_exact_mode():
    def mixing(x, weight, bias):  # each row sees the block's mean: no blocking can fix it
        return x @ weight.t() + 1e-3 * x.mean()

    report = make_gemms_exact(torch.nn.Sequential(_Linear(16, 8, mixing)), torch.float32)
    assert report["failed"] == ["16x8"]
    problems = exact_problems([{"pid": 1, "requested": True, "attention": True, "gemms": {"model": report}}])
    assert len(problems) == 1 and "16x8" in problems[0]


def test_exact_problems_name_a_missing_setting_or_attention_patch():
    ok = {"pid": 1, "requested": True, "attention": True, "builders": ["B"], "gemms": {"model": {"failed": []}}}
    assert exact_problems([ok]) == []
    assert exact_problems([]) != []
    assert "additional_config" in exact_problems([{**ok, "requested": False}])[0]
    assert "attention" in exact_problems([{**ok, "attention": False}])[0]


def test_numerics_kwargs_pass_the_setting_per_engine_and_refuse_what_cannot_apply():
    assert numerics_kwargs("fast", on_cpu=True) == {}
    extra = numerics_kwargs("exact", on_cpu=True)["additional_config"]

    class Cfg:
        additional_config = extra

    assert exact_requested(Cfg)
    with pytest.raises(ConfigError, match="on a GPU"):
        numerics_kwargs("exact", on_cpu=False)
    with pytest.raises(ConfigError, match="numerics"):
        numerics_kwargs("fastest", on_cpu=True)


def test_numerics_option_is_checked_when_the_config_is_built():
    assert ModelConfig().engine.numerics == "fast"
    assert ModelConfig(numerics="exact").engine.numerics == "exact"
    with pytest.raises(ConfigError, match="numerics"):
        ModelConfig(numerics="fastest")
    with pytest.raises(ConfigError, match="--backend vllm"):
        ModelConfig(numerics="exact", backend="transformers")
