"""The GPU path's rules (lrtune.backends.vllm_platform A–E, lrtune.memory), checked on a CPU:
pure decisions directly, vLLM's own classes where they show the mechanism, a CUDA platform
stub where only the engine arguments matter, and real tiny engines where the CPU can run them
(a pair of one tokenizer with padded vocab sizes decodes SD losslessly)."""

import importlib.util
import inspect
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from lrtune.backends import vllm_platform as vp
from lrtune.errors import ConfigError, ModelError
from lrtune.memory import plan_gpu_memory, target_engine_keys

requires_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM not installed")
GiB = 2**30


# ---- A: one engine-core process per GPU engine -------------------------------------------
def test_gpu_engines_run_in_their_own_process_and_cpu_engines_in_this_one():
    assert vp.multiproc_default(on_cpu=False) == "1" and vp.multiproc_default(on_cpu=True) == "0"
    assert vp.engine_in_process({vp.MULTIPROC_ENV: "0"}) and not vp.engine_in_process({vp.MULTIPROC_ENV: "1"})
    assert not vp.engine_in_process({})  # vLLM's own default: a process of its own


@requires_vllm
def test_configure_env_gives_gpu_engines_their_own_process_unless_the_user_chose(monkeypatch):
    import vllm.platforms

    from lrtune.backends import vllm_patches

    monkeypatch.setattr(vllm.platforms, "current_platform", SimpleNamespace(is_cpu=lambda: False))
    for user, expected in ((None, "1"), ("0", "0")):
        monkeypatch.setattr(vllm_patches, "_ENV_DONE", False)
        if user is None:
            monkeypatch.delenv(vp.MULTIPROC_ENV, raising=False)
        else:
            monkeypatch.setenv(vp.MULTIPROC_ENV, user)
        vllm_patches.configure_env()
        import os

        assert os.environ[vp.MULTIPROC_ENV] == expected
    monkeypatch.setattr(vllm_patches, "_ENV_DONE", True)


def test_a_second_in_process_engine_capturing_cuda_graphs_is_refused_before_it_starts(monkeypatch):
    monkeypatch.setattr(vp, "_GRAPH_ENGINES", [])
    forced = {vp.MULTIPROC_ENV: "0"}
    vp.claim_graph_engine("target (γ2 3)", on_cpu=False, enforce_eager=False, env=forced)
    with pytest.raises(ConfigError) as e:
        vp.claim_graph_engine("draft (γ2 0)", on_cpu=False, enforce_eager=False, env=forced)
    msg = str(e.value)
    assert "\n" not in msg and "second engine capturing CUDA graphs" in msg and "'target (γ2 3)'" in msg
    assert "--enforce-eager" in msg
    # own processes, eager engines and CPUs never share a graph set
    vp.claim_graph_engine("draft", on_cpu=False, enforce_eager=False, env={vp.MULTIPROC_ENV: "1"})
    vp.claim_graph_engine("draft", on_cpu=False, enforce_eager=True, env=forced)
    vp.claim_graph_engine("draft", on_cpu=True, enforce_eager=False, env=forced)


@requires_vllm
def test_vllm_still_clears_every_cuda_graph_of_the_process_when_an_engine_starts():
    """The premise of rule A, read from the installed vLLM: a class-level set of every graph
    wrapper, emptied by each engine start's memory profile (if vLLM changes this, rule A can go)."""
    from vllm.compilation.cuda_graph import CUDAGraphWrapper
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    assert isinstance(vars(CUDAGraphWrapper).get("_all_instances"), __import__("weakref").WeakSet)
    assert "CUDAGraphWrapper.clear_all_graphs()" in inspect.getsource(GPUModelRunner.profile_cudagraph_memory)
    from vllm.compilation import monitor

    assert "CUDA graph capturing detected at an inappropriate" in inspect.getsource(monitor)


# ---- D: one graph kind for the baseline and every method ---------------------------------
def test_every_gpu_engine_asks_for_piecewise_graphs_and_the_plain_reference_keeps_vllms_default():
    assert vp.graph_kwargs(on_cpu=False, enforce_eager=False) == {"compilation_config": {"cudagraph_mode": "PIECEWISE"}}
    assert vp.graph_kwargs(on_cpu=False, enforce_eager=False, plain=True) == {}
    assert vp.graph_kwargs(on_cpu=True, enforce_eager=True) == {} == vp.graph_kwargs(on_cpu=False, enforce_eager=True)


