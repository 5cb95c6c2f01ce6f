"""ModelConfig is split by concern: each sub-config is its own checked type, every option keeps
its one flat name (flags, YAML, keywords, run records), and consumers take their concern."""

from __future__ import annotations

import dataclasses

import pytest

from lrtune.configshape import flat_dict
from lrtune.errors import ConfigError, ConfigTypeError
from lrtune.modelconfig import ControlConfig, EngineConfig, GpuMemoryConfig, ModelConfig, VerifierConfig


def test_flat_options_and_sub_configs_build_the_same_config():
    flat = ModelConfig(target="t", kv_cache_gib=2, gpu_memory_utilization=0.5, verifier="exact", controller="bandit")
    nested = ModelConfig(
        target="t",
        engine=EngineConfig(kv_cache_gib=2, gpu=GpuMemoryConfig(utilization=0.5)),
        verification=VerifierConfig(spec="exact"),
        control=ControlConfig(controller="bandit"),
    )
    assert flat == nested
    assert flat.engine.gpu.utilization == 0.5 and flat.verification.parsed.kind == "exact"


def test_run_records_keep_the_flat_option_names():
    names = set(flat_dict(ModelConfig()))
    assert {
        "kv_cache_gib",
        "gpu_memory_utilization",
        "target_gpu_share",
        "verifier",
        "verifier_threshold",
        "judge_model",
        "controller",
        "shared_engine",
    } <= names
    assert set(ModelConfig.option_names()) == names
    assert not names & {"engine", "gpu", "verification", "control"}


def test_a_flat_option_in_replace_changes_only_that_field_of_its_sub_config():
    base = ModelConfig(kv_cache_gib=3, verifier="exact", judge_model="J")
    changed = dataclasses.replace(base, verifier="embedding", controller="bandit")
    assert changed.verification == VerifierConfig(spec="embedding", judge_model="J")
    assert changed.engine == base.engine and changed.control.controller == "bandit"
    assert base.verification.spec == "exact"  # the original is untouched


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: EngineConfig(kv_cache_gib=-1), "--kv-cache-gib"),
        (lambda: GpuMemoryConfig(utilization=1.5), "--gpu-memory-utilization"),
        (lambda: VerifierConfig(threshold=2.0), "--verifier-threshold"),
        (lambda: ModelConfig(target_gpu_share=0), "--target-gpu-share"),
    ],
)
def test_each_sub_config_is_checked_when_built_naming_the_flag(build, match):
    with pytest.raises(ConfigError, match=match):
        build()


def test_an_unknown_option_or_a_wrong_sub_config_is_one_type_error_naming_it():
    with pytest.raises(ConfigTypeError, match="kv_cache"):
        ModelConfig(kv_cache=2)
    with pytest.raises(ConfigTypeError, match="engine: expected EngineConfig, got VerifierConfig"):
        ModelConfig(engine=VerifierConfig())


def test_the_gpu_memory_plan_takes_the_engine_concern_alone(monkeypatch):
    from lrtune.backends import vllm

    seen = {}
    monkeypatch.setattr(vllm, "gpu_device_bytes", lambda: 80 * 2**30)
    monkeypatch.setattr("lrtune.memory.weight_bytes", lambda path, as_copy=False: 2**30 if path else 0)
    monkeypatch.setattr("lrtune.memory.plan_gpu_memory", lambda sizes, **kw: seen.update(kw) or "plan")
    engine = EngineConfig(tensor_parallel_size=2, gpu=GpuMemoryConfig(utilization=0.8, draft_share=0.1))
    assert vllm.gpu_memory_plan(engine, {"target": "/t", "draft": "/d"}, None) == "plan"
    assert seen["cap"] == 0.8 and seen["fixed"]["draft"] == 0.1 and seen["tensor_parallel_size"] == 2


def test_every_name_the_package_lists_imports_from_it():
    import lrtune

    for name in lrtune.__all__:
        assert getattr(lrtune, name) is not None, name
    from lrtune import EngineConfig as E, ModelConfig as M, Pricing as P  # noqa: F401

    assert M is ModelConfig and E is EngineConfig
