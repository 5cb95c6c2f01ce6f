"""--draft-quantization: the W8A8 draft copy (built once, checksummed), its rules, the auto
decision by measurement, and a real vLLM decode with the int8 draft."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from lrtune import quantize
from lrtune.api import Decoder, DecodeConfig, ModelConfig, check_configs
from lrtune.errors import ConfigError
from lrtune.toymodels import get_tiny_pair

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def pair():
    return get_tiny_pair()


@pytest.fixture(scope="module")
def int8_draft(pair, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return cache, quantize.ensure_w8a8(pair.draft, cache, progress=False)


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
    assert quantize.ensure_w8a8(pair.draft, cache, progress=False) == d
    assert (d / "model.safetensors").stat().st_mtime_ns == mtime
    with open(d / "model.safetensors", "r+b") as f:  # corrupt one byte of the copy
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))
    assert not quantize._complete(d)
    assert quantize.ensure_w8a8(pair.draft, cache, progress=False) == d
    assert quantize._complete(d)


def test_int8_on_transformers_is_refused_before_any_model_resolves(tmp_path):
    with pytest.raises(ConfigError, match="--draft-quantization int8 needs --backend vllm"):  # when it is built
        ModelConfig(target=str(tmp_path / "missing"), backend="transformers", draft_quantization="int8")
    models = ModelConfig(target=str(tmp_path / "missing"), backend="transformers")
    models.draft_quantization = "int8"  # changed after it was built: check_configs checks again
    with pytest.raises(ConfigError, match="--draft-quantization int8 needs --backend vllm"):
        check_configs(models, DecodeConfig(method="lr+sd"), progress=False)


def test_an_already_quantized_draft_is_refused_for_int8(int8_draft):
    cache, d = int8_draft
    with pytest.raises(ConfigError, match="already quantized"):
        quantize.draft_for_engines("int8", str(d), backend="vllm", cache_dir=str(cache), progress=False)
    # auto keeps it as it is
    assert quantize.draft_for_engines("auto", str(d), backend="vllm", cache_dir=str(cache), progress=False) == (
        str(d),
        "none",
    )


def test_auto_follows_the_recorded_measurement_of_this_machine(pair, tmp_path):
    draft = str(pair.draft)
    quantize.record_measurement(draft, plain_tok_s=100.0, int8_tok_s=90.0, cache_dir=tmp_path)
    assert quantize.measured_faster(draft, tmp_path) is False
    assert quantize.draft_for_engines("auto", draft, backend="vllm", cache_dir=str(tmp_path), progress=False) == (
        draft,
        "none",
    )
    assert not (tmp_path / "models").exists()  # slower here: no copy is even built
    quantize.record_measurement(draft, plain_tok_s=100.0, int8_tok_s=120.0, cache_dir=tmp_path)
    path, quant = quantize.draft_for_engines("auto", draft, backend="vllm", cache_dir=str(tmp_path), progress=False)
    assert quant == "int8" and path == str(quantize.w8a8_dir(draft, tmp_path, lm_head=True))
    # measurements are per dtype (float32 was never timed) and per engine
    assert quantize.measured_faster(draft, tmp_path, "float32") is None
    assert quantize.draft_for_engines(
        "auto", draft, backend="transformers", cache_dir=str(tmp_path), progress=False
    ) == (draft, "none")
    entry = next(iter(json.loads(quantize.measurement_file(tmp_path).read_text()).values()))
    assert "cpu_flags" in entry and entry["int8_faster"] is True


def test_auto_times_both_drafts_once_in_a_child_process(pair, tmp_path):
    pytest.importorskip("vllm")
    draft = str(pair.draft)
    path, quant = quantize.draft_for_engines(
        "auto", draft, backend="vllm", dtype="float32", cache_dir=str(tmp_path), progress=False
    )
    entry = next(iter(json.loads(quantize.measurement_file(tmp_path).read_text()).values()))
    assert entry["plain_tok_s"] > 0 and entry["int8_tok_s"] > 0 and entry["dtype"] == "float32"
    assert quant == ("int8" if entry["int8_faster"] else "none")
    assert quantize.measured_faster(draft, tmp_path, "float32") is entry["int8_faster"]


def test_int8_draft_decodes_lossless_sd_and_lr_on_vllm(pair, tmp_path):
    """Greedy, float32 target: SD and LR (never verifier) with the int8 draft give the target's
    own tokens, and the int8 drafter's tokens are accepted."""
    pytest.importorskip("vllm")
    models = ModelConfig(
        target=str(pair.target),
        draft=str(pair.draft),
        verifier="never",
        dtype="float32",
        max_model_len=1024,
        kv_cache_gib=0.25,
        gpu_memory_utilization=0.4,
        draft_quantization="int8",
        cache_dir=str(tmp_path),
    )
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