@requires_vllm
def test_vllm_reads_lrtunes_graph_kind_as_piecewise():
    from vllm.config import CompilationConfig
    from vllm.config.compilation import CUDAGraphMode

    cfg = CompilationConfig(**vp.graph_kwargs(on_cpu=False, enforce_eager=False)["compilation_config"])
    assert cfg.cudagraph_mode == CUDAGraphMode.PIECEWISE


@requires_vllm
def test_an_engine_on_a_cuda_stub_gets_piecewise_graphs_the_mapped_vocab_and_its_planned_share(monkeypatch, tmp_path):
    """Orchestration only: which arguments ``VLLMBackend`` hands ``vllm.LLM`` on a GPU."""
    import vllm

    import lrtune.backends.vllm as vb
    from tiny_models import get_tiny_pair

    pair = get_tiny_pair()
    seen = []

    class Stop(Exception):
        pass

    def fake_llm(**kwargs):
        seen.append(kwargs)
        raise Stop

    monkeypatch.setattr(vb, "on_cpu_platform", lambda: False)
    monkeypatch.setattr(vllm, "LLM", fake_llm)
    monkeypatch.setenv(vp.MULTIPROC_ENV, "1")
    b = vb.VLLMBackend(
        str(pair.target),
        vb.VLLMConfig(
            spec_model=str(pair.draft), shared_spec_tokens=3, heterogeneous_vocab=True, gpu_memory_utilization=0.3
        ),
    )
    with pytest.raises(Stop):
        b.start(3)
    kw = seen[0]
    assert kw["compilation_config"] == {"cudagraph_mode": "PIECEWISE"} and kw["enforce_eager"] is False
    assert kw["speculative_config"]["use_heterogeneous_vocab"] is True and kw["gpu_memory_utilization"] == 0.3
    assert "kv_cache_memory_bytes" not in kw


# ---- B: padded vocab sizes of one tokenizer ----------------------------------------------
def test_padded_vocab_sizes_ask_for_the_mapping_and_a_size_below_the_tokenizer_is_refused():
    assert vp.vocab_plan(152064, 151936, 151665) is True
    assert vp.vocab_plan(151936, 151936, 151665) is False and vp.vocab_plan(None, 151936, 10) is False
    with pytest.raises(ModelError, match="the draft's vocab_size is 151000"):
        vp.vocab_plan(152064, 151000, 151665)
    assert vp.config_vocab_size({"text_config": {"vocab_size": 7}}) == 7 and vp.config_vocab_size({}) is None


def padded_target(tmp_path: Path, extra: int = 64) -> Path:
    """The tiny target with ``extra`` padding rows in its embedding and head (its tokenizer
    unchanged): the shape of R1-Distill-Qwen-32B beside its 1.5B."""
    import torch
    from transformers import AutoModelForCausalLM

    from tiny_models import get_tiny_pair

    pair = get_tiny_pair()
    out = tmp_path / "padded_target"
    lm = AutoModelForCausalLM.from_pretrained(str(pair.target), dtype=torch.float32)
    lm.resize_token_embeddings(lm.config.vocab_size + extra, mean_resizing=False)
    lm.save_pretrained(out)
    for f in pair.target.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name != "config.json":
            shutil.copy(f, out / f.name)
    return out


@requires_vllm
def test_a_pair_with_padded_vocab_sizes_decodes_sd_losslessly_on_vllm(tmp_path):
    import lrtune.backends.vllm as vb
    from lrtune.backends.base import GenParams
    from lrtune.models import needs_heterogeneous_vocab
    from tiny_models import get_tiny_pair

    pair = get_tiny_pair()
    target = padded_target(tmp_path)
    sizes = [json.loads((d / "config.json").read_text())["vocab_size"] for d in (target, pair.draft)]
    assert sizes[0] == sizes[1] + 64
    assert needs_heterogeneous_vocab(target, pair.draft) and not needs_heterogeneous_vocab(pair.target, pair.draft)
    cfg = dict(dtype="float32", max_model_len=512, kv_cache_gib=0.1, spec_model=str(pair.draft), shared_spec_tokens=3)
    b = vb.VLLMBackend(str(target), vb.VLLMConfig(heterogeneous_vocab=True, **cfg), name="padded")
    prompt = list(range(5, 40))
    outs = {
        k: b.generate([prompt], GenParams(max_tokens=40, stop_at_delimiter=False, num_speculative_tokens=k))
        .outputs[0]
        .token_ids
        for k in (0, 3)
    }
    assert outs[0] == outs[3] and len(outs[0]) == 40
    assert b.engine_sd_totals(3).accepted_tokens > 0
    # without the mapping vLLM refuses the pair; lrtune's line names the cause
    with pytest.raises(ModelError) as e:
        vb.VLLMBackend(str(target), vb.VLLMConfig(**cfg), name="unmapped").start(3)
    assert "cause B" in str(e.value)


