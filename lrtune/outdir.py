"""Who owns an output directory: every command validates all of its input first (phase 1,
no side effect), then claims its ``--out`` (phase 2) before it writes, moves or deletes
anything there.

A claimed directory records its command in :data:`OWNER`. A directory written before
owners were recorded is recognised by the files only its command writes
(:data:`SIGNATURES`). :func:`check_out` refuses, in phase 1, an ``--out`` that is a file,
that another command owns, that holds files no lrtune command wrote (a model, a dataset), or
that cannot be created or written; :func:`claim_out` creates
it and records the owner. So a run that fails in phase 1 leaves no trace, and the corrected
command just works.
"""

from __future__ import annotations

import json
from pathlib import Path

from lrtune.errors import ConfigError, os_error_message
from lrtune.runfiles import unwritable_ancestor

OWNER = ".lrtune-owner.json"
# files (globs) that only one command writes into its output directory
SIGNATURES: dict[str, tuple[str, ...]] = {
    "collect": ("manifest-s*.json", "pairs", "problems"),
    "collect --merge": ("pairs.parquet",),
    "evaluate": ("records.jsonl", "summary.json"),
    "train verifier": ("lrtune_verifier.json",),
    "train controller": ("lrtune_controller.json",),
    "pipeline": ("pipeline.json",),
}


# names lrtune writes into an output folder that tell no single command (a dataset's or a
# training run's config, a card), and its own backups (collect --force-new: backup-*/, evaluate
# --overwrite: *.bak-*): none of them makes a folder foreign
SHARED_NAMES = ("collect_config.json", "train_config.json", "README.md", "backup-*", "*.bak-*")


def lrtune_written(name: str) -> bool:
    """Whether an entry of an output folder may be lrtune's own: hidden names, any command's
    signature (:data:`SIGNATURES`) or a shared name (:data:`SHARED_NAMES`)."""
    from fnmatch import fnmatch

    globs = [g for sig in SIGNATURES.values() for g in sig] + list(SHARED_NAMES)
    return name.startswith(".") or any(fnmatch(name, g) for g in globs)


def owner(path: str | Path) -> str | None:
    """The command that owns directory ``path``: the one its :data:`OWNER` file names, else
    the one whose files it holds (:data:`SIGNATURES`); None for a new, empty or foreign one."""
    d = Path(path).expanduser()
    f = d / OWNER
    try:
        if f.is_file():
            from lrtune.filekinds import OwnerFile, read_or_none

            data = read_or_none(f, OwnerFile)
            if data is not None:
                return data["command"]
        if not d.is_dir():
            return None
        for command, globs in SIGNATURES.items():
            if any(any(d.glob(g)) for g in globs):
                return command
    except (OSError, ValueError):
        return None
    return None


# files a dataset, checkpoint, run or model is made of: a JSON output never replaces one
PROTECTED_FILES = (
    OWNER,
    "collect_config.json",
    "train_config.json",
    "manifest-s*.json",
    "lrtune_verifier.json",
    "lrtune_controller.json",
    "summary.json",
    "pipeline.json",
    "lrtune_w8a8.json",
    "lrtune_model.json",
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "tokenizer.json",
    "special_tokens_map.json",
    "adapter_config.json",
    "*.index.json",
)
# output directories a JSON file of another command may land in (the pipeline's root holds its profile)
JSON_HOSTS = (None, "pipeline")


def json_file_refusal(path: Path, inputs: tuple = ()) -> str | None:
    """Why a command may not write its JSON output at ``path`` (None when it may): a symbolic
    link; an input of the command (``inputs``: files and directories) or a path inside one
    (after resolving ``..`` and links); a path inside another command's output directory or a
    model directory; an existing file a dataset, checkpoint, run or model is made of
    (:data:`PROTECTED_FILES`). Reads only."""
    from fnmatch import fnmatch

    if path.is_symlink():
        return "is a symbolic link (lrtune writes a file of its own, never through a link)"
    real = path.resolve()
    for given in inputs:
        if given is None:
            continue
        inp = Path(given).expanduser().resolve()
        if real == inp:
            return f"is an input of this command ({given})"
        if inp.is_dir() and inp in real.parents:
            return f"lies inside {given}, an input of this command"
    held = owner(real.parent)
    if held not in JSON_HOSTS:
        return f"lies inside the output directory of `lrtune {held}`"
    if (real.parent / "config.json").is_file() and any(
        any(real.parent.glob(g)) for g in ("*.safetensors", "tokenizer.json", "pytorch_model*.bin")
    ):
        return "lies inside a model directory"
    if real.exists() and any(fnmatch(real.name, g) for g in PROTECTED_FILES):
        return f"would replace {real.name}, a file a dataset, checkpoint, run or model is made of"
    return None


