"""Run directories of the long jobs (evaluate, collect): atomic writes, the config a run
was made with, and progress reporting. Shared by the stages, which do not import each other."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import sys
import threading
import time
from pathlib import Path

from lrtune.errors import ConfigError


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` via a temp file, fsync and rename (never half-written),
    then fsync the directory so the rename itself survives a crash. A file that already
    holds exactly ``data`` is left alone (a rerun that computes nothing new changes no file);
    a failed write removes its temp file."""
    blob = data.encode() if isinstance(data, str) else data
    try:
        if path.is_file() and path.stat().st_size == len(blob) and path.read_bytes() == blob:
            return
    except OSError:
        pass  # unreadable: rewrite it
    tmp = _temp_of(path)
    try:
        _write_synced(tmp, blob)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failed write leaves no stray temp file
        raise
    _sync_dir(path.parent)


def write_atomic_files(files: dict[Path, str | bytes]) -> None:
    """Write several files of one artifact so that a failure (a full disk) changes none of
    them: every temp file is written and synced first, then all are renamed into place."""
    temps = [(_temp_of(path), path) for path in files]
    try:
        for tmp, path in temps:
            data = files[path]
            _write_synced(tmp, data.encode() if isinstance(data, str) else data)
    except BaseException:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in temps:
        os.replace(tmp, path)
    for parent in {path.parent for path in files}:
        _sync_dir(parent)


def _temp_of(path: Path) -> Path:
    """The temp file a writer of ``path`` writes first (hidden, unique per process and thread)."""
    return path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")


def _write_synced(path: Path, blob: bytes) -> None:
    with open(path, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())


def _sync_dir(d: Path) -> None:
    """fsync a directory, so a rename in it survives a crash."""
    dir_fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def writable_dir(path: str | Path) -> Path:
    """``path`` created if needed and checked writable; a ConfigError (one line) if not."""
    out = Path(path).expanduser()
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"cannot write to output directory {out}: {e.strerror or e}") from None
    return out