def test_a_pair_with_padded_vocab_sizes_decodes_sd_losslessly_on_transformers(tmp_path):
    from lrtune.backends.base import GenParams
    from lrtune.backends.hf import HFBackend, HFConfig
    from tiny_models import get_tiny_pair

    pair = get_tiny_pair()
    cfg = HFConfig(device="cpu", dtype="float32", seed=0)
    draft = HFBackend(str(pair.draft), cfg, name="draft")
    target = HFBackend(str(padded_target(tmp_path)), cfg, name="target", spec=draft)
    assert target.output_width == draft.output_width + 64
    prompt = list(range(5, 40))
    outs = {
        k: target.generate([prompt], GenParams(max_tokens=30, stop_at_delimiter=False, num_speculative_tokens=k))
        for k in (0, 3)
    }
    assert outs[0].outputs[0].token_ids == outs[3].outputs[0].token_ids
    sampled = target.generate(
        [prompt],
        GenParams(max_tokens=30, stop_at_delimiter=False, num_speculative_tokens=3, temperature=1.0, seeds=(1,)),
    )
    assert len(sampled.outputs[0].token_ids) == 30 and max(sampled.outputs[0].token_ids) < target.output_width


# ---- C: the memory plan counts every engine ----------------------------------------------
def test_without_a_shared_sd_engine_the_target_starts_one_engine_per_gamma2():
    assert target_engine_keys([4], shared=4) == (4,)
    assert target_engine_keys([0, 2, 4, 6], shared=4) == (4, 6)  # a γ2 above the shared engine's gets its own
    assert target_engine_keys([2, 4], shared=0) == (0, 2, 4)  # ngram SD: a plain engine and one per γ2
    assert target_engine_keys([], shared=0) == (0,)


def test_each_engine_of_a_role_gets_its_own_share_and_the_refusal_names_the_role():
    plan = plan_gpu_memory({"target": 3 * GiB, "draft": GiB}, engines={"target": 3}, device_bytes=80 * GiB)
    assert plan.engines == {"target": 3}
    assert plan.engine_share("target") == pytest.approx(plan.shares["target"] / 3)
    assert sum(plan.shares.values()) == pytest.approx(0.9)  # all engines of all roles fit under the cap together
    assert plan.shares["target"] / plan.shares["draft"] == pytest.approx(9.0)  # by the bytes of all their engines
    with pytest.raises(ConfigError) as e:
        plan_gpu_memory({"target": 20 * GiB, "draft": GiB}, engines={"target": 5}, device_bytes=80 * GiB)
    assert "each of the 5 target engines' share" in str(e.value) and "--sd-method draft" in str(e.value)
    with pytest.raises(ConfigError, match="int8_timing"):
        plan_gpu_memory({"int8_timing": 35 * GiB}, engines={"int8_timing": 2}, device_bytes=80 * GiB)


