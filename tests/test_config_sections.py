"""Typed sub-configs keep the flat flags and YAML keys they replaced, take a mapping too, and
record runs in the flat shape (lrtune.configs: nested, from_flat, flat_dict)."""

import argparse

import pytest

from lrtune.configs import build, check_unknown_keys, flat_dict
from lrtune.data_gen.config import CollectOptions, collect_options
from lrtune.errors import ConfigError


def test_a_sub_config_reads_its_flat_keys_or_a_mapping_alike():
    flat = build(
        CollectOptions,
        argparse.Namespace(),
        {"teacher": "rollout", "rollout_tokens": 64, "num_shards": 2, "ray": True, "ray_address": "auto"},
    )
    mapped = build(
        CollectOptions,
        argparse.Namespace(),
        {
            "teacher": {"spec": "rollout"},
            "rollout": {"tokens": 64},
            "shards": {"num_shards": 2},
            "ray": {"enabled": True, "address": "auto"},
        },
    )
    assert flat == mapped
    assert (flat.teacher.spec, flat.rollout.tokens, flat.shards.num_shards, flat.ray.enabled) == (
        "rollout",
        64,
        2,
        True,
    )


def test_flags_override_a_file_inside_a_sub_config():
    args = argparse.Namespace(rollout_tokens=99)
    opts = build(CollectOptions, args, {"rollout": {"tokens": 64, "samples": 3}})
    assert (opts.rollout.tokens, opts.rollout.samples) == (99, 3)


@pytest.mark.parametrize(
    "values,words",
    [
        ({"rollout": {"tokenz": 1}}, "under 'rollout'"),
        ({"rollout": 5}, "must be a mapping"),
        ({"rollout_tokenz": 1}, "unknown option"),
    ],
)
def test_a_sub_config_refuses_what_it_does_not_hold(values, words):
    with pytest.raises(ConfigError, match=words):
        check_unknown_keys(values, CollectOptions)


def test_a_bad_value_inside_a_sub_config_names_its_flat_flag():
    with pytest.raises(ConfigError, match="^--rollout-tokens: must be >= 1"):
        build(CollectOptions, argparse.Namespace(), {"rollout": {"tokens": 0}})
    with pytest.raises(ConfigError, match="^--teacher-threshold: must be <= 1"):
        collect_options(teacher_threshold=2.0).__class__  # built unchecked; the schema runs in build
        build(CollectOptions, argparse.Namespace(), {"teacher_threshold": 2.0})


def test_a_run_records_its_options_in_the_flat_shape_of_its_flags():
    rec = flat_dict(collect_options(teacher="exact", rollout_tokens=32, ray=True))
    assert rec["teacher"] == "exact" and rec["rollout_tokens"] == 32 and rec["ray"] is True
    assert "rollout" not in rec and "shards" not in rec and {"num_shards", "shard_id"} <= set(rec)


@pytest.mark.parametrize("method,schedule", [("sd", "score"), ("target", "async"), ("sd", "abort")])
def test_a_schedule_asked_for_a_method_without_lr_steps_is_refused_saying_why(method, schedule):
    from lrtune.decodeconfig import DecodeConfig

    args = argparse.Namespace(method=method, schedule=schedule)  # `lrtune decode/serve --method M --schedule S`
    with pytest.raises(ConfigError) as e:
        build(DecodeConfig, args, {})
    assert str(e.value) == f"--schedule {schedule} applies to lr and lr+sd only; --method {method} has no draft steps"
    with pytest.raises(ConfigError, match="applies to lr and lr"):  # the same from a config file
        build(DecodeConfig, argparse.Namespace(method=None, schedule=None), {"method": method, "schedule": schedule})
    assert build(DecodeConfig, argparse.Namespace(method="lr", schedule=schedule), {}).schedule == schedule


