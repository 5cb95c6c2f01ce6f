"""Every JSON file lrtune reads back goes through one typed schema (lrtune.filekinds)."""

from __future__ import annotations

import json
import shutil

import pytest

from lrtune import default_pair, filekinds, quantize
from lrtune.errors import ConfigError, ModelError
from lrtune.filekinds import ControllerMeta, Int8Marker, OwnerFile, VerifierMeta
from lrtune.verifiers import distilled
from lrtune.policies import learned

SECRET = "sk-LRTUNE-TEST-SECRET-0042"

GOOD_VERIFIER = {"format": distilled.FORMAT, "version": distilled.VERSION, "kind": "features", "threshold": 0.5}
GOOD_CONTROLLER = {
    "format": learned.FORMAT,
    "version": learned.VERSION,
    "policy": "learned",
    "bounds": {"gamma1_min": 0, "gamma1_max": 4, "gamma2_min": 0, "gamma2_max": 4, "M": 24.0},
    "profile": {"c1": 0.3, "c2": 0.2, "batch_cost": [1.0, 1.1], "step_tokens": []},
    "features": {"tasks": ["gsm_symbolic"], "encoder": None},
    "model": {
        "alpha": 1.0,
        "coef": [[0.1, 0.2], [0.1, 0.2]],
        "intercept": [0.5, 0.8],
        "x_mean": [0.0, 0.0],
        "x_scale": [1.0, 1.0],
        "n_features_in": 2,
    },
    "prior_strength": 8.0,
}


def test_each_file_kind_names_the_format_its_writer_writes():
    def literal(kind, field):
        return kind.model_fields[field].annotation.__args__

    def exact(file_kind, field, value, /, **rest):
        good = {field: value, **rest}
        for bad in (value + 1, True if value == 1 else value - 1, float(value)):
            with pytest.raises(ValueError):
                file_kind.model_validate({**good, field: bad})
        return file_kind.model_validate(good)

    assert literal(VerifierMeta, "format") == (distilled.FORMAT,)
    exact(VerifierMeta, "version", distilled.VERSION, **{k: v for k, v in GOOD_VERIFIER.items() if k != "version"})
    assert set(literal(VerifierMeta, "kind")) == set(distilled.STUDENT_KINDS)
    assert literal(ControllerMeta, "format") == (learned.FORMAT,)
    exact(ControllerMeta, "version", learned.VERSION, **{k: v for k, v in GOOD_CONTROLLER.items() if k != "version"})
    exact(Int8Marker, "format", quantize.FORMAT, sha256={"a.safetensors": "0"})
    exact(filekinds.DefaultPairMarker, "format", default_pair.MARKER_FORMAT, gguf_sha256="0")