@requires_vllm
def test_check_configs_plans_every_target_engine_an_ngram_run_starts(monkeypatch):
    import lrtune.backends.vllm as vb
    from lrtune.api import ModelConfig, check_configs
    from lrtune.decoder import DecodeConfig
    from tiny_models import get_tiny_pair

    pair = get_tiny_pair()
    monkeypatch.setattr(vb, "gpu_device_bytes", lambda: 80 * GiB)
    models = ModelConfig(
        target=str(pair.target), draft=str(pair.draft), max_model_len=1024, backend="vllm", sd_method="ngram"
    )
    got = check_configs(models, DecodeConfig(method="lr+sd", gamma2=4), progress=False, gamma2s=[2, 4])
    assert got.shared_spec_tokens == 0 and got.target_engines == (0, 2, 4)
    assert got.memory.engines["target"] == 3
    shared = check_configs(
        ModelConfig(target=str(pair.target), draft=str(pair.draft), max_model_len=1024, backend="vllm"),
        DecodeConfig(method="lr+sd", gamma2=4),
        progress=False,
        gamma2s=[2, 4],
    )
    assert shared.shared_spec_tokens == 4 and shared.target_engines == (4,) and "target" not in shared.memory.engines


@requires_vllm
def test_a_backend_refuses_an_engine_its_memory_plan_does_not_hold():
    import lrtune.backends.vllm as vb
    from tiny_models import get_tiny_pair

    pair = get_tiny_pair()
    b = vb.VLLMBackend(str(pair.target), vb.VLLMConfig(max_engines=1, spec_method="ngram"), name="target")
    b._engines[0] = object()  # the one planned engine, started
    with pytest.raises(ConfigError, match=r"holds 1 target engine\(s\) \(γ2 0\) and this run asks for one more"):
        b.engine(2)


# ---- E: Ray workers ----------------------------------------------------------------------
def test_lrtunes_switch_is_added_to_what_vllms_ray_executor_copies():
    assert vp.ray_vars_to_copy(None, "LRTUNE_VLLM_PATCHES") == "LRTUNE_VLLM_PATCHES"
    assert vp.ray_vars_to_copy("A, B", "LRTUNE_VLLM_PATCHES") == "A,B,LRTUNE_VLLM_PATCHES"
    assert vp.ray_vars_to_copy("LRTUNE_VLLM_PATCHES", "LRTUNE_VLLM_PATCHES") == "LRTUNE_VLLM_PATCHES"


@requires_vllm
def test_vllms_own_ray_env_copy_carries_lrtunes_switch_after_configure_env():
    from vllm.ray.ray_env import get_env_vars_to_copy

    from lrtune.backends.vllm_patches import PATCH_ENV, configure_env

    configure_env()
    assert PATCH_ENV in get_env_vars_to_copy(destination="test")


# ---- the doctor names the cause ----------------------------------------------------------
@pytest.mark.parametrize(
    "message,cause",
    [
        ("RuntimeError: CUDA graph capturing detected at an inappropriate time.", "A:"),
        ("Target and draft model should have the same vocabulary size. Target model vocab_size=152064.", "B:"),
        ("Free memory on device cuda:0 (10/80 GiB) on startup is less than desired GPU memory utilization (0.9)", "C:"),
    ],
)
def test_known_vllm_failures_are_reported_with_their_cause(message, cause):
    line = vp.with_cause(RuntimeError(message + "\nmore lines"))
    assert "\n" not in line and f"[cause {cause}" in line
    assert vp.explain("some other error") is None and vp.with_cause("x\ny") == "x"


def test_a_doctor_check_that_hits_a_known_vllm_failure_names_its_cause():
    from lrtune.doctor import DoctorOptions, _Run

    r = _Run(DoctorOptions(), lambda c: None)

    def boom():
        raise RuntimeError("CUDA graph capturing detected at an inappropriate time")

    assert not r.check("engines", boom)
    assert r.checks[0].status == "fail" and "cause A" in r.checks[0].detail


@requires_vllm
def test_the_doctor_times_the_shared_engines_baseline_against_a_plain_vllm_engine():
    """Rule D's check, run for real on the tiny pair: a γ2 = 0 call on the shared SD engine and a
    plain engine with vLLM's defaults, both timed; the ratio is what the doctor reports."""
    import lrtune.backends.vllm as vb
    from lrtune.doctor import DoctorOptions
    from lrtune.doctor_checks import shared_vs_plain
    from tiny_models import get_tiny_pair

    pair = get_tiny_pair()
    opts = DoctorOptions(dtype="float32", kv_cache_gib=0.1)
    shared = vb.VLLMBackend(
        str(pair.target),
        vb.VLLMConfig(
            dtype="float32", max_model_len=1024, kv_cache_gib=0.1, spec_model=str(pair.draft), shared_spec_tokens=3
        ),
        name="target",
    )
    r = SimpleNamespace(opts=opts, target=shared, target_dir=str(pair.target), plan=None)
    got = shared_vs_plain(r, list(range(5, 40)), tokens=24, repeats=2)
    assert got["shared_s_per_token"] > 0 and got["plain_s_per_token"] > 0
    assert got["ratio"] == pytest.approx(got["shared_s_per_token"] / got["plain_s_per_token"])
    assert got["tokens"] == {"shared": 24, "plain": 24} and got["plain_enforce_eager"]  # eager on CPU


