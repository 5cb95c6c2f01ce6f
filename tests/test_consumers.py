"""No value without a consumer (lrtune.consumers): an option set where this run does not read it
is refused in one line; the same option at its default, or where it is read, is not."""

from __future__ import annotations

import pytest

from lrtune.consumers import check_read, engine_unread, method_unread
from lrtune.decoder import DecodeConfig
from lrtune.errors import ConfigError
from lrtune.modelconfig import ModelConfig


@pytest.mark.parametrize(
    "options,on_gpu,flag",
    [
        ({"backend": "transformers", "kv_cache_gib": 2.0}, False, "--kv-cache-gib 2.0"),
        ({"backend": "vllm", "kv_cache_gib": 2.0}, True, "--kv-cache-gib 2.0"),
        ({"backend": "vllm", "device": "cpu"}, False, "--device cpu"),
        ({"backend": "transformers", "enforce_eager": True}, False, "--enforce-eager"),
        ({"backend": "transformers", "shared_engine": False}, False, "--no-shared-engine"),
        ({"backend": "vllm", "gpu_memory_utilization": 0.5}, False, "--gpu-memory-utilization 0.5"),
        ({"backend": "vllm", "target_gpu_share": 0.5}, False, "--target-gpu-share 0.5"),
        ({"backend": "transformers", "gpu_memory_utilization": 0.5}, True, "--gpu-memory-utilization 0.5"),
        ({"backend": "vllm", "tensor_parallel_size": 2}, False, "--tensor-parallel-size 2"),
        ({"backend": "vllm", "numerics": "exact"}, True, "--numerics exact"),
        ({"backend": "vllm", "share_weights": False}, True, "--no-share-weights"),
        ({"backend": "vllm", "memory_budget_gib": 8.0}, True, "--memory-budget-gib 8.0"),
    ],
)
def test_an_engine_option_the_backend_or_device_does_not_read_is_refused_by_name(options, on_gpu, flag):
    reasons = engine_unread(ModelConfig(**options), on_gpu=on_gpu)
    assert len(reasons) == 1 and reasons[0].startswith(flag + ":"), reasons
    with pytest.raises(ConfigError, match="drop it") as e:
        check_read(reasons)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "options,on_gpu",
    [
        ({"backend": "vllm", "kv_cache_gib": 2.0, "share_weights": False, "numerics": "exact"}, False),
        ({"backend": "vllm", "gpu_memory_utilization": 0.5, "tensor_parallel_size": 2, "enforce_eager": False}, True),
        ({"backend": "transformers", "device": "cpu", "memory_budget_gib": 8.0}, False),
        ({"backend": "transformers", "gpu_memory_utilization": 0.9, "kv_cache_gib": None}, False),  # the defaults
    ],
)
def test_an_engine_option_read_where_it_is_given_or_left_at_its_default_passes(options, on_gpu):
    assert engine_unread(ModelConfig(**options), on_gpu=on_gpu) == []


@pytest.mark.parametrize(
    "method,decode,models,flag",
    [
        ("target", {"gamma2": 5}, {}, "--gamma2 5"),
        ("lr", {"gamma2": 5}, {}, "--gamma2 5"),
        ("sd", {"gamma1": 2}, {}, "--gamma1 2"),
        ("target", {"width": 2}, {}, "--width 2"),
        ("sd", {}, {"verifier": "exact"}, "--verifier exact"),
        ("sd", {}, {"verifier_threshold": 0.3}, "--verifier-threshold 0.3"),
        ("target", {}, {"controller": "heuristic"}, "--controller heuristic"),
        ("target", {}, {"draft_quantization": "int8"}, "--draft-quantization int8"),
        ("sd", {}, {"sd_method": "ngram", "draft_quantization": "int8"}, "--draft-quantization int8"),
        ("lr", {}, {"sd_method": "ngram"}, "--sd-method ngram"),
        ("sd", {"top_p": 0.5}, {}, "--top-p 0.5"),
        ("target", {"record": "logprobs"}, {}, "--record logprobs"),
    ],
)
def test_an_option_the_method_does_not_read_is_refused_by_name(method, decode, models, flag):
    reasons = method_unread(DecodeConfig(method=method, **decode), ModelConfig(**models))
    assert len(reasons) == 1 and reasons[0].startswith(flag + ":"), reasons