def test_configs_lrtune_derives_from_a_users_may_keep_a_schedule_their_method_does_not_run():
    from dataclasses import replace

    from lrtune.decodeconfig import DecodeConfig
    from lrtune.eval.methods import parse_method

    base = build(DecodeConfig, argparse.Namespace(schedule="abort"), {})  # evaluate: no --method flag
    assert parse_method("target", 3, 4).decode_config(base).schedule == "abort"  # evaluate's target row
    assert replace(base, method="sd").validate().method == "sd"  # what --method auto picked
    from lrtune.roundplan import RoundKind, plan_round

    target = parse_method("target", 3, 4).decode_config(base)  # a round of it: the target alone, schedule unread
    assert plan_round(target, index=0, base=[1], generated=0).kind is RoundKind.TARGET


@pytest.mark.parametrize(
    "text, twice",
    [
        ("engine: {max_model_len: 2048}\nmax_model_len: 1024\n", "(engine.max_model_len and max_model_len)"),
        ("max-model-len: 1024\nengine: {max_model_len: 2048}\n", "(max_model_len and engine.max_model_len)"),
        (
            "engine: {gpu: {target_share: 0.5}}\ntarget_gpu_share: 0.4\n",
            "(engine.gpu.target_share and target_gpu_share)",
        ),
        ("verification: {spec: exact}\nverifier: never\n", "(verification.spec and verifier)"),
        ("rollout: {tokens: 64}\nrollout_tokens: 32\n", "(rollout.tokens and rollout_tokens)"),
    ],
)
def test_an_option_given_both_nested_and_flat_in_a_config_file_is_refused_naming_it(tmp_path, text, twice):
    from lrtune.configs import load_config_file
    from lrtune.decodeconfig import DecodeConfig
    from lrtune.modelconfig import ModelConfig

    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match="is given twice in config file") as e:
        check_unknown_keys(load_config_file(str(f)), ModelConfig, DecodeConfig, CollectOptions)
    assert twice in str(e.value) and "\n" not in str(e.value)
    f.write_text("engine: {max_model_len: 2048}\nkv_cache_gib: 0.5\n")  # each once, either way: fine
    check_unknown_keys(load_config_file(str(f)), ModelConfig, DecodeConfig)
    models = build(ModelConfig, argparse.Namespace(max_model_len=1024), load_config_file(str(f)))
    assert (models.engine.max_model_len, models.engine.kv_cache_gib) == (1024, 0.5)  # a flag still overrides


def test_a_demo_size_does_not_override_a_context_the_config_file_gives_nested():
    from lrtune.pipeline import sized_context

    nested = {"engine": {"max_model_len": 4096}}
    assert sized_context("default", argparse.Namespace(max_model_len=None), nested) == nested
    assert sized_context("default", argparse.Namespace(max_model_len=None), {})["max_model_len"] == 2048


@pytest.mark.parametrize(
    "shares",
    [
        {"target_gpu_share": 0.9, "draft_gpu_share": 0.9, "judge_gpu_share": 0.3},
        {"target_gpu_share": 0.6, "draft_gpu_share": 0.5},
    ],
)
def test_gpu_shares_summing_past_the_whole_gpu_are_refused_when_the_config_is_built(shares):
    from lrtune.modelconfig import ModelConfig

    with pytest.raises(ConfigError, match=r"^--target-gpu-share .* the GPU shares must sum to at most 1$"):
        ModelConfig(**shares)  # on any device: a CPU run ignores them, the config is still one no GPU runs
    with pytest.raises(ConfigError, match="the GPU shares must sum to at most 1"):
        build(ModelConfig, argparse.Namespace(**shares), {})
    ModelConfig(target_gpu_share=0.5, draft_gpu_share=0.3, judge_gpu_share=0.2)  # the whole GPU: allowed


@pytest.mark.parametrize("length", [0, -1, 15])
def test_a_context_too_short_for_one_step_is_refused_before_anything_runs(length):
    from lrtune.data_gen.judge_probe import JudgeProbeConfig
    from lrtune.modelconfig import ModelConfig
    from lrtune.schema import MIN_CONTEXT

    assert MIN_CONTEXT == 16
    with pytest.raises(ConfigError, match=f"^--max-model-len: must be >= 16, got {length}$"):
        ModelConfig(max_model_len=length)
    with pytest.raises(ConfigError, match=f"^--max-model-len: must be >= 16, got {length}$"):
        build(JudgeProbeConfig, argparse.Namespace(max_model_len=length), {})  # lrtune labels judge-probe
