"""Profiles kept across runs: the demo measures a machine's profile once per pair and lrtune version.

A profile (``lrtune profile``'s JSON: c1, c2, b(n)) depends on the machine, the models, the
engine settings and the code that measures it, not on the run that asked for it. The demo
keeps each profile it measures under ``<cache>/profiles/<key>.json`` (cache: ``$LRTUNE_CACHE``
or ``~/.cache/lrtune``) and a later demo with the same key copies it instead of measuring
again (about 5 minutes on a 2-core CPU). The key is the sha256 of one canonical JSON of:

* the profile's options (its output path excepted);
* each model's identity: the resolved directory, the sha256 of its ``config.json`` and the
  name, size and modification time of every weight file (a model rebuilt in place is another);
* the backend, dtype, quantizations and engine settings;
* the machine: CPU model, the flags that change lrtune's figures, usable cores, memory, the
  thread settings of the environment, and the versions of torch, vLLM, transformers and
  lrtune, with the sha256 of :mod:`lrtune.profiling`, the code that measures (a change to it
  measures again).

Reading a cached profile checks that it records the same key; anything else is ignored (and
measured again), never trusted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from lrtune.inputs import read_json_object
from lrtune.errors import ConfigError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")
# environment settings that change how fast the engines run on a CPU
THREAD_ENV = ("OMP_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE", "MKL_NUM_THREADS")
KEY_FIELD = "profile_cache_key"


def cache_dir(root: str | Path | None = None) -> Path:
    """``root`` if given, else ``<$LRTUNE_CACHE or ~/.cache/lrtune>/profiles``."""
    from lrtune.default_pair import default_cache_dir

    return Path(root).expanduser() if root is not None else default_cache_dir() / "profiles"


def model_identity(path: str | Path) -> dict:
    """What makes a model directory the same model: its absolute path, the sha256 of its
    ``config.json`` and (name, bytes, mtime in ns) of each weight file. A path that is not a
    directory (a hub id) is its own identity."""
    from lrtune.store import sha256

    p = Path(path).expanduser()
    if not p.is_dir():
        return {"id": str(path)}
    cfg = p / "config.json"
    weights = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))
    return {
        "path": str(p.resolve()),
        "config_sha256": sha256(cfg) if cfg.is_file() else None,
        "weights": [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in weights],
    }


def _source_digest() -> str:
    """sha256 of the module whose code measures a profile (:mod:`lrtune.profiling`)."""
    import lrtune.profiling

    return hashlib.sha256(Path(lrtune.profiling.__file__).read_bytes()).hexdigest()


def machine_identity() -> dict:
    """The machine as far as a profile's figures depend on it (see the module docstring)."""
    from lrtune.machine import machine_info
    from lrtune.version import __version__

    info = machine_info()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count()
    return {
        "cpu": info.get("cpu"),
        "cpu_flags": info.get("cpu_flags"),
        "cpus": info.get("cpus"),
        "usable_cpus": usable,
        "memory_bytes": _memory_bytes(),
        "gpus": [g["name"] for g in info.get("gpus", [])],
        "env": {k: os.environ.get(k) for k in THREAD_ENV},
        "versions": {m: info.get(m) for m in ("python", "torch", "vllm", "transformers")},
        "lrtune": __version__,
        "measuring_code": _source_digest(),
    }


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def profile_key(options, models, target_dir: str | Path, draft_dir: str | Path) -> str:
    """The cache key (hex sha256) of a profile measured with ``options`` (a ProfileOptions; its
    ``out`` does not count) on ``models`` (a ModelConfig) whose models resolved to ``target_dir``
    and ``draft_dir``, on this machine."""
    from lrtune.configs import flat_dict

    opts = {k: v for k, v in dataclasses.asdict(options).items() if k != "out"}
    model_settings = {
        k: v
        for k, v in flat_dict(models).items()
        if k not in ("target", "draft", "verifier", "verifier_threshold", "judge_model", "controller", "cache_dir")
    }
    blob = {
        "options": opts,
        "models": model_settings,
        "target": model_identity(target_dir),
        "draft": model_identity(draft_dir),
        "machine": machine_identity(),
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()


def lookup(key: str, root: str | Path | None = None) -> tuple[Path, dict] | None:
    """The cached profile of ``key`` and its path, or None when there is none or the file there
    is unreadable or records another key (it is then measured again and replaced)."""
    path = cache_dir(root) / f"{key}.json"
    if not path.is_file():
        return None
    try:
        prof = read_json_object(path, "cached profile")
    except ConfigError:
        return None
    if prof.get(KEY_FIELD) != key or not isinstance(prof.get("batch_cost"), list):
        return None
    return path, prof


def store(profile: dict, key: str, root: str | Path | None = None) -> Path:
    """Keep ``profile`` under ``key`` (atomically; the folder is created); returns its path."""
    from lrtune.runfiles import write_atomic

    d = cache_dir(root)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{key}.json"
    write_atomic(path, json.dumps({**profile, KEY_FIELD: key}, indent=1))
    return path
