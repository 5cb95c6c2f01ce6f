"""The CPU memory plan (lrtune.cpumemory): planned before any model loads, a budget refused in one line."""

from __future__ import annotations

from pathlib import Path

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


def test_engines_sharing_the_targets_weights_plan_one_copy_of_them():
    kw = dict(target_engines=(0, 4, 6), draft_engine=True, spec_bytes=GIB, kv_cache_gib=1, judge_bytes=4 * GIB)
    own = cpumemory.plan_vllm(4 * GIB, GIB, **kw)
    shared = cpumemory.plan_vllm(4 * GIB, GIB, draft_shared=True, target_shared=True, judge_is_target=True, **kw)
    first = cpumemory.engine_gib(4 * GIB, 1)
    assert shared.parts["target engine"] == own.parts["target engine"] == pytest.approx(first, abs=0.01)
    # the first SD engine holds the drafter's copy; later engines hold only their own overhead and KV cache
    assert shared.parts["target SD engine (γ2 4)"] == pytest.approx(cpumemory.engine_gib(GIB, 1), abs=0.01)
    for name in ("target SD engine (γ2 6)", "draft engine", "judge engine"):
        assert shared.parts[name] == pytest.approx(cpumemory.engine_gib(0, 1), abs=0.01)
    assert own.total_gib - shared.total_gib == pytest.approx(cpumemory.ENGINE_FACTOR * (4 + 4 + 1 + 1 + 4), abs=0.05)


def test_a_judge_of_another_model_is_planned_with_its_own_weights():
    kw = dict(target_engines=(4,), draft_engine=False, spec_bytes=GIB, kv_cache_gib=1, judge_bytes=2 * GIB)
    plan = cpumemory.plan_vllm(4 * GIB, GIB, target_shared=True, judge_is_target=False, **kw)
    assert plan.parts["judge engine"] == pytest.approx(cpumemory.engine_gib(2 * GIB, 1), abs=0.01)


def test_a_draft_engine_without_an_sd_engine_holds_the_drafts_weights_itself():
    plan = cpumemory.plan_vllm(
        4 * GIB, GIB, target_engines=(0,), draft_engine=True, spec_bytes=GIB, kv_cache_gib=1, draft_shared=True
    )
    assert plan.parts["draft engine"] == pytest.approx(cpumemory.engine_gib(GIB, 1), abs=0.01)


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
    models = ModelConfig(
        target=str(pair.target), draft=str(pair.draft), max_model_len=1024, verifier="exact", kv_cache_gib=0.25
    )
    resolved = check_configs(models, DecodeConfig(method="lr+sd", gamma1=2, gamma2=2), progress=False)
    assert resolved.cpu_memory is not None and "draft engine" in resolved.cpu_memory.parts
    with pytest.raises(ConfigError, match="--memory-budget-gib 0.5: this run needs about"):
        check_configs(
            ModelConfig(
                target=str(pair.target),
                draft=str(pair.draft),
                max_model_len=1024,
                verifier="exact",
                memory_budget_gib=0.5,
            ),
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
        ModelConfig(
            target=str(pair.target), draft=str(pair.draft), max_model_len=1024, verifier="exact", kv_cache_gib=0.3
        ),
        cfg,
        progress=False,
    ).kv_gib
    assert given == {"target": 0.3, "draft": 0.3}


def _model_dir(root, name: str, dtype: str, size: int):
    import json

    d = root / name
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "torch_dtype": dtype,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "hidden_size": 64,
            }
        )
    )
    with open(d / "model.safetensors", "wb") as f:  # sparse: its size without writing its bytes
        f.truncate(size)
    return str(d)


@pytest.mark.parametrize("saved, float32, held", [("bfloat16", True, 2), ("bfloat16", False, 1), ("float32", True, 1)])
def test_a_16_bit_checkpoint_run_in_float32_is_held_at_twice_its_files_bytes(tmp_path, saved, float32, held):
    from lrtune.memory import held_weight_bytes

    assert held_weight_bytes(_model_dir(tmp_path, "m", saved, 1000), float32=float32) == held * 1000