def backup_path(base: Path) -> Path:
    """A path for a new backup: ``<base>-<time>``, or ``<base>-<time>-N`` when that exists."""
    stamp = base.with_name(f"{base.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    path, n = stamp, 1
    while path.exists():
        path, n = stamp.with_name(f"{stamp.name}-{n}"), n + 1
    return path


def read_json(path: Path) -> dict | None:
    """The JSON object in ``path``; None when the file is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def config_key(sections: dict[str, object], free: tuple[str, ...] = ()) -> dict:
    """``{section: asdict(config)}`` without the ``options`` keys in ``free`` (the ones that
    may change between invocations of one run without changing its results)."""
    from lrtune.configshape import flat_dict

    key = {name: flat_dict(cfg) for name, cfg in sections.items()}
    for k in free:
        key.get("options", {}).pop(k, None)
    return key


def changed_keys(old: dict, new: dict, defaults: dict) -> list[str]:
    """``section.key`` names whose value differs between two config keys. A key that a
    newer lrtune added is unchanged when the run uses its default, and a key this lrtune no
    longer has is ignored (so upgrading lrtune does not orphan a run)."""
    out = []
    for name in _diff_keys(old, new):
        section, _, key = name.partition(".")
        if (
            key
            and key not in old.get(section, {})
            and new.get(section, {}).get(key) == defaults.get(section, {}).get(key)
        ):
            continue
        if key and key not in new.get(section, {}):
            continue
        out.append(name)
    return out


def _diff_keys(a: dict, b: dict, prefix: str = "") -> list[str]:
    keys = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            keys += _diff_keys(va, vb, f"{prefix}{k}.")
        elif va != vb:
            keys.append(prefix + k)
    return keys


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class ProgressBar:
    """A rich progress bar on a terminal, one log line per step otherwise, nothing when
    disabled. ``advance(n, text)`` moves it by ``n`` and shows ``text``."""

    def __init__(self, label: str, total: int, enabled: bool) -> None:
        self._p = None
        self._lines = enabled and not sys.stderr.isatty()
        self._done, self._total = 0, total
        if enabled and total and not self._lines:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._p = Progress(
                TextColumn(label),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.description}"),
            )
            self._p.start()
            self._task = self._p.add_task("", total=total)

    def advance(self, n: int, text: str | None = None) -> None:
        self._done += n
        if self._lines and text:
            log(f"[{self._done}/{self._total}] {text}")
        if self._p is not None:
            self._p.update(self._task, advance=n, **({"description": text} if text else {}))

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()


@contextlib.contextmanager
def building_dir(final: Path):
    """A fresh temporary folder beside ``final`` to build into: on a clean exit it becomes
    ``final`` (a leftover ``final`` is replaced; the rename is atomic, so a reader sees the whole
    folder or none), on an error it is removed."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        tmp.chmod(0o755)  # mkdtemp makes it 0700
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def console(stderr: bool = False):
    """A rich Console for tables: the terminal's width on a terminal; in a pipe or a log file
    (where rich assumes 80 columns and crops cells) wide enough that no cell is cut."""
    from rich.console import Console

    c = Console(stderr=stderr)
    return c if c.is_terminal else Console(stderr=stderr, width=200)


def unwritable_ancestor(path: Path) -> Path | None:
    """None when directory ``path`` exists writable or can be created (its nearest existing
    ancestor is a writable directory); else that ancestor. Creates nothing."""
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return None if probe.is_dir() and os.access(probe, os.W_OK | os.X_OK) else probe


def write_json_file(path: Path, data: object) -> None:
    """``data`` as indented JSON in ``path`` (checked by :func:`lrtune.outdir.json_out_file`), its folder created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=1))


def load_jsonl(
    path: Path, keys: tuple[str, ...], what: str = "record", text_keys: tuple[str, ...] = (), kinds: tuple = ()
) -> list[dict]:
    """The JSON objects of a JSONL file lrtune appends to (each must hold ``keys``, and text at
    ``text_keys``, and fit one of ``kinds``, :mod:`lrtune.filekinds`); a torn last line (a crash
    mid-append) is dropped with a warning and the file rewritten without it, so appending can
    continue; any other bad line is a ConfigError naming the file, line and field."""
    import warnings

    if not path.is_file():
        return []
    lines = path.read_bytes().split(b"\n")
    good, bad_tail = [], False
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            if i >= len(lines) - 2:  # only the last line may be torn
                bad_tail = True
                continue
            raise ConfigError(f"{path}:{i + 1}: corrupt line; move the file away to start over") from None
        if not isinstance(rec, dict) or not set(keys) <= set(rec):
            raise ConfigError(
                f"{path}:{i + 1}: not an {what} (no {'/'.join(keys)}); move the file away or use another --out"
            )
        bad = next((k for k in text_keys if not isinstance(rec.get(k), str)), None)
        if bad is not None:
            raise ConfigError(
                f"{path}:{i + 1}: not an {what} ({bad} is not text); move the file away or use another --out"
            )
        if kinds:
            _fits_a_kind(rec, kinds, f"{path}:{i + 1}: not an {what}")
        good.append(rec)
    if bad_tail:
        warnings.warn(f"{path}: dropped a torn last line (interrupted write); it will be redone", stacklevel=2)
        write_atomic(path, "".join(json.dumps(r) + "\n" for r in good))
    return good


def _fits_a_kind(rec: dict, kinds: tuple, where: str) -> None:
    """ConfigError ``<where> (<field>: <problem>)`` unless ``rec`` fits one of ``kinds`` (the first one's problem)."""
    from pydantic import ValidationError

    from lrtune.filekinds import problem

    first = None
    for kind in kinds:
        try:
            kind.model_validate(rec)
            return
        except ValidationError as e:
            first = first or problem(e)
    raise ConfigError(f"{where} ({first}); move the file away or use another --out")


def append_jsonl(path: Path, *records: dict) -> None:
    """Append ``records``, one JSON line each, in one write, flushed and fsynced (read back by
    :func:`load_jsonl`, which recovers a torn last line)."""
    with path.open("a", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))
        f.flush()
        os.fsync(f.fileno())
