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


@pytest.mark.parametrize("name", ["default", "kv025"])
def test_the_default_pairs_plan_is_at_most_a_gib_above_what_its_engines_measured(name):
    """benchmarks/memory/breakdown_*.json: the plan is an upper bound of each engine, and close."""
    import json
    from pathlib import Path

    run = json.loads((Path(__file__).parents[1] / "benchmarks" / "memory" / f"breakdown_{name}.json").read_text())
    w, kv = run["weights_gib"], run["options"]["kv_cache_gib"]
    plan = cpumemory.plan_vllm(
        int(w["target"] * GIB),
        int(w["draft"] * GIB),
        target_engines=(4,),
        draft_engine=True,
        spec_bytes=int(w["draft"] * GIB),
        kv_cache_gib=kv,
    )
    grown = {p["part"]: p["growth_gib"] for p in run["parts"]}
    sd, draft = grown["target SD engine (target + draft copy, γ2 4)"], grown["draft engine"]
    assert sd <= plan.parts["target SD engine (γ2 4)"] <= sd + 1.0
    assert draft <= plan.parts["draft engine"] <= draft + 1.0
    assert run["total_gib"] <= plan.total_gib <= run["total_gib"] + 1.5
    assert plan.total_gib == pytest.approx(plan.base_gib + sum(plan.parts.values()))


def test_each_engine_the_run_starts_is_counted_and_no_other():
    plan = cpumemory.plan_vllm(GIB, GIB, target_engines=(0, 2, 6), draft_engine=False, spec_bytes=GIB, kv_cache_gib=1)
    assert set(plan.parts) == {"target engine", "target SD engine (γ2 2)", "target SD engine (γ2 6)"}
    assert plan.parts["target SD engine (γ2 2)"] > plan.parts["target engine"]


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
