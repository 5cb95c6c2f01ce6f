"""Engine settings chosen by the vLLM backend (no engine started)."""

import json

import pytest

pytest.importorskip("vllm")

from lrtune.backends import vllm as vb  # noqa: E402


@pytest.mark.parametrize(
    "saved, native_bf16, expected",
    [
        ("bfloat16", False, "float32"),  # emulated bf16 batches badly: use float32
        ("float16", False, "float32"),
        ("float32", False, "auto"),
        ("bfloat16", True, "auto"),  # native bf16: keep the checkpoint's dtype
    ],
)
def test_auto_dtype_avoids_emulated_bf16_on_cpu(tmp_path, monkeypatch, saved, native_bf16, expected):
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": saved}))
    monkeypatch.setattr(vb, "on_cpu_platform", lambda: True)
    monkeypatch.setattr(vb, "cpu_has_native_bf16", lambda: native_bf16)
    assert vb.resolve_dtype("auto", str(tmp_path)) == expected


def test_explicit_dtype_is_never_changed(tmp_path, monkeypatch):
    monkeypatch.setattr(vb, "on_cpu_platform", lambda: True)
    monkeypatch.setattr(vb, "cpu_has_native_bf16", lambda: False)
    assert vb.resolve_dtype("bfloat16", str(tmp_path)) == "bfloat16"


def test_sd_counter_sums_engine_stats_and_snapshots_subtract():
    class S:
        def __init__(self, d, t, a, pos):
            self.num_drafts, self.num_draft_tokens, self.num_accepted_tokens = d, t, a
            self.num_accepted_tokens_per_pos = pos

    class Sched:
        def __init__(self, s):
            self.spec_decoding_stats = s

    from vllm.v1.metrics.loggers import StatLoggerBase

    from lrtune.backends.vllm_patches import sd_stat_logger

    c = sd_stat_logger()
    assert isinstance(c, StatLoggerBase)  # vLLM's own interface, not duck typing
    c.record(Sched(S(2, 8, 5, [2, 2, 1, 0])), None)
    before = c.totals.copy()
    c.record(Sched(S(3, 12, 4, [2, 1, 1, 0])), None)
    c.record(Sched(None), None)
    delta = c.totals.minus(before)
    assert (delta.drafts, delta.drafted_tokens, delta.accepted_tokens) == (3, 12, 4)
    assert delta.accepted_by_pos == [2, 1, 1, 0]


def test_the_vllm_internals_lrtune_patches_have_the_shape_the_patches_expect():
    from lrtune.backends.vllm_internals import internals_problems

    assert internals_problems() == []


def test_another_vllm_version_is_refused_with_the_supported_one_named(monkeypatch):
    import vllm

    from lrtune.backends.vllm_patches import SUPPORTED_VLLM, require_supported_vllm
    from lrtune.errors import ConfigError

    require_supported_vllm()  # the installed one
    monkeypatch.setattr(vllm, "__version__", "0.99.1")
    with pytest.raises(ConfigError, match=SUPPORTED_VLLM.replace(".", r"\.")):
        require_supported_vllm()