def test_an_engine_whose_share_is_not_free_is_refused_in_this_process_naming_cause_c():
    vp.check_free_memory("draft (γ2 0)", 0.3, free=30 * GiB, total=80 * GiB)  # 24 GiB needed: fits
    with pytest.raises(ConfigError) as e:
        vp.check_free_memory("draft (γ2 0)", 0.5, free=30 * GiB, total=80 * GiB)
    assert "'draft (γ2 0)' needs 0.500 of the GPU (40.0 GiB)" in str(e.value) and "cause C:" in str(e.value)


def test_a_tensor_parallel_engine_keeps_its_graphs_in_its_workers_and_a_failed_start_is_forgotten(monkeypatch):
    monkeypatch.setattr(vp, "_GRAPH_ENGINES", [])
    forced = {vp.MULTIPROC_ENV: "0"}
    vp.claim_graph_engine("target", on_cpu=False, enforce_eager=False, env=forced, tensor_parallel_size=4)
    vp.claim_graph_engine("draft", on_cpu=False, enforce_eager=False, env=forced)
    vp.release_graph_engine("draft")  # its start failed
    vp.claim_graph_engine("judge", on_cpu=False, enforce_eager=False, env=forced)  # the first that really holds graphs


def test_an_engine_process_that_failed_to_start_is_explained():
    assert "own process failed to start" in vp.with_cause(RuntimeError("Engine core initialization failed. See root"))


@requires_vllm
def test_evaluate_counts_controllers_only_where_no_shared_engine_caps_them(tmp_path):
    """With the shared SD engine, an adaptive controller or the oracle picks within its γ2 and
    adds no engine; with ngram SD each γ2 of their range is an engine of its own."""
    from lrtune.api import ModelConfig
    from lrtune.control import Bounds
    from lrtune.decoder import DecodeConfig
    from lrtune.eval.config import EvalConfig, EvalOptions
    from lrtune.eval.loops import asked_gamma2s
    from lrtune.eval.methods import parse_methods

    specs = parse_methods("target,sd,lr+sd,adaptive,oracle", None, 3, 4)
    ctl = SimpleNamespace(bounds=Bounds(gamma2_max=6))
    shared = EvalConfig(EvalOptions(), ModelConfig(backend="vllm"), DecodeConfig(gamma2=4))
    assert asked_gamma2s(shared, specs, [ctl]) == {4}
    ngram = EvalConfig(EvalOptions(), ModelConfig(backend="vllm", sd_method="ngram"), DecodeConfig(gamma2=4))
    assert asked_gamma2s(ngram, specs, [ctl]) == {1, 2, 3, 4, 5, 6}


@requires_vllm
def test_the_decoder_hands_each_backend_its_planned_share_and_engine_count(monkeypatch):
    """Orchestration on a GPU stub: nothing starts (engines start lazily), only the configs are read."""
    import lrtune.backends.vllm as vb
    from lrtune.api import Decoder, ModelConfig
    from lrtune.decoder import DecodeConfig
    from tiny_models import get_tiny_pair

    pair = get_tiny_pair()
    monkeypatch.setattr(vb, "gpu_device_bytes", lambda: 80 * GiB)
    models = ModelConfig(
        target=str(pair.target),
        draft=str(pair.draft),
        max_model_len=1024,
        backend="vllm",
        sd_method="ngram",
        verifier="exact",
    )
    dec = Decoder.from_configs(models, DecodeConfig(method="lr+sd", gamma2=3), gamma2s=[2])
    t, d = dec.target.config, dec.draft.config
    assert t.max_engines == 3 and d.max_engines is None  # γ2 0, 2, 3 on the target
    assert t.gpu_memory_utilization * 3 + d.gpu_memory_utilization == pytest.approx(0.9)
