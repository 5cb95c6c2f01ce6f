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


TWO_ENGINES = r"""
import json, os, sys, threading, time
sys.path.insert(0, {tests!r})
from tiny_models import get_tiny_pair
import lrtune.backends.vllm as vb
from lrtune.backends.base import GenParams

def main():
    pair = get_tiny_pair()
    cfg = dict(dtype="float32", max_model_len=1024, kv_cache_gib=0.1, seed=0)
    target = vb.VLLMBackend(str(pair.target), vb.VLLMConfig(**cfg), name="target")
    draft = vb.VLLMBackend(str(pair.draft), vb.VLLMConfig(**cfg), name="draft")
    target.start(0)
    draft.start(0)
    # the long call: 16 prompts of up to 900 tokens (a random tiny model may end one early at its EOS)
    prompts = {{"long": [list(range(5 + 7 * i, 40 + 7 * i)) for i in range(16)], "short": [list(range(5, 40))]}}
    long, short = GenParams(max_tokens=900, stop_at_delimiter=False), GenParams(max_tokens=8, stop_at_delimiter=False)
    def tokens(backend, params, name):
        return [list(g.token_ids) for g in backend.generate(prompts[name], params).outputs]
    alone = {{"long": tokens(target, long, "long"), "short": tokens(draft, short, "short")}}
    ended = {{}}
    def run(backend, params, name):
        out = tokens(backend, params, name)
        ended[name] = (time.perf_counter(), out)
    worker = threading.Thread(target=run, args=(target, long, "long"))
    worker.start()
    engine = target.engine(0).llm_engine
    while engine.get_num_unfinished_requests() == 0 and worker.is_alive():  # the long call is in its engine
        time.sleep(0.001)
    began = time.perf_counter()
    run(draft, short, "short")
    worker.join()
    print("RESULT", json.dumps({{
        "safe": [target.concurrent_safe, draft.concurrent_safe],
        "short_first": ended["short"][0] < ended["long"][0],
        "same": [ended["long"][1] == alone["long"], ended["short"][1] == alone["short"]],
        "ended_s": {{k: round(v[0] - began, 3) for k, v in ended.items()}},
    }}))

if __name__ == "__main__":
    main()
"""


@pytest.mark.slow  # two spawned engine cores (about 40 s)
def test_engines_in_their_own_processes_run_at_once_from_two_threads(tmp_path):
    """Async LR's premise on a GPU, on CPU stand-ins: with each engine core in its own process
    (vLLM's default, lrtune's on a GPU) the backends say they are safe to call at once, a short
    draft call made while a long target call is in its engine ends first (one lock would make
    it wait for the long one), and both write the tokens they write alone. (Ended first: a
    statement about order, not speed, so it holds on a busy machine.)"""
    script = tmp_path / "two_engines.py"
    script.write_text(TWO_ENGINES.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900, env=env)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, out.stdout[-2000:] + out.stderr[-3000:]
    res = json.loads(lines[-1][len("RESULT ") :])
    assert res["safe"] == [True, True] and res["same"] == [True, True]
    assert res["short_first"], res["ended_s"]  # seconds after the short call was made


def test_engines_in_the_calling_process_are_called_one_at_a_time(monkeypatch):
    """On a CPU lrtune keeps engine cores in its own process (shared vLLM state): async LR locks."""
    import lrtune.backends.vllm as vb

    monkeypatch.setattr(vb, "configure_env", lambda: None)
    monkeypatch.setattr(vb.VLLMBackend, "_load_tokenizer", lambda self: None)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    assert vb.VLLMBackend("m").concurrent_safe is False
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    assert vb.VLLMBackend("m").concurrent_safe is True