@pytest.mark.parametrize(
    "kind,good,path,bad,field",
    [
        (VerifierMeta, GOOD_VERIFIER, ("threshold",), SECRET, "threshold"),
        (VerifierMeta, GOOD_VERIFIER, ("threshold",), float("nan"), "threshold"),
        (VerifierMeta, GOOD_VERIFIER, ("context_chars",), True, "context_chars"),
        (VerifierMeta, GOOD_VERIFIER, ("encoder",), [SECRET], "encoder"),
        (VerifierMeta, GOOD_VERIFIER, ("metrics",), {"test": {"acceptance_ci95": [0.1, SECRET]}}, "metrics.test"),
        (VerifierMeta, GOOD_VERIFIER, ("features",), ["len_ratio", "len_ratio"], "twice"),
        (VerifierMeta, GOOD_VERIFIER, ("calibration",), SECRET, "calibration"),
        (VerifierMeta, GOOD_VERIFIER, ("calibration_history",), 5, "calibration_history"),
        (VerifierMeta, GOOD_VERIFIER, ("metrics",), {"test": [1]}, "metrics.test"),
        (VerifierMeta, GOOD_VERIFIER, ("metrics",), {"test": {"acceptance_ci95": [0.1, 1e999]}}, "metrics.test"),
        (ControllerMeta, GOOD_CONTROLLER, ("profile", "c1"), -1, "profile.c1"),
        (ControllerMeta, GOOD_CONTROLLER, ("profile", "batch_cost"), [], "profile"),
        (ControllerMeta, GOOD_CONTROLLER, ("bounds", "gamma1_max"), 6.5, "bounds.gamma1_max"),
        (ControllerMeta, GOOD_CONTROLLER, ("features", "tasks"), SECRET, "features.tasks"),
        (ControllerMeta, GOOD_CONTROLLER, ("metrics",), {"best_fixed": [1, 2, 3]}, "metrics.best_fixed"),
        (ControllerMeta, GOOD_CONTROLLER, ("metrics",), {"best_fixed": [9, 2]}, "outside the bounds"),
        (ControllerMeta, GOOD_CONTROLLER, ("bounds", "gamma1_max"), 10**6, "bounds.gamma1_max"),
        (ControllerMeta, GOOD_CONTROLLER, ("bounds", "M"), 1e9, "bounds.M"),
        (ControllerMeta, GOOD_CONTROLLER, ("model", "alpha"), SECRET, "model.alpha"),
        (ControllerMeta, GOOD_CONTROLLER, ("model", "x_scale"), [1.0, 0.0], "model.x_scale.1"),
        (OwnerFile, {"command": "evaluate"}, ("command",), {"x": SECRET}, "command"),
    ],
)
def test_a_file_that_does_not_fit_is_one_line_naming_file_and_field_never_its_contents(
    tmp_path, kind, good, path, bad, field
):
    data = json.loads(json.dumps(good))
    filekinds.read(_write(tmp_path / "ok.json", data), kind)  # the good one fits
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = bad
    f = _write(tmp_path / "bad.json", data)
    with pytest.raises(ConfigError) as e:
        filekinds.read(f, kind)
    msg = str(e.value)
    assert "\n" not in msg and str(f) in msg and f"{field}" in msg
    assert SECRET not in msg


def test_a_missing_field_is_named_as_missing(tmp_path):
    data = dict(GOOD_CONTROLLER, profile={"c2": 0.2})
    with pytest.raises(ConfigError, match=r"profile\.c1 is missing"):
        filekinds.read(_write(tmp_path / "c.json", data), ControllerMeta)


def test_extra_keys_pass_through_untouched(tmp_path):
    data = dict(GOOD_VERIFIER, notes={"by": "a newer lrtune"}, history=[1, 2])
    assert filekinds.read(_write(tmp_path / "v.json", data), VerifierMeta) == data


def test_a_file_that_is_not_an_object_is_refused_by_what_it_is(tmp_path):
    with pytest.raises(ConfigError, match="must hold a JSON object, not list"):
        filekinds.read(_write(tmp_path / "v.json", [SECRET]), VerifierMeta)


def test_a_cache_that_does_not_fit_is_rebuilt_not_trusted(tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "model.safetensors").write_bytes(b"weights")
    digest = quantize.sha256(copy / "model.safetensors")
    _write(copy / quantize.MARKER, {"format": quantize.FORMAT, "sha256": {"model.safetensors": digest}})
    assert quantize._complete(copy)
    for marker in (
        {"format": quantize.FORMAT, "sha256": {}},
        {"format": quantize.FORMAT, "sha256": []},
        {"format": quantize.FORMAT},  # no checksums at all
        [1],
    ):
        _write(copy / quantize.MARKER, marker)
        assert not quantize._complete(copy)
    assert filekinds.read_or_none(copy / quantize.MARKER, Int8Marker) is None
    _write(copy / quantize.MARKER, {"format": quantize.FORMAT, "sha256": {"model.safetensors": digest}})
    (copy / "model-00002.safetensors").write_bytes(b"garbage")  # a weight file the marker does not cover
    assert not quantize._complete(copy)


