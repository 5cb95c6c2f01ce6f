"""Checks made before anything runs (issue 53: validate everything before side effects): a
score round with a two-sided verifier, from a spec, before any model loads or ``--out`` is
claimed; a GPU memory cap too small for any engine, as one line."""

import os
import subprocess
import sys

import pytest

from lrtune.api import ModelConfig, check_configs
from lrtune.decoder import DecodeConfig
from lrtune.errors import ConfigError
from lrtune.memory import plan_gpu_memory
from lrtune.verifiers import VerifierSpec


@pytest.mark.parametrize(
    "spec,one_sided",
    [
        ("target_logprob", True),
        ("target_logprob(min)@0.4", True),
        ("always", True),
        ("random(0.3)", True),
        ("exact", False),
        ("embedding@0.9", False),
        ("llm_judge", False),
        ("target_score", False),
    ],
)
def test_a_specs_one_sidedness_is_known_before_it_is_built(spec, one_sided):
    assert VerifierSpec.parse(spec).one_sided is one_sided


@pytest.mark.parametrize("verifier", ["exact", "embedding"])
def test_a_score_schedule_with_a_two_sided_verifier_is_refused_before_any_model_loads(verifier):
    models = ModelConfig(target="/nonexistent/target", draft="/nonexistent/draft", verifier=verifier)
    with pytest.raises(ConfigError, match="compares two steps"):  # not "model path not found"
        check_configs(models, DecodeConfig(method="lr", schedule="score"), progress=False)


