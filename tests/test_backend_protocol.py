"""Every engine follows the :class:`lrtune.backends.base.Backend` protocol exactly: the
members callers use exist with the protocol's parameters (no ``getattr`` fallbacks)."""

from __future__ import annotations

import inspect

import pytest

from fake_backend import FakeBackend
from lrtune.backends.base import Backend
from lrtune.backends.hf import HFBackend

METHODS = [n for n, v in vars(Backend).items() if inspect.isfunction(v) and not n.startswith("_")]
ATTRS = list(Backend.__annotations__)


def _classes():
    out = [HFBackend, FakeBackend]
    try:
        from lrtune.backends.vllm import VLLMBackend
    except ImportError:  # the transformers-only install
        return out
    return [*out, VLLMBackend]


def test_the_protocol_is_small():
    assert sorted(METHODS) == ["close", "decode", "encode_prompt", "generate", "start"]
    assert sorted(ATTRS) == ["concurrent_safe", "eos_ids", "name"]


@pytest.mark.parametrize("cls", _classes(), ids=lambda c: c.__name__)
def test_every_backend_has_the_protocols_methods_with_its_parameters(cls):
    for name in METHODS:
        want = list(inspect.signature(getattr(Backend, name)).parameters)
        got = list(inspect.signature(getattr(cls, name)).parameters)
        assert got == want, f"{cls.__name__}.{name}{got} != protocol {want}"
    assert isinstance(cls.concurrent_safe, bool)


def test_rows_that_differ_only_in_budget_seed_or_scored_span_share_one_loop():
    from lrtune.backends.base import GenParams, row_groups

    rows = [GenParams(8), GenParams(4, score_from=3, seeds=(1,)), GenParams(8, num_speculative_tokens=2)]
    assert list(row_groups(rows).values()) == [[0, 1], [2]]