@pytest.mark.parametrize("entry", [{"int8_faster": "no"}, [], 0, {"plain_tok_s": 1, "int8_tok_s": 2, "int8_faster": 1}])
def test_an_int8_measurement_that_is_not_one_is_measured_again(tmp_path, entry):
    src = tmp_path / "draft"
    src.mkdir()
    quantize.record_measurement(src, 10.0, 12.0, cache_dir=tmp_path)
    assert quantize.measured_faster(src, cache_dir=tmp_path) is True
    f = quantize.measurement_file(tmp_path)
    data = json.loads(f.read_text())
    data[next(iter(data))] = entry
    f.write_text(json.dumps(data))
    assert quantize.measured_faster(src, cache_dir=tmp_path) is None


def test_a_model_config_with_mistyped_keys_is_refused_before_any_weight_loads(tmp_path):
    from lrtune.modeldir import validate_model_dir
    from lrtune.toymodels import get_tiny_pair

    model = tmp_path / "model"
    shutil.copytree(get_tiny_pair().target, model)
    validate_model_dir(model)
    cfg = json.loads((model / "config.json").read_text())
    cfg["tie_word_embeddings"] = "yes"
    (model / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match=r"config\.json: tie_word_embeddings: Input should be a valid boolean"):
        validate_model_dir(model)


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "summary,field",
    [([1], "must hold a JSON object"), ({"timing": "slow"}, "timing"), ({"batch_cost": {SECRET: 1.0}}, "batch_cost")],
)
def test_an_evaluate_summary_that_does_not_fit_is_refused_before_a_resume_writes(tmp_path, summary, field):
    from lrtune.eval.records import previous_summary

    (tmp_path / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ConfigError, match=field) as e:
        previous_summary(tmp_path)
    assert SECRET not in str(e.value)
    (tmp_path / "summary.json").write_text(json.dumps({"timing": {"loop_s": 2.0}, "batch_cost": {"2": 1.1}}))
    assert previous_summary(tmp_path)["batch_cost"] == {"2": 1.1}


@pytest.mark.parametrize("bad", [{"wall_s": "slow"}, {"correct": "yes"}, {"stats": []}])
def test_an_evaluate_record_that_does_not_fit_is_refused_naming_line_and_field(tmp_path, bad):
    from lrtune.eval.records import load_records

    good = {"problem": "p0", "method": "sd", "wall_s": 1.0, "correct": True, "stats": {}}
    f = tmp_path / "records.jsonl"
    f.write_text(json.dumps(good) + "\n" + json.dumps({**good, **bad}) + "\n")
    with pytest.raises(ConfigError, match=rf"records.jsonl:2: not an lrtune evaluate record \({next(iter(bad))}"):
        load_records(f)


def test_controller_bounds_past_the_decoders_largest_gamma_are_refused():
    from lrtune.control import GAMMA_BOUND, Bounds
    from lrtune.decodeconfig import GAMMA_MAX

    assert GAMMA_BOUND == GAMMA_MAX
    Bounds(gamma1_max=16, gamma2_max=16, M=256)
    for bad in ({"gamma1_max": 10**6}, {"gamma2_max": 17}, {"M": 1e9}):
        with pytest.raises(ConfigError, match="bad controller bounds"):
            Bounds(**bad)


@pytest.mark.parametrize("curve", [{1: 1.0, 2: -3.0}, {1.0, 1.2}])
def test_a_batch_cost_that_is_no_sequence_is_refused_not_read_as_its_keys(curve):
    from lrtune.pricing import Pricing

    with pytest.raises(ConfigError, match="batch_cost must be a list of numbers"):
        Pricing(batch_cost=curve)