@pytest.mark.parametrize(
    "method,decode,models",
    [
        ("lr+sd", {"gamma1": 2, "gamma2": 5, "width": 2, "top_p": 0.5, "temperature": 0.7}, {"verifier": "exact"}),
        ("sd", {"gamma2": 2}, {"controller": "bandit", "sd_method": "ngram"}),
        ("lr", {"gamma1": 5, "draft_stop": -2.0}, {"verifier_threshold": 0.4, "draft_quantization": "int8"}),
        ("target", {"gamma1": 3, "gamma2": 4}, {}),  # at their defaults
    ],
)
def test_an_option_the_method_reads_or_left_at_its_default_passes(method, decode, models):
    assert method_unread(DecodeConfig(method=method, **decode), ModelConfig(**models)) == []


def test_two_unread_options_are_one_line_naming_the_first_and_counting_the_rest():
    reasons = method_unread(DecodeConfig(method="target", gamma1=2, gamma2=2), ModelConfig())
    with pytest.raises(ConfigError) as e:
        check_read(reasons)
    assert str(e.value).startswith("--gamma1 2:") and "and 1 more option(s)" in str(e.value)


@pytest.mark.parametrize(
    "extra,words",
    [
        (("--method", "target", "--gamma2", "5"), "--gamma2 5: --method target runs no token-level SD"),
        (("--backend", "transformers", "--kv-cache-gib", "2"), "--kv-cache-gib 2.0: it sizes vLLM's KV cache"),
        (("--backend", "vllm", "--device", "cpu"), "--device cpu: it picks the transformers backend's device"),
        (("--task-seed", "7"), "--task-seed 7: read with --task-problem N only"),
    ],
)
def test_decode_refuses_an_unread_option_in_one_line_before_its_gate(extra, words, tmp_path, capsys):
    from lrtune import gate
    from lrtune.cli import main
    from lrtune.toymodels import get_tiny_pair

    pair = get_tiny_pair()
    argv = ["decode", "What is 2 + 3?", "--target", str(pair.target), "--draft", str(pair.draft)]
    with gate.watch(tmp_path, stop=True) as seen:
        code = main([*argv, "--max-model-len", "1024", *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and seen.reached is None and seen.effects == []
    assert words in err and len(err.splitlines()) == 1, err


def test_a_cuda_device_this_machine_lacks_is_one_line_naming_it(monkeypatch):
    import torch

    from lrtune.consumers import check_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"^--device cuda:0: torch sees no CUDA device here; use --device cpu"):
        check_device("cuda:0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_device("cuda:1")
    with pytest.raises(ConfigError, match="torch sees 2 CUDA device"):
        check_device("cuda:2")
    check_device("cpu")


def test_a_draft_path_that_does_not_exist_is_refused_even_where_no_draft_loads(capsys, tmp_path):
    from lrtune import gate
    from lrtune.cli import main
    from lrtune.toymodels import get_tiny_pair

    pair = get_tiny_pair()
    argv = ["decode", "hi", "--target", str(pair.target), "--draft", str(tmp_path / "no-draft"), "--method", "target"]
    with gate.watch(tmp_path, stop=True) as seen:
        code = main([*argv, "--max-model-len", "1024"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and seen.reached is None and "no-draft" in err and len(err.splitlines()) == 1


def test_profile_and_doctor_refuse_sizes_of_a_measurement_they_do_not_make():
    from lrtune.doctor import DoctorOptions
    from lrtune.profiling import ProfileOptions

    with pytest.raises(ConfigError, match=r"^--sd-tokens 64: --sd-gamma2 0 runs no SD"):
        ProfileOptions(sd_gamma2=0, sd_tokens=64)
    assert ProfileOptions(sd_gamma2=0).sd_tokens == ProfileOptions.sd_tokens  # the default is no value given
    ProfileOptions(sd_gamma2=2, sd_tokens=64)
    with pytest.raises(ConfigError, match=r"^--timing-tokens 8: only --timing times generations"):
        DoctorOptions(timing_tokens=8).validate()
    DoctorOptions(timing=True, timing_tokens=8).validate()


def test_a_threshold_given_twice_that_disagrees_is_refused_and_one_that_agrees_is_not():
    with pytest.raises(ConfigError, match=r"^--verifier-threshold 0.5 and --verifier embedding@0.9 .* disagree"):
        ModelConfig(verifier="embedding@0.9", verifier_threshold=0.5)
    assert ModelConfig(verifier="embedding@0.9", verifier_threshold=0.9).verification.threshold == 0.9
