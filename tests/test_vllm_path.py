"""The vLLM code path lrtune serves, checked without an engine: the runtime check's
verdicts on workers' probe reports, the refusal of settings that select another path, and
prompt scores that do not depend on how many positions the runner returns."""

from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")

from lrtune.backends import vllm_patches as vp  # noqa: E402
from lrtune.backends.vllm import prompt_scores  # noqa: E402
from lrtune.errors import ConfigError  # noqa: E402

PATCHED = {
    "no_spec": True,
    "prompt_logprobs_fill": True,
    "cpu_expand": True,
    "cpu_int8_float32": True,
    "cpu_lm_head_release": True,
    "cpu_attention_exact": True,
    "applied_by": "plugin",
}
V1 = {
    "pid": 7,
    "runner": "vllm.v1.worker.gpu_model_runner.GPUModelRunner",
    "v1_runner": True,
    "async_scheduling": False,
    "patches": PATCHED,
}


def test_runtime_check_accepts_the_v1_runner_with_sync_scheduling_and_patches():
    assert vp.runtime_problems([V1, dict(V1, pid=8)], async_scheduling=False, speculative=True, on_cpu=True) == []


@pytest.mark.parametrize(
    "report,async_on,words",
    [
        (
            dict(V1, runner="vllm.v1.worker.gpu.model_runner.GPUModelRunner", v1_runner=False),
            False,
            "not vLLM's V1 model runner",
        ),
        (V1, True, "async scheduling is on"),
        (dict(V1, async_scheduling=True), False, "schedules asynchronously"),
        (dict(V1, patches=dict(PATCHED, no_spec=False)), False, "without lrtune's vLLM patches (no_spec)"),
        (dict(V1, patches=dict(PATCHED, cpu_expand=False)), False, "(cpu_expand)"),
        (dict(V1, patches=dict(PATCHED, cpu_int8_float32=False)), False, "(cpu_int8_float32)"),
        (dict(V1, patches=dict(PATCHED, cpu_lm_head_release=False)), False, "(cpu_lm_head_release)"),
        (dict(V1, patches=dict(PATCHED, cpu_attention_exact=False)), False, "(cpu_attention_exact)"),
    ],
)
def test_runtime_check_names_each_path_the_patches_do_not_serve(report, async_on, words):
    problems = vp.runtime_problems([V1, report], async_scheduling=async_on, speculative=True, on_cpu=True)
    assert any(words in p for p in problems), problems


def test_runtime_check_refuses_an_engine_without_worker_answers():
    assert vp.runtime_problems([], async_scheduling=False, speculative=False, on_cpu=False)


def test_check_engine_raises_one_line_naming_the_engine_and_the_first_problem(tmp_path):
    llm = SimpleNamespace(
        llm_engine=SimpleNamespace(
            vllm_config=SimpleNamespace(
                scheduler_config=SimpleNamespace(async_scheduling=True),
                model_config=SimpleNamespace(model=str(tmp_path)),
            )
        ),
        collective_rpc=lambda name: [dict(V1, v1_runner=False, runner="V2Runner")],
    )
    with pytest.raises(Exception) as e:
        vp.check_engine(llm, "target", speculative=True, on_cpu=False)
    msg = str(e.value)
    assert "\n" not in msg and "'target'" in msg and "async scheduling" in msg and "(and 1 more)" in msg


@pytest.mark.parametrize(
    "env,value,words",
    [
        ("VLLM_USE_V2_MODEL_RUNNER", "1", "V1 model runner"),
        ("VLLM_PLUGINS", "lora_filesystem_resolver", "leaves out lrtune's vLLM plugin"),
    ],
)
def test_settings_that_select_an_unpatched_path_are_refused_before_an_engine_starts(monkeypatch, env, value, words):
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError, match=words):
        vp.prepare_engine()


def test_the_plugin_patches_only_processes_lrtune_started(monkeypatch):
    calls = []
    monkeypatch.setattr(vp, "apply_patches", calls.append)
    monkeypatch.delenv(vp.PATCH_ENV, raising=False)
    vp.register_plugin()
    assert calls == []
    monkeypatch.setenv(vp.PATCH_ENV, "1")
    vp.register_plugin()
    assert calls == ["plugin"]


def test_the_plugin_is_registered_as_a_vllm_general_plugin_entry_point():
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == vp.PLUGIN_NAME]
    assert ep.load() is vp.register_plugin


class _LP:
    def __init__(self, logprob, rank):
        self.logprob, self.rank = logprob, rank


def test_prompt_scores_align_from_the_end_of_a_shortened_list():
    """Model Runner V2 returns entries only for computed positions (after a leading None);
    the V1 runner one per prompt token. Both give the same scores for computed tokens."""
    ids = [11, 12, 13, 14, 15, 16]
    full = [None] + [{t: _LP(-0.1 * t, 1 if t % 2 else 2)} for t in ids[1:]]
    cached = 3  # positions 0..2 came from the prefix cache
    short = [None] + full[cached + 1 :]  # V2: token 3's predictor was cached; rows for tokens 4, 5
    a = prompt_scores(full, ids, cached, 2)
    b = prompt_scores(short, ids, cached, 2)
    assert a == b == [None, None, (-1.5, True), (-1.6, False)]
    assert prompt_scores(full, ids, 0, 1) == [(-0.1 * t, t % 2 == 1) for t in ids[1:]]
    assert prompt_scores(None, ids, 0, 4) == [None, None]