def json_out_file(spec: str, flag: str = "--out", inputs: tuple = ()) -> Path:
    """Phase 1 for a JSON file a command will write: ConfigError (one line) when ``spec`` is a
    directory, a special file, not JSON, one of the command's ``inputs`` or inside one, inside
    another command's output or a model, a file a dataset or model is made of
    (:func:`lrtune.outdir.json_file_refusal`), or its folder can neither be written nor
    created; nothing is created (the writer makes the folder: :func:`write_json_file`)."""
    out = Path(spec).expanduser()
    try:
        if out.is_dir():
            raise ConfigError(f"{flag} {spec} is a directory; give the path of the JSON file to write")
        if out.exists() and not out.is_file():
            raise ConfigError(
                f"{flag} {spec} is not a regular file (a pipe, socket or device); lrtune writes a "
                "JSON file there: pick another path"
            )
        if out.is_file() and not _holds_json(out):
            raise ConfigError(
                f"{flag} {spec} holds a file that is not JSON (an input?); lrtune would replace it: pick another path"
            )
        why = json_file_refusal(out, inputs)
        if why is not None:
            raise ConfigError(f"{flag} {spec} {why}: pick another path")
        blocker = unwritable_ancestor(out.parent)
        if blocker is not None:
            raise ConfigError(f"{flag} {spec}: its folder cannot be written ({blocker} is not a writable directory)")
    except OSError as e:
        raise ConfigError(f"{flag} {spec}: {os_error_message(e)}") from None
    return out


def _holds_json(path: Path) -> bool:
    """Whether a file looks like a JSON document (empty, or its first non-blank byte opens an
    object or a list): what a JSON output may replace; a dataset or weights file does not."""
    with open(path, "rb") as f:
        head = f.read(256).lstrip()
    return not head or head[:1] in (b"{", b"[")


def check_out(path: str | Path, command: str, flag: str = "--out") -> Path:
    """Phase 1: ``path`` can become ``command``'s output directory; a ConfigError (one line)
    when it is a file, belongs to another command, or cannot be created or written. Nothing
    is created or changed."""
    d = Path(path).expanduser()
    try:
        if d.exists() and not d.is_dir():
            raise ConfigError(f"{flag} {path} is a file, not a directory: pick another {flag}")
        held = owner(d)
        if held is not None and held != command:
            raise ConfigError(
                f"{flag} {path} holds the output of `lrtune {held}`; `lrtune {command}` will not write "
                f"into it: pick another {flag}"
            )
        foreign = (
            next((f for f in sorted(d.iterdir()) if not lrtune_written(f.name)), None)
            if held is None and d.is_dir()
            else None
        )
        if foreign is not None:  # a model, a dataset, someone's files: never lrtune's to rename or replace
            raise ConfigError(
                f"{flag} {path} holds files lrtune did not write (e.g. {foreign.name}); pick a new or empty {flag}"
            )
        blocker = unwritable_ancestor(d)
        if blocker is not None:
            raise ConfigError(f"{flag} {path}: {blocker} is not a writable directory")
    except OSError as e:
        raise ConfigError(f"{flag} {path}: {os_error_message(e)}") from None
    return d


def claim_json_out(out: Path, flag: str = "--out") -> None:
    """Phase 2 for a JSON file checked by :func:`json_out_file`: its folder made and the file
    locked for the rest of the command (the hidden, empty lock file ``.<name>.lrtune-lock`` beside
    it), so a second run writing the same file is refused in one line instead of one result
    replacing the other."""
    from lrtune import locks

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if not locks.hold(out.with_name(f".{out.name}.lrtune-lock")):
            raise ConfigError(
                f"{flag} {out} is being written by another lrtune command now; wait for it to end "
                f"or pick another {flag}"
            )
    except OSError as e:
        raise ConfigError(f"{flag} {out}: {os_error_message(e)}") from None


def claim_out(path: str | Path, command: str, flag: str = "--out", lock: str | None = None) -> Path:
    """Phase 2: create ``path`` (checked by :func:`check_out`), lock it for the rest of the
    command (:mod:`lrtune.locks`: the directory itself, or the lock file ``lock`` in it where
    several writers share the folder; ConfigError when another lrtune command writes there now)
    and record ``command`` as its owner; returns it. Idempotent for the same command."""
    from lrtune import locks
    from lrtune.runfiles import write_atomic

    d = check_out(path, command, flag)
    try:
        d.mkdir(parents=True, exist_ok=True)
        if not locks.hold(d / lock if lock else d):
            raise ConfigError(
                f"{flag} {path} is being written by another lrtune command now; wait for it to end "
                f"or pick another {flag}"
            )
        if owner(d) != command or not (d / OWNER).is_file():
            write_atomic(d / OWNER, json.dumps({"command": command}) + "\n")
    except OSError as e:
        raise ConfigError(f"{flag} {path}: {os_error_message(e)}") from None
    return d
