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