def test_evaluate_refuses_a_score_method_with_a_two_sided_verifier_before_claiming_out(tmp_path):
    out = tmp_path / "run"
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "lrtune",
            "evaluate",
            "--methods",
            "target,score/v=exact",
            "--out",
            str(out),
            "--limit",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert got.returncode == 2 and "compares two steps" in got.stderr and len(got.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_a_memory_cap_that_leaves_nothing_is_one_line_naming_the_flag():
    with pytest.raises(ConfigError, match="--gpu-memory-utilization is 0.01 of device 0 for target, draft; raise"):
        plan_gpu_memory({"target": 2**30, "draft": 2**29}, cap=0.01)


def test_a_demo_collecting_too_few_problems_to_split_by_template_is_refused_before_any_stage(tmp_path):
    out = tmp_path / "demo"
    got = subprocess.run(
        [sys.executable, "-m", "lrtune", "demo", "--collect-problems", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert got.returncode == 2 and len(got.stderr.strip().splitlines()) == 1, got.stderr
    assert "--collect-problems" in got.stderr and "at least 3; got 2" in got.stderr
    assert not out.exists()  # no profile, no collect: nothing ran


def test_profile_reads_a_file_tasks_problems_before_any_model_loads(tmp_path):
    from lrtune.eval.profile import run
    from lrtune.profiling import ProfileOptions

    missing = tmp_path / "none.jsonl"
    models = ModelConfig(target="/nonexistent/target", draft="/nonexistent/draft")
    with pytest.raises(ConfigError) as e:  # the file's error, not "model path not found"
        run(ProfileOptions(out=str(tmp_path / "p.json"), task="custom", data=str(missing)), models)
    assert "none.jsonl" in str(e.value)
    assert not (tmp_path / "p.json").exists()


def test_the_pipeline_hands_a_file_tasks_data_to_its_profile_stage(tmp_path, monkeypatch):
    import json

    from lrtune import pipeline
    from tiny_models import get_tiny_pair

    data = tmp_path / "problems.jsonl"
    data.write_text(
        "".join(json.dumps({"id": f"p{i}", "question": f"{i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(4))
    )
    seen = []

    def first_stage_only(name, argv):
        seen.append(argv)
        raise KeyboardInterrupt  # stop the loop after the first stage's command line is built

    monkeypatch.setattr(pipeline, "run_stage", first_stage_only)
    pair = get_tiny_pair()
    opts = pipeline.PipelineOptions(
        out=str(tmp_path / "out"), size="tiny", task="custom", data=str(data), progress=False
    )
    with pytest.raises(KeyboardInterrupt):
        pipeline.run(opts, ModelConfig(target=str(pair.target), draft=str(pair.draft), backend="transformers"))
    argv = seen[0]
    assert argv[0] == "profile" and argv[argv.index("--task") + 1] == "custom"
    assert argv[argv.index("--data") + 1] == str(data)


@pytest.mark.parametrize(
    "build,words",
    [
        (lambda: DecodeConfig(delimiter="\x00"), "--delimiter: must not contain a NUL byte"),
        (
            lambda: __import__("lrtune.profiling", fromlist=["x"]).ProfileOptions(prefill_max=15),
            "--prefill-max: 0 (skip) or at least 16",
        ),
    ],
)
def test_values_that_would_be_silently_useless_are_refused_when_the_config_is_built(build, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        build()


def test_collect_refuses_a_record_setting_it_would_silently_replace(tmp_path):
    from lrtune.data_gen.collect import CollectConfig, collect_options, run

    cfg = CollectConfig(
        options=collect_options(task="gsm_symbolic", limit=1, out=str(tmp_path / "o")),
        models=ModelConfig(),
        decode=DecodeConfig(method="lr", record="logprobs"),
    )
    with pytest.raises(ConfigError, match="--record logprobs: collect records logprobs and draft scores itself"):
        run(cfg)
    assert not (tmp_path / "o").exists()


def test_profile_refuses_a_prefill_chain_that_cannot_fit_the_context_before_any_model_loads(tmp_path, monkeypatch):
    from lrtune.eval import profile
    from lrtune.profiling import ProfileOptions
    from tiny_models import get_tiny_pair

    pair = get_tiny_pair()

    def no_engine(*a, **k):
        raise AssertionError("a model loaded before the refusal")

    monkeypatch.setattr("lrtune.decoding.Decoder.from_configs", no_engine)
    models = ModelConfig(target=str(pair.target), draft=str(pair.draft), backend="transformers", max_model_len=512)
    with pytest.raises(ConfigError, match="--prefill-max 4096: a draft chain of 4096 tokens after a prompt of"):
        profile.run(ProfileOptions(out=str(tmp_path / "p.json"), prefill_max=4096), models)
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize(
    "conf,words",
    [
        ({}, r"not a collect config \(no options, models, decode\)"),
        ({"options": {"task": 3}, "models": {}, "decode": {}}, "--task: must be text"),
        ({"options": {}, "models": {}, "decode": {"gamma1": "2"}}, "--gamma1"),
    ],
)
def test_the_labels_tools_read_a_collect_config_through_its_schema_naming_the_file(tmp_path, conf, words):
    import json

    from lrtune.data_gen.label_noise import collect_settings

    (tmp_path / "collect_config.json").write_text(json.dumps(conf))
    with pytest.raises(ConfigError, match=words) as e:
        collect_settings(tmp_path)
    assert str(e.value).startswith(str(tmp_path / "collect_config.json"))


def test_the_labels_tools_refuse_pairs_without_the_columns_they_read_before_any_model_loads(tmp_path, monkeypatch):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from lrtune.data_gen import label_noise, vote_labels

    def no_engine(*a, **k):
        raise AssertionError("a model loaded before the refusal")

    monkeypatch.setattr("lrtune.decoding.Decoder.from_configs", no_engine)
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(
        pa.table(
            {
                "problem_id": ["gsm_symbolic-0"],
                "task": ["gsm_symbolic"],
                "draft_step": ["a"],
                "target_step": ["b"],
                "label": [True],
            }
        ),
        data / "pairs.parquet",
    )
    pq.write_table(pa.table({"problem_id": ["gsm_symbolic-0"], "index": [0]}), data / "problems.parquet")
    (data / "collect_config.json").write_text(
        json.dumps(
            {"options": {"teacher": "rollout", "task": "gsm_symbolic"}, "models": {}, "decode": {"method": "lr"}}
        )
    )
    with pytest.raises(ConfigError, match=r"pairs.parquet: no column 'position'"):
        label_noise.main(label_noise.LabelNoiseConfig(data=str(data), out=str(tmp_path / "noise.json"), problems=2))
    with pytest.raises(ConfigError, match=r"pairs.parquet: no column 'round'"):
        vote_labels.main(vote_labels.VoteLabelsConfig(data=str(data), out=str(tmp_path / "vote"), problems=2))
    assert not (tmp_path / "noise.json").exists() and not (tmp_path / "vote").exists()
