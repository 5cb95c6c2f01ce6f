"""--draft-quantization and --target-quantization: the W8A8 copy (built once, checksummed), its
rules, the auto decision by measurement, the memory plan of a copy, and real vLLM decodes with
an int8 draft and with an int8 target."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from lrtune import quantize
from lrtune.api import Decoder, DecodeConfig, ModelConfig, check_configs
from lrtune.errors import ConfigError, ModelError
from lrtune.toymodels import get_tiny_pair

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def pair():
    return get_tiny_pair()


def _tiny_vllm_models(pair, tmp_path, **options) -> ModelConfig:
    """The tiny pair on vLLM in float32 (the ``never`` verifier unless ``options`` name another)."""
    options = {"verifier": "never", **options}
    return ModelConfig(
        target=str(pair.target),
        draft=str(pair.draft),
        dtype="float32",
        max_model_len=1024,
        # each engine's memory where it is read: the KV cache on a CPU, a GPU share on a GPU
        **({"gpu_memory_utilization": 0.4} if torch.cuda.is_available() else {"kv_cache_gib": 0.25}),
        cache_dir=str(tmp_path),
        **options,
    )


@pytest.fixture(scope="module")
def int8_draft(pair, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return cache, quantize.ensure_copy(pair.draft, cache, progress=False)


def test_rows_round_to_nearest_within_half_a_step():
    w = torch.randn(16, 64) * torch.linspace(0.01, 3.0, 16)[:, None]
    q, s = quantize.quantize_rows(w)
    assert q.dtype == torch.int8 and s.shape == (16, 1) and s.dtype == torch.float32
    assert int(q.abs().max()) == 127  # each row's largest weight maps to ±127
    assert float(((q.float() * s - w).abs() / s).max()) <= 0.5 + 1e-4


def test_copy_quantizes_every_block_linear_and_the_untied_head(pair, int8_draft):
    from safetensors.torch import load_file

    _, d = int8_draft
    tensors = load_file(str(d / "model.safetensors"))
    src = load_file(str(Path(pair.draft) / "model.safetensors"))
    linears = [n for n in src if n.endswith(".weight") and n.split(".")[-2] in quantize.LINEARS]
    assert linears and all(tensors[n].dtype == torch.int8 and n[:-6] + "weight_scale" in tensors for n in linears)
    assert tensors["lm_head.weight"].dtype == torch.int8  # the tiny draft's head is untied
    assert tensors["model.embed_tokens.weight"].dtype == src["model.embed_tokens.weight"].dtype
    cfg = json.loads((d / "config.json").read_text())["quantization_config"]
    assert cfg["quant_method"] == "compressed-tensors" and any(
        "lm_head" in t for t in cfg["config_groups"]["group_0"]["targets"]
    )


def test_copy_is_built_once_and_rebuilt_when_a_weight_file_changes(pair, int8_draft):
    cache, d = int8_draft
    mtime = (d / "model.safetensors").stat().st_mtime_ns
    assert quantize.ensure_copy(pair.draft, cache, progress=False) == d
    assert (d / "model.safetensors").stat().st_mtime_ns == mtime
    with open(d / "model.safetensors", "r+b") as f:  # corrupt one byte of the copy
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))
    assert not quantize._complete(d)
    assert quantize.ensure_copy(pair.draft, cache, progress=False) == d
    assert quantize._complete(d)


def test_int8_on_transformers_is_refused_before_any_model_resolves(tmp_path):
    with pytest.raises(ConfigError, match="--draft-quantization int8 needs --backend vllm"):  # when it is built
        ModelConfig(target=str(tmp_path / "missing"), backend="transformers", draft_quantization="int8")
    models = ModelConfig(target=str(tmp_path / "missing"), backend="transformers")
    models.draft_quantization = "int8"  # changed after it was built: check_configs checks again
    with pytest.raises(ConfigError, match="--draft-quantization int8 needs --backend vllm"):
        check_configs(models, DecodeConfig(method="lr+sd"), progress=False)


def test_int8_target_on_transformers_is_refused_naming_the_target_option(tmp_path):
    with pytest.raises(ConfigError, match="--target-quantization int8 needs --backend vllm"):
        ModelConfig(target=str(tmp_path / "missing"), backend="transformers", target_quantization="int8")
    models = ModelConfig(target=str(tmp_path / "missing"), backend="transformers")
    models.target_quantization = "int8"
    with pytest.raises(ConfigError, match="--target-quantization int8 needs --backend vllm"):
        check_configs(models, DecodeConfig(method="sd"), progress=False)


def test_an_unknown_target_quantization_is_refused_when_the_config_is_built():
    with pytest.raises(ConfigError, match="--target-quantization: must be one of"):
        ModelConfig(target_quantization="int4")


def test_the_memory_plan_counts_a_copys_int8_weights_once_and_its_16_bit_rest_twice(pair, int8_draft):
    from lrtune.memory import held_weight_bytes, weight_bytes
    from lrtune.modeldir import safetensors_dtype_bytes

    _, d = int8_draft
    kinds = safetensors_dtype_bytes(d / "model.safetensors")
    assert kinds.get("I8", 0) > 0
    sixteen = kinds.get("BF16", 0) + kinds.get("F16", 0)
    assert held_weight_bytes(d, float32=False) == weight_bytes(d)
    assert held_weight_bytes(d, float32=True) == weight_bytes(d) + sixteen < 2 * weight_bytes(d)
    src = Path(pair.draft)
    if json.loads((src / "config.json").read_text()).get("torch_dtype") in ("bfloat16", "float16"):
        assert held_weight_bytes(src, float32=True) == 2 * weight_bytes(src)


def test_an_already_quantized_draft_is_refused_for_int8(int8_draft):
    cache, d = int8_draft
    with pytest.raises(ConfigError, match="already quantized"):
        quantize.for_engines("int8", str(d), backend="vllm", cache_dir=str(cache), progress=False)
    # auto keeps it as it is
    assert quantize.for_engines("auto", str(d), backend="vllm", cache_dir=str(cache), progress=False) == (
        str(d),
        "none",
    )


def test_auto_follows_the_recorded_measurement_of_this_machine(pair, tmp_path):
    draft = str(pair.draft)
    quantize.record_measurement(draft, plain_tok_s=100.0, int8_tok_s=90.0, cache_dir=tmp_path)
    quantize.record_measurement(draft, plain_tok_s=100.0, int8_tok_s=80.0, cache_dir=tmp_path, scheme="int8-weights")
    assert quantize.measured_faster(draft, tmp_path) is False
    assert quantize.for_engines("auto", draft, backend="vllm", cache_dir=str(tmp_path), progress=False) == (
        draft,
        "none",
    )
    assert not (tmp_path / "models").exists()  # slower here: no copy is even built
    quantize.record_measurement(draft, plain_tok_s=100.0, int8_tok_s=120.0, cache_dir=tmp_path)
    path, quant = quantize.for_engines("auto", draft, backend="vllm", cache_dir=str(tmp_path), progress=False)
    assert quant == "int8" and path == str(quantize.copy_dir(draft, tmp_path, lm_head=True))
    # measurements are per dtype (float32 was never timed) and per engine
    assert quantize.measured_faster(draft, tmp_path, "float32") is None
    assert quantize.for_engines("auto", draft, backend="transformers", cache_dir=str(tmp_path), progress=False) == (
        draft,
        "none",
    )
    entry = next(iter(json.loads(quantize.measurement_file(tmp_path).read_text()).values()))
    assert "cpu_flags" in entry and entry["int8_faster"] is True


def test_auto_times_each_copy_once_in_a_child_process_and_takes_the_fastest(pair, tmp_path):
    pytest.importorskip("vllm")
    draft = str(pair.draft)
    path, quant = quantize.for_engines(
        "auto", draft, backend="vllm", dtype="float32", cache_dir=str(tmp_path), progress=False
    )
    entries = list(json.loads(quantize.measurement_file(tmp_path).read_text()).values())
    assert sorted(e["scheme"] for e in entries) == ["int8", "int8-weights"]
    assert all(e["plain_tok_s"] > 0 and e["int8_tok_s"] > 0 and e["dtype"] == "float32" for e in entries)
    gains = {e["scheme"]: e["int8_tok_s"] / e["plain_tok_s"] for e in entries if e["int8_faster"]}
    assert quant == (max(gains, key=gains.get) if gains else "none")
    assert quantize.measured_faster(draft, tmp_path, "float32") is next(
        e["int8_faster"] for e in entries if e["scheme"] == "int8"
    )


def test_int8_draft_decodes_lossless_sd_and_lr_on_vllm(pair, tmp_path):
    """Greedy, float32 target: SD and LR (never verifier) with the int8 draft give the target's
    own tokens, and the int8 drafter's tokens are accepted."""
    pytest.importorskip("vllm")
    models = _tiny_vllm_models(pair, tmp_path, draft_quantization="int8")
    cfg = DecodeConfig(method="lr+sd", gamma1=2, gamma2=3, max_new_tokens=40, max_step_tokens=24)
    resolved = check_configs(models, cfg, progress=False)
    assert resolved.draft_quantization == "int8" and "-w8a8-head-" in resolved.draft
    with Decoder.from_configs(models, cfg, progress=False, load_all_methods=True) as dec:
        prompt = dec.encode("Tom has 3 apples and buys 4 more. How many apples?")
        ref = dec.generate([prompt], method="target")[0]
        sd = dec.generate([prompt], method="sd")[0]
        lr = dec.generate([prompt], method="lr+sd")[0]
    assert sd.token_ids == ref.token_ids and lr.token_ids == ref.token_ids
    assert sd.stats.sd.accepted_tokens > 0


