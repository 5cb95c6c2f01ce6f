"""``lrtune doctor`` on the tiny pair: every check passes on this machine's path, the report
says which runner, scheduling and patches each engine has, and a broken path fails loudly."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from lrtune.doctor import DoctorOptions, run
from lrtune.errors import ConfigError

STATUSES = {"ok", "warn", "fail", "skip"}
requires_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM not installed")


def by_name(report: dict) -> dict:
    return {c["name"]: c for c in report["checks"]}


@requires_vllm
def test_doctor_on_vllm_passes_every_check_and_reports_the_runner_each_engine_runs():
    report = run(DoctorOptions(models="tiny", backend="vllm", dtype="float32", kv_cache_gib=0.1, max_new_tokens=32))
    checks = by_name(report)
    assert report["ok"], [(c["name"], c["detail"]) for c in report["checks"] if c["status"] != "ok"]
    assert all(c["status"] == "ok" for c in report["checks"])
    for role in ("target", "draft"):
        eng = checks["engines"]["data"][role]
        assert not eng["async_scheduling"] and eng["enforce_eager"]  # eager on CPU
        assert all(w["v1_runner"] and w["patches"]["no_spec"] for w in eng["workers"])
    assert checks["engines"]["data"]["target"]["speculative"]
    spec = checks["per-request speculation"]["data"]
    assert spec["0"]["drafted"] == 0 and 0 < spec["1"]["drafted"] <= spec["1"]["passes"]
    scores = checks["prompt scores"]["data"]
    assert scores["max_abs_diff"] < 2e-3 and scores["mean_abs_diff_shifted_by_one"] > 0.05
    assert scores["scored_cached"] < scores["scored_fresh"]  # the V1 runner cannot score reused cache blocks
    assert {k: checks["dtype"]["data"][k] for k in ("target", "draft")} == {"target": "float32", "draft": "float32"}
    assert report["machine"]["cpu_flags"] is not None


def test_doctor_json_on_the_transformers_backend_runs_as_a_command():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lrtune",
            "doctor",
            "--backend",
            "transformers",
            "--dtype",
            "float32",
            "--max-new-tokens",
            "24",
            "--json",
            "-",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    report = json.loads(out.stdout)
    names = [c["name"] for c in report["checks"]]
    assert names == [
        "versions",
        "device",
        "backend",
        "models",
        "memory",
        "engines",
        "dtype",
        "per-request speculation",
        "greedy equality",
        "prompt scores",
    ]
    assert all(c["status"] == "ok" for c in report["checks"]) and report["ok"]


@requires_vllm
def test_a_path_lrtune_does_not_patch_fails_the_engines_check_and_skips_the_rest(monkeypatch):
    monkeypatch.setenv("VLLM_PLUGINS", "lora_filesystem_resolver")
    report = run(DoctorOptions(models="tiny", backend="vllm", kv_cache_gib=0.1))
    checks = by_name(report)
    assert not report["ok"] and checks["plugin"]["status"] == "fail"
    assert checks["engines"]["status"] == "fail" and "VLLM_PLUGINS" in checks["engines"]["detail"]
    assert checks["greedy equality"]["status"] == "skip"
    assert {c["status"] for c in report["checks"]} <= STATUSES


@pytest.mark.parametrize(
    "kwargs,words",
    [
        (dict(target="a"), "--target and --draft go together"),
        (dict(gamma2=0), "--gamma2: must be >= 1"),
        (dict(kv_cache_gib=float("nan")), "--kv-cache-gib"),
        (dict(gpu_memory_utilization=2.0), "--gpu-memory-utilization"),
        (dict(target="/nonexistent/t", draft="/nonexistent/d"), "--target: model path not found"),
        pytest.param(
            dict(device="cuda"),
            "torch sees no CUDA device",
            marks=pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CUDA device is present"),
        ),
    ],
)
def test_bad_doctor_options_are_refused_before_any_check(kwargs, words):
    with pytest.raises(ConfigError, match=words):
        run(DoctorOptions(**kwargs))


def test_random_models_are_built_once_into_the_cache_and_leave_no_temporary_folder(tmp_path):
    import json

    from lrtune.randommodels import build_random_pair

    small = {
        "target": dict(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
        ),
        "draft": dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
        ),
    }
    pair = build_random_pair(tmp_path, dtype="float32", vocab_size=1024, shapes=small)
    assert json.loads((pair.target / "config.json").read_text())["hidden_size"] == 64
    assert json.loads((pair.draft / "config.json").read_text())["num_hidden_layers"] == 1
    mtime = pair.target.parent.stat().st_mtime_ns
    again = build_random_pair(tmp_path, dtype="float32", vocab_size=1024, shapes=small)
    assert again == pair and pair.target.parent.stat().st_mtime_ns == mtime
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
