"""lrtune's vLLM patches reach every process vLLM starts (DESIGN §vLLM path): with the
engine core in a spawned process, as on CUDA, the per-request γ2 switches hold by the
engine's own counters, and an engine whose processes run unpatched is refused."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

SPAWNED = r"""
import json, os, sys
sys.path.insert(0, {tests!r})
from tiny_models import get_tiny_pair
import lrtune.backends.vllm as vb
from lrtune.backends.base import GenParams
from lrtune.errors import LrtuneError

def main():
    pair = get_tiny_pair()
    cfg = dict(dtype="float32", max_model_len=512, kv_cache_gib=0.1, spec_model=str(pair.draft), shared_spec_tokens=3)
    if {unpatched!r}:
        real = vb.prepare_engine
        def prepare_then_drop_the_plugin():  # the engine core vLLM spawns loads no plugin
            real()
            os.environ["VLLM_PLUGINS"] = "none"
        vb.prepare_engine = prepare_then_drop_the_plugin
        try:
            vb.VLLMBackend(str(pair.target), vb.VLLMConfig(**cfg), name="shared").start(3)
            print("RESULT", json.dumps({{"refused": None}}))
        except LrtuneError as e:
            print("RESULT", json.dumps({{"refused": str(e)}}))
        return
    b = vb.VLLMBackend(str(pair.target), vb.VLLMConfig(**cfg), name="shared")
    b.start(3)
    counter = b._counters[3]
    prompt = list(range(5, 40))
    rows = {{}}
    for k in (0, 2):
        before = counter.totals.copy()
        out = b.generate([prompt], GenParams(max_tokens=48, stop_at_delimiter=False, num_speculative_tokens=k))
        d = counter.totals.minus(before)
        rows[k] = {{"tokens": len(out.outputs[0].token_ids), "passes": d.drafts, "drafted": d.drafted_tokens}}
    print("RESULT", json.dumps({{"parent": os.getpid(), "probes": b.probes[3], "rows": rows}}))

if __name__ == "__main__":
    main()
"""


def run_spawned(tmp_path: Path, *, unpatched: bool) -> dict:
    script = tmp_path / "spawned.py"
    script.write_text(SPAWNED.format(tests=str(Path(__file__).parent), unpatched=unpatched))
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    env.pop("VLLM_PLUGINS", None)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900, env=env)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, out.stdout[-2000:] + out.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


def test_a_spawned_engine_core_is_patched_by_the_plugin_and_honours_per_request_gamma2(tmp_path):
    res = run_spawned(tmp_path, unpatched=False)
    (probe,) = res["probes"]
    assert probe["pid"] != res["parent"]  # the worker lives in another process ...
    assert probe["patches"]["applied_by"] == "plugin" and probe["patches"]["no_spec"]  # ... patched by the plugin
    assert probe["v1_runner"] and not probe["async_scheduling"]
    plain, capped = res["rows"]["0"], res["rows"]["2"]
    assert plain["tokens"] == capped["tokens"] == 48
    assert plain["passes"] == 0 and plain["drafted"] == 0  # γ2 = 0: nothing drafted
    assert capped["passes"] > 0 and 0 < capped["drafted"] <= 2 * capped["passes"]  # γ2 = 2: at most 2 per pass


# a second spawned engine (30 s): slow. The refusal's logic runs in test_vllm_path.py
# (runtime_problems, check_engine)
@pytest.mark.slow
def test_an_engine_whose_spawned_processes_run_unpatched_is_refused_in_one_line(tmp_path):
    res = run_spawned(tmp_path, unpatched=True)
    msg = res["refused"]
    assert msg is not None and "\n" not in msg
    assert "does not run the code path lrtune patches" in msg and "without lrtune's vLLM patches" in msg