@pytest.mark.parametrize(
    "name,key,value",
    [
        ("config.json", "vocab_size", "big"),
        ("config.json", "max_position_embeddings", -5),
        ("tokenizer_config.json", "model_max_length", "huge"),
        ("tokenizer_config.json", "chat_template", 5),
    ],
)
def test_a_models_side_file_with_a_mistyped_key_is_refused_naming_it(tmp_path, name, key, value):
    from lrtune.modeldir import validate_model_dir
    from lrtune.toymodels import get_tiny_pair

    model = tmp_path / "model"
    shutil.copytree(get_tiny_pair().target, model)
    f = model / name
    data = json.loads(f.read_text()) if f.is_file() else {}
    f.write_text(json.dumps({**data, key: value}))
    with pytest.raises(ModelError, match=rf"{name}: {key}"):
        validate_model_dir(model)


@pytest.mark.parametrize(
    "recorded,field",
    [
        ({"calibration": {"threshold": 0.5, "certified": "no"}}, "calibration.certified"),
        ({"calibration": {"threshold": 0.5, "certified": 1}}, "calibration.certified"),
        ({"accuracy_budget": {"threshold": 0.5, "certified": "false"}}, "accuracy_budget.certified"),
        ({"calibration_history": [None, {"certified": "no"}]}, "calibration_history.1.certified"),
    ],
)
def test_a_recorded_boolean_is_json_true_or_false_and_a_recorded_no_is_refused_naming_file_and_field(
    tmp_path, recorded, field
):
    from lrtune.policies.auto import accuracy_promise
    from lrtune.verifiers import VerifierSpec

    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "features.safetensors").write_bytes(b"")
    meta = _write(ck / distilled.META, {**GOOD_VERIFIER, **recorded})
    with pytest.raises(ConfigError) as e:  # "no" read with bool() was a certified promise
        accuracy_promise(VerifierSpec.of(str(ck)))
    msg = str(e.value)
    assert f"{meta}: {field}: Input should be a valid boolean" in msg and "\n" not in msg
    certified = {"threshold": 0.5, "certified": True, "max_false_accept": 0.05, "confidence": 0.9}
    _write(meta, {**GOOD_VERIFIER, "calibration": certified})
    assert accuracy_promise(VerifierSpec.of(str(ck))) == "false-accept rate <= 0.05 at 0.9"


def test_a_recorded_verdict_in_a_jsonl_line_is_true_or_false_never_a_string(tmp_path):
    from lrtune.data_gen.vote_labels import read_votes
    from lrtune.eval.parity import decode_acceptance
    from lrtune.eval.records import load_records
    from lrtune.train.accuracy_budget import _progress

    record = {"problem": "p0", "method": "lr", "wall_s": 1.0, "correct": True, "stats": {}}
    f = _write(tmp_path / "records.jsonl", {**record, "pairs": [{"accepted": True}, {"accepted": "no"}]})
    with pytest.raises(ConfigError, match=r"records.jsonl:1: not an lrtune evaluate record \(pairs\.1\.accepted"):
        load_records(f)
    _write(f, {**record, "pairs": [{"accepted": True}, {"accepted": False, "asked": False}, {"accepted": False}]})
    assert decode_acceptance(load_records(f))["acceptance"] == 0.5  # the unasked pair is left out

    line = {"key": "k", "problem": "p0", "threshold": 0.9, "correct": "no", "drafted": 4, "accepted": 3}
    progress = _write(tmp_path / "accuracy_budget.progress.jsonl", line)
    with pytest.raises(ConfigError, match=r"progress.jsonl:1: not an lrtune calibrate progress line \(correct"):
        _progress(progress, "k")
    _write(progress, {**line, "correct": False, "threshold": "never"})
    assert _progress(progress, "k")[("never", "p0")]["correct"] is False

    votes = tmp_path / "votes.jsonl"
    vote = {"key": "k", "greedy_label": "no", "vote_label": True, "vote_score": 1.0, "seconds": 1.0}
    votes.write_text(json.dumps({"config": {}}) + "\n" + json.dumps(vote) + "\n")
    with pytest.raises(ConfigError, match=r"votes.jsonl:2: not an lrtune vote \(greedy_label"):
        read_votes(votes, {})