def test_the_runs_plan_counts_bf16_weights_twice_where_vllm_runs_them_in_float32(tmp_path, monkeypatch):
    """AVX2 (no native bf16): vLLM runs the bf16 default pair in float32; a profile there held
    13.3 GiB where the plan had said 6.5 (benchmarks/memory/avx2_float32)."""
    import lrtune.backends.vllm as vllm_backend
    from lrtune.build import cpu_memory_plan
    from lrtune.decoder import DecodeConfig
    from lrtune.modelconfig import ModelConfig

    target, draft = _model_dir(tmp_path, "t", "bfloat16", GIB), _model_dir(tmp_path, "d", "bfloat16", GIB // 4)
    models = ModelConfig(target=target, draft=draft, verifier="exact")
    cfg = DecodeConfig(method="lr", gamma1=3)
    monkeypatch.setattr(vllm_backend, "on_cpu_platform", lambda: True)
    plans = {}
    for native in (True, False):
        monkeypatch.setattr(vllm_backend, "cpu_has_native_bf16", lambda native=native: native)
        plans[native] = cpu_memory_plan(
            models, cfg, target, draft, None, (0,), on_gpu=False, kv={"target": 0.5, "draft": 0.5}
        )
    f = cpumemory.ENGINE_FACTOR
    assert plans[False].parts["target engine"] - plans[True].parts["target engine"] == pytest.approx(f, abs=0.01)
    # LR without SD: no drafter to share, so the draft's own engine holds the draft's weights
    assert plans[False].parts["draft engine"] - plans[True].parts["draft engine"] == pytest.approx(f / 4, abs=0.01)
    assert plans[True].parts["draft engine"] == pytest.approx(cpumemory.engine_gib(GIB // 4, 0.5), abs=0.01)


def _linear_model_dir(root, name: str, rows: int, cols: int) -> str:
    """A float32 model directory whose one weight is a linear layer's rows x cols matrix: a real
    safetensors header, the data sparse (its size without writing its bytes)."""
    import json
    import struct

    d = Path(_model_dir(root, name, "float32", 0))
    header = json.dumps(
        {
            "model.layers.0.mlp.up_proj.weight": {
                "dtype": "F32",
                "shape": [rows, cols],
                "data_offsets": [0, 4 * rows * cols],
            }
        }
    ).encode()
    with open(d / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + 4 * rows * cols)
    return str(d)


def test_a_quantized_targets_engines_each_hold_their_copy_in_the_plan(tmp_path, monkeypatch):
    """Engines of one process share only unquantized weights (lrtune.backends.vllm_shared): with a
    target copy, a second target engine (an SD engine beside the plain one) holds the copy again;
    the copy is counted from the source's header before it is built (int8 rows + a float32 scale each)."""
    import lrtune.backends.vllm as vllm_backend
    from lrtune.build import cpu_memory_plan
    from lrtune.decoder import DecodeConfig
    from lrtune.modelconfig import ModelConfig

    rows, cols = 2**14, 2**14  # 1 GiB in float32, a quarter of it as int8
    target = _linear_model_dir(tmp_path, "t", rows, cols)
    models = ModelConfig(target=target, verifier="exact")
    monkeypatch.setattr(vllm_backend, "on_cpu_platform", lambda: True)
    cfg = DecodeConfig(method="target")
    kv = {"target": 0.5}
    shared = cpu_memory_plan(models, cfg, target, None, None, (0, 4), on_gpu=False, kv=kv)
    copies = cpu_memory_plan(models, cfg, target, None, None, (0, 4), on_gpu=False, kv=kv, target_quantized=True)
    source, copy = 4 * rows * cols / GIB, (rows * cols + 4 * rows) / GIB
    expected = cpumemory.ENGINE_FACTOR * (2 * copy - source)  # two engines hold the copy; one held the source
    assert copies.total_gib - shared.total_gib == pytest.approx(expected, abs=0.03)
