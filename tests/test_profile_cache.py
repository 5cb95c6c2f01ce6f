"""Profiles kept across runs (lrtune.profile_cache): found only under their own key, and the key
follows everything a profile's figures depend on."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lrtune import profile_cache
from lrtune.modelconfig import ModelConfig
from lrtune.profiling import ProfileOptions
from tiny_models import get_tiny_pair


def _model_dir(root: Path, name: str) -> Path:
    d = root / name
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "llama"}')
    (d / "model.safetensors").write_bytes(b"0" * 64)
    return d


def _key(opts, models, t, d) -> str:
    return profile_cache.profile_key(opts, models, t, d)


def test_the_key_follows_options_models_and_machine_but_not_the_output_path(tmp_path, monkeypatch):
    t, d = _model_dir(tmp_path, "t"), _model_dir(tmp_path, "d")
    models = ModelConfig(target=str(t), draft=str(d), backend="transformers")
    opts = ProfileOptions(out=str(tmp_path / "a.json"), tokens=16)
    base = _key(opts, models, t, d)
    assert _key(ProfileOptions(out=str(tmp_path / "b.json"), tokens=16), models, t, d) == base  # out does not count
    assert _key(ProfileOptions(out=opts.out, tokens=32), models, t, d) != base
    assert _key(opts, ModelConfig(target=str(t), draft=str(d), backend="transformers", dtype="float32"), t, d) != base
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # the machine as the engines see it
    assert _key(opts, models, t, d) != base
    monkeypatch.undo()
    assert _key(opts, models, t, d) == base
    (t / "model.safetensors").write_bytes(b"0" * 65)  # a model rebuilt in place is another model
    assert _key(opts, models, t, d) != base


def test_a_kept_profile_is_found_only_under_its_own_key(tmp_path):
    prof = {"c1": 0.3, "c2": 0.2, "batch_cost": [1.0, 1.1]}
    path = profile_cache.store(prof, "k1", tmp_path)
    assert path == tmp_path / "k1.json"
    found = profile_cache.lookup("k1", tmp_path)
    assert found is not None and found[0] == path and found[1]["batch_cost"] == [1.0, 1.1]
    assert profile_cache.lookup("k2", tmp_path) is None
    (tmp_path / "k2.json").write_text(path.read_text())  # a file named for k2 that records k1
    assert profile_cache.lookup("k2", tmp_path) is None
    (tmp_path / "k3.json").write_text("{not json")
    assert profile_cache.lookup("k3", tmp_path) is None


class _Stages:
    """The pipeline's stage bookkeeping with a profile run that writes a known profile."""

    def __init__(self, root: Path, c1: float) -> None:
        from lrtune.pipeline import _Stages as Real

        self.real = Real(root)
        self.runs = 0
        self.c1 = c1

    def __getattr__(self, name):
        return getattr(self.real, name)

    def run(self, name, argv):
        self.runs += 1
        self.real.profile_path.write_text(json.dumps({"c1": self.c1, "batch_cost": [1.0], "options": {}}))


@pytest.mark.parametrize("reuse", [True, False])
def test_a_new_demo_folder_copies_the_kept_profile_unless_told_to_measure_again(tmp_path, reuse):
    from lrtune.pipeline import SIZES, PipelineOptions, _profile_stage

    pair = get_tiny_pair()
    models = ModelConfig(
        target=str(pair.target), draft=str(pair.draft), backend="transformers", cache_dir=str(tmp_path)
    )
    first = _Stages(tmp_path / "one", c1=0.5)
    first.root.mkdir()
    _profile_stage(first, PipelineOptions(out=str(first.root)), SIZES["tiny"], models)
    assert first.runs == 1 and len(list((tmp_path / "profiles").glob("*.json"))) == 1
    second = _Stages(tmp_path / "two", c1=0.9)
    second.root.mkdir()
    _profile_stage(second, PipelineOptions(out=str(second.root), reuse_profile=reuse), SIZES["tiny"], models)
    got = json.loads(second.profile_path.read_text())
    if reuse:
        assert second.runs == 0 and got["c1"] == 0.5 and second.reused == {"profile": got["reused_from"]}
        assert got["options"]["out"] == str(second.profile_path)  # so a rerun of this folder finds it its own
    else:
        assert second.runs == 1 and got["c1"] == 0.9 and second.reused == {}
    assert os.path.exists(first.profile_path)
