"""The CPU memory plan (lrtune.cpumemory): planned before any model loads, a budget refused in one line."""

from __future__ import annotations

import pytest

from lrtune import cpumemory
from lrtune.errors import ConfigError

GIB = 2**30


def test_an_engine_is_planned_as_its_weights_times_the_measured_factor_plus_overhead_and_kv():
    assert cpumemory.engine_gib(2 * GIB, 0.5) == pytest.approx(
        cpumemory.ENGINE_FACTOR * 2 + cpumemory.ENGINE_OVERHEAD_GIB + 0.5
    )


@pytest.mark.parametrize("name", ["release_trim", "shared", "shared_autokv"])
def test_the_default_pairs_plan_bounds_what_its_engines_measured_within_a_quarter_gib(name):
    """benchmarks/memory/*.json: the plan is an upper bound of each engine, and close (KV caches,
    shared weights and heap trimming as the run had them)."""
    import json
    from pathlib import Path

    run = json.loads((Path(__file__).parents[1] / "benchmarks" / "memory" / f"{name}.json").read_text())
    w = run["weights_gib"]
    rows = {p["part"]: p for p in run["parts"]}
    sd, draft = rows["target SD engine (target + draft copy, γ2 4)"], rows["draft engine"]
    plan = cpumemory.plan_vllm(
        int(w["target"] * GIB),
        int(w["draft"] * GIB),
        target_engines=(4,),
        draft_engine=True,
        spec_bytes=int(w["draft"] * GIB),
        kv_cache_gib=sd["kv_cache_gib"],
        draft_kv_gib=draft["kv_cache_gib"],
        draft_shared=draft["shared_weights"],
    )
    assert sd["growth_gib"] <= plan.parts["target SD engine (γ2 4)"] <= sd["growth_gib"] + 0.25
    assert draft["growth_gib"] <= plan.parts["draft engine"] <= draft["growth_gib"] + 0.25
    assert run["total_gib"] <= plan.total_gib <= run["total_gib"] + 0.5
    assert plan.total_gib == pytest.approx(plan.base_gib + sum(plan.parts.values()))


def test_each_engine_the_run_starts_is_counted_and_no_other():
    plan = cpumemory.plan_vllm(GIB, GIB, target_engines=(0, 2, 6), draft_engine=False, spec_bytes=GIB, kv_cache_gib=1)
    assert set(plan.parts) == {"target engine", "target SD engine (γ2 2)", "target SD engine (γ2 6)"}
    assert plan.parts["target SD engine (γ2 2)"] > plan.parts["target engine"]


def test_a_draft_engine_sharing_the_drafters_weights_is_planned_without_them():
    kw = dict(target_engines=(4,), draft_engine=True, spec_bytes=GIB, kv_cache_gib=1)
    own = cpumemory.plan_vllm(4 * GIB, GIB, **kw)
    shared = cpumemory.plan_vllm(4 * GIB, GIB, draft_shared=True, **kw)
    assert own.parts["draft engine"] - shared.parts["draft engine"] == pytest.approx(cpumemory.ENGINE_FACTOR, abs=0.01)
    assert shared.parts["target SD engine (γ2 4)"] == own.parts["target SD engine (γ2 4)"]


def test_a_plan_over_the_budget_is_one_line_naming_every_part():
    plan = cpumemory.plan_vllm(4 * GIB, GIB, target_engines=(4,), draft_engine=True, spec_bytes=GIB, kv_cache_gib=1)
    cpumemory.check_budget(plan, None)
    cpumemory.check_budget(plan, plan.total_gib + 0.1)
    with pytest.raises(ConfigError) as e:
        cpumemory.check_budget(plan, 4.0)
    msg = str(e.value)
    assert "\n" not in msg and "--memory-budget-gib 4" in msg and "draft engine" in msg and "target SD engine" in msg


def test_the_budget_is_checked_with_the_configs_before_any_engine_starts(monkeypatch):
    import lrtune.backends.vllm as vllm_backend
    from lrtune.build import check_configs
    from lrtune.decoder import DecodeConfig
    from lrtune.modelconfig import ModelConfig
    from lrtune.toymodels import get_tiny_pair

    monkeypatch.setattr(vllm_backend.VLLMBackend, "_make_engine", lambda *a: pytest.fail("an engine started"))
    pair = get_tiny_pair()
    models = ModelConfig(target=str(pair.target), draft=str(pair.draft), verifier="exact", kv_cache_gib=0.25)
    resolved = check_configs(models, DecodeConfig(method="lr+sd", gamma1=2, gamma2=2), progress=False)
    assert resolved.cpu_memory is not None and "draft engine" in resolved.cpu_memory.parts
    with pytest.raises(ConfigError, match="--memory-budget-gib 0.5: this run needs about"):
        check_configs(
            ModelConfig(target=str(pair.target), draft=str(pair.draft), verifier="exact", memory_budget_gib=0.5),
            DecodeConfig(method="lr+sd", gamma1=2, gamma2=2),
            progress=False,
        )


def test_a_tokens_kv_is_k_and_v_in_every_layer_for_each_kv_head():
    assert cpumemory.kv_bytes_per_token(28, 2, 128, 2) == 28 * 1024  # the default 1.5B target in bf16


def test_an_automatic_kv_cache_holds_four_full_sequences_and_at_most_a_gib():
    per_token = 40 * 1024  # the default SD engine: target 28 KiB + drafter 12 KiB
    assert cpumemory.auto_kv_gib(per_token, 1536) == pytest.approx(40 * 1024 * 1536 * 4 / GIB, abs=1 / 1024)
    assert cpumemory.auto_kv_gib(per_token, 65536) == cpumemory.KV_CAP_GIB
    assert cpumemory.auto_kv_gib(0, 1536) == cpumemory.KV_CAP_GIB  # shapes unknown: the old default


def test_kv_shape_reads_config_json_and_derives_the_head_dim():
    from lrtune.filekinds import ModelSideConfig

    qwen = ModelSideConfig(num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2, hidden_size=1536)
    assert qwen.kv_shape == (28, 2, 128)
    assert ModelSideConfig(num_hidden_layers=2, num_attention_heads=4, head_dim=8).kv_shape == (2, 4, 8)
    assert ModelSideConfig(vocab_size=10).kv_shape is None


def test_each_engine_gets_the_kv_cache_of_its_own_models_unless_one_is_given():
    from lrtune.build import check_configs
    from lrtune.decoder import DecodeConfig
    from lrtune.modelconfig import ModelConfig
    from lrtune.toymodels import get_tiny_pair

    pair = get_tiny_pair()
    cfg = DecodeConfig(method="lr+sd", gamma1=2, gamma2=2)
    auto = check_configs(
        ModelConfig(target=str(pair.target), draft=str(pair.draft), verifier="exact", max_model_len=512),
        cfg,
        progress=False,
    ).kv_gib
    assert 0 < auto["draft"] < auto["target"] < cpumemory.KV_CAP_GIB  # the SD engine also caches its drafter
    given = check_configs(
        ModelConfig(target=str(pair.target), draft=str(pair.draft), verifier="exact", kv_cache_gib=0.3),
        cfg,
        progress=False,
    ).kv_gib
    assert given == {"target": 0.3, "draft": 0.3}