@pytest.mark.parametrize("content", ["[]", "{not json", '"text"'])
def test_a_measurement_file_that_is_no_record_is_written_anew_and_the_timing_is_kept(pair, tmp_path, content, capsys):
    draft = str(pair.draft)
    path = quantize.measurement_file(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    assert quantize.measured_faster(draft, tmp_path) is None  # unreadable: never measured
    entry = quantize.record_measurement(draft, plain_tok_s=100.0, int8_tok_s=120.0, cache_dir=tmp_path)
    assert entry["int8_faster"] and quantize.measured_faster(draft, tmp_path) is True  # kept, not a crash
    assert "was not a measurement record" in capsys.readouterr().err


@pytest.mark.parametrize("digests", [{}, [], {"model.safetensors": {}}, {"other.safetensors": "0" * 64}])
def test_a_copy_whose_marker_proves_nothing_about_its_weights_is_not_complete(int8_draft, tmp_path, digests):
    import shutil

    _, d = int8_draft
    copy = tmp_path / "copy"
    shutil.copytree(d, copy)
    marker = json.loads((copy / quantize.MARKER).read_text())
    assert quantize._complete(copy)
    (copy / quantize.MARKER).write_text(json.dumps({**marker, "sha256": digests}))
    assert not quantize._complete(copy)  # rebuilt, not trusted


@pytest.mark.parametrize("answer", ["no", 0, None, "yes"])
def test_a_measurement_that_is_no_yes_or_no_counts_as_never_measured(pair, tmp_path, answer):
    draft = str(pair.draft)
    quantize.record_measurement(draft, plain_tok_s=100.0, int8_tok_s=120.0, cache_dir=tmp_path)
    path = quantize.measurement_file(tmp_path)
    data = json.loads(path.read_text())
    for entry in data.values():
        entry["int8_faster"] = answer
    path.write_text(json.dumps(data))
    assert quantize.measured_faster(draft, tmp_path) is None


@pytest.mark.parametrize("scheme", ["int8", "int8-weights"])
def test_a_quantized_target_runs_its_own_kernels_and_lossless_methods_match_the_copy(pair, tmp_path, scheme):
    """Greedy, float32: with --target-quantization every engine of the target loads the copy
    (the weight-only one runs lrtune's own linear method, checked after start-up); SD and LR
    (never verifier) give that copy's own tokens, which is what lossless means for a quantized
    target (not the tokens of the target as saved)."""
    pytest.importorskip("vllm")
    models = _tiny_vllm_models(pair, tmp_path, target_quantization=scheme)
    cfg = DecodeConfig(method="lr+sd", gamma1=2, gamma2=3, max_new_tokens=40, max_step_tokens=24)
    resolved = check_configs(models, cfg, progress=False)
    assert resolved.target_quantization == scheme and f"-{quantize.SCHEMES[scheme]}-" in resolved.target
    assert resolved.draft_quantization == "none" and resolved.draft == str(pair.draft)
    with Decoder.from_configs(models, cfg, progress=False, load_all_methods=True) as dec:
        prompt = dec.encode("Tom has 3 apples and buys 4 more. How many apples?")
        ref = dec.generate([prompt], method="target")[0]
        sd = dec.generate([prompt], method="sd")[0]
        lr = dec.generate([prompt], method="lr+sd")[0]
        methods = {m for probes in dec.decoder.target.probes.values() for r in probes for m in r["linear_methods"]}
    assert sd.token_ids == ref.token_ids and lr.token_ids == ref.token_ids
    assert sd.stats.sd.drafted_tokens > 0
    assert ("Int8WeightsLinearMethod" in methods) == (scheme == "int8-weights")


def test_weight_only_rows_keep_bf16_scales_within_half_a_step():
    w = torch.randn(16, 64) * torch.linspace(0.01, 3.0, 16)[:, None]
    q, s = quantize.quantize_rows(w, bf16_scale=True)
    assert torch.equal(s, s.to(torch.bfloat16).float())  # the kernel multiplies by exactly this scale
    exact = w.abs().amax(dim=1, keepdim=True) / 127
    assert int(q.abs().max()) <= 127
    assert bool(((q.float() * s - w).abs() <= s / 2 + 127 * (s - exact).abs() + 1e-6).all())


def test_the_weight_only_copy_selects_lrtunes_method_and_keeps_the_int8_tensors(pair, tmp_path):
    from safetensors.torch import load_file

    d = quantize.ensure_copy(pair.target, tmp_path, progress=False, scheme="int8-weights")
    assert d.name.startswith(Path(pair.target).name + "-w8-") and quantize._complete(d)
    cfg = json.loads((d / "config.json").read_text())["quantization_config"]
    assert cfg == {"quant_method": "lrtune_int8_weights", "lm_head": quantize.untied_head(pair.target)}
    tensors = load_file(str(d / "model.safetensors"))
    linears = [n for n in tensors if n.endswith(".weight") and n.split(".")[-2] in quantize.LINEARS]
    assert linears and all(tensors[n].dtype == torch.int8 for n in linears)


def test_a_weight_only_copy_on_a_gpu_is_refused_naming_the_option(monkeypatch):
    import lrtune.machine

    monkeypatch.setattr(lrtune.machine, "gpus", lambda: [{"name": "H100", "capability": "9.0"}])
    with pytest.raises(ConfigError, match="--target-quantization int8-weights runs on CPUs only"):
        quantize.check_int8_runs("vllm", "target", "int8-weights")


def test_auto_takes_the_copy_that_measured_fastest_and_skips_copies_measured_slower(pair, tmp_path):
    target = str(pair.target)
    quantize.record_measurement(target, 10.0, 12.0, tmp_path, scheme="int8")
    quantize.record_measurement(target, 10.0, 25.0, tmp_path, scheme="int8-weights")
    path, scheme = quantize.for_engines("auto", target, backend="vllm", role="target", cache_dir=str(tmp_path))
    assert scheme == "int8-weights" and "-w8-" in path
    quantize.record_measurement(target, 10.0, 9.0, tmp_path, scheme="int8-weights")
    path, scheme = quantize.for_engines("auto", target, backend="vllm", role="target", cache_dir=str(tmp_path))
    assert scheme == "int8" and "-w8a8-" in path
    quantize.record_measurement(target, 10.0, 8.0, tmp_path, scheme="int8")
    assert quantize.for_engines("auto", target, backend="vllm", role="target", cache_dir=str(tmp_path)) == (
        target,
        "none",
    )


def test_an_engine_whose_layers_do_not_run_the_copys_method_is_named():
    from lrtune.backends.vllm_patches import runtime_problems

    report = {
        "pid": 1,
        "v1_runner": True,
        "patches": {"no_spec": True, "prompt_logprobs_fill": True},
        "linear_methods": ["UnquantizedLinearMethod"],
    }
    problems = runtime_problems(
        [report], async_scheduling=False, speculative=False, on_cpu=False, method="Int8WeightsLinearMethod"
    )
    assert problems == [
        "worker 0 (pid 1) runs ['UnquantizedLinearMethod'] in its linear layers, not Int8WeightsLinearMethod"
    ]
    assert not runtime_problems([report], async_scheduling=False, speculative=False, on_cpu=False)


def test_a_mistyped_judge_is_refused_before_any_copy_is_built(pair, tmp_path):
    models = _tiny_vllm_models(
        pair,
        tmp_path,
        target_quantization="int8",
        draft_quantization="int8",
        verifier="llm_judge",
        judge_model=str(tmp_path / "no-such-judge"),
    )
    with pytest.raises(ModelError, match="no-such-judge"):
        check_configs(models, DecodeConfig(method="lr+sd"), progress=False)
    assert not (tmp_path / "models").exists()


def test_a_copy_is_counted_before_it_is_built_as_it_is_after(pair, int8_draft):
    from lrtune.memory import held_weight_bytes
    from lrtune.modeldir import safetensors_dtype_bytes

    _, built = int8_draft
    planned = quantize.copy_dtype_bytes(pair.draft)
    assert planned == safetensors_dtype_bytes(built / "model.safetensors") and planned["I8"] > 0
    header = (built / "model.safetensors").stat().st_size - sum(planned.values())  # the file's own header
    assert 0 < header < 2**16
    for float32 in (False, True):
        planned_held = held_weight_bytes(pair.draft, float32=float32, as_copy=True)
        assert planned_held + header == held_weight_bytes(built, float32=float32)


@pytest.mark.parametrize("role", ["target", "draft"])
def test_the_checks_of_a_run_with_a_copy_build_nothing_and_plan_what_the_build_plans(pair, tmp_path, role):
    models = _tiny_vllm_models(pair, tmp_path, **{f"{role}_quantization": "int8-weights"})
    cfg = DecodeConfig(method="lr+sd")
    checked = check_configs(models, cfg, progress=False)  # phase 1
    assert not (tmp_path / "models").exists()
    built = check_configs(models, cfg, progress=False, build=True)  # phase 2: the copy is built
    assert Path(getattr(built, role)).is_dir() and getattr(checked, role) == getattr(built, role)
    assert checked.cpu_memory.to_dict() == built.cpu_memory.to_dict()
