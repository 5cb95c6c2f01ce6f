"""Generated option values and files through the schema and the readers: nothing but a clean
ConfigError (one line) or a valid config / value may come out (lrtune.schema, lrtune.inputs)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import typing

import pytest
from annotated_types import Ge, Gt, Interval, Le, Lt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lrtune.configs import build
from lrtune.errors import ConfigError


def config_classes():
    from lrtune.data_gen.collect import CollectOptions
    from lrtune.eval.evaluate import EvalOptions
    from lrtune.api import ModelConfig
    from lrtune.cli import DecodeOptions
    from lrtune.decoder import DecodeConfig
    from lrtune.doctor import DoctorOptions
    from lrtune.pipeline import PipelineOptions
    from lrtune.profiling import ProfileOptions
    from lrtune.train.controller import TrainControllerConfig
    from lrtune.train.verifier import TrainVerifierConfig

    return [
        DecodeConfig,
        ModelConfig,
        EvalOptions,
        CollectOptions,
        TrainVerifierConfig,
        TrainControllerConfig,
        PipelineOptions,
        ProfileOptions,
        DoctorOptions,
        DecodeOptions,
    ]


CLASSES = config_classes()

any_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=50),
    st.text(alphabet=st.sampled_from("\x00ab/"), min_size=1, max_size=5),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def bounds_hold(value, metadata) -> bool:
    """Every numeric constraint of a field's Annotated metadata holds for ``value``."""
    for m in metadata:
        for c in m if isinstance(m, Interval) else [m]:
            if isinstance(c, Ge) and not value >= c.ge:
                return False
            if isinstance(c, Gt) and not value > c.gt:
                return False
            if isinstance(c, Le) and not value <= c.le:
                return False
            if isinstance(c, Lt) and not value < c.lt:
                return False
    return True


def field_metadata(cls) -> dict[str, tuple]:
    hints = typing.get_type_hints(cls, include_extras=True)
    out = {}
    for name, hint in hints.items():
        metas = []
        for arg in typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, type(int | None)) else (hint,):
            if typing.get_origin(arg) is typing.Annotated:
                metas += list(arg.__metadata__)
        if typing.get_origin(hint) is typing.Annotated:
            metas += list(hint.__metadata__)
        out[name] = tuple(metas)
    return out


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_option_values_give_a_valid_config_or_one_clean_config_error(cls, data):
    names = [f.name for f in dataclasses.fields(cls)]
    chosen = data.draw(st.lists(st.sampled_from(names), max_size=4, unique=True))
    values = {n: data.draw(any_value) for n in chosen}
    try:
        cfg = build(cls, argparse.Namespace(), values)
    except ConfigError as e:
        msg = str(e)
        assert msg and "\n" not in msg and len(msg) < 400
        return
    metadata = field_metadata(cls)
    for f in dataclasses.fields(cls):  # what passed holds the declared types and bounds
        v = getattr(cfg, f.name)
        if isinstance(v, float):
            assert math.isfinite(v)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            assert bounds_hold(v, metadata[f.name]), (f.name, v)
        if isinstance(v, str):
            assert "\x00" not in v or f.name == "delimiter"


@settings(max_examples=150, deadline=None)
@given(blob=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(lambda t: t.encode("utf-8"))))
def test_any_config_file_bytes_give_a_mapping_or_one_clean_config_error(tmp_path_factory, blob):
    from lrtune.inputs import read_yaml_mapping

    path = tmp_path_factory.mktemp("yaml") / "c.yaml"
    path.write_bytes(blob)
    try:
        data = read_yaml_mapping(path)
    except ConfigError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(data, dict)


json_like = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.one_of(json_like, st.lists(json_like, max_size=5)),
    suffix=st.sampled_from([".json", ".jsonl"]),
    bom=st.booleans(),
)
def test_any_problem_file_gives_rows_or_one_clean_config_error(tmp_path_factory, rows, suffix, bom):
    import json
    import warnings

    from lrtune.tasks.files import read_rows

    path = tmp_path_factory.mktemp("rows") / f"p{suffix}"
    text = (
        json.dumps(rows)
        if suffix == ".json"
        else "\n".join(json.dumps(r) for r in (rows if isinstance(rows, list) else [rows]))
    )
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            got = read_rows(str(path))
        except ConfigError as e:
            assert "\n" not in str(e)
            return
    assert isinstance(got, list) and all(isinstance(r, dict) for r in got)
    if suffix == ".jsonl" and isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows):
        assert len(got) == len(rows)  # a byte-order mark never costs the first row


@settings(max_examples=100, deadline=None)
@given(value=st.text(max_size=40))
def test_any_text_for_a_numeric_flag_is_parsed_or_refused_in_one_line(value):
    import contextlib
    import io

    from lrtune.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["decode", "hi", "--temperature", value, "--target", "/nonexistent-model"])
    lines = err.getvalue().strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("lrtune: error:"), err.getvalue()
