"""Reading problem files: JSONL (bad lines reported with their number, then skipped),
JSON lists, parquet, or a Hugging Face dataset name where a hub is reachable."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

from lrtune.errors import ConfigError
from lrtune.inputs import checked_file, probe, read_json


MAX_LINE_BYTES = 1 << 20  # a problem row longer than 1 MiB is not a problem (and could exhaust memory)
MAX_FILE_BYTES = 1 << 30


class DataWarning(UserWarning):
    """A problem file had rows that could not be used (the rest are used)."""


def read_rows(source: str, *, split: str = "test") -> list[dict]:
    """Rows of a local ``.jsonl``/``.json``/``.parquet`` file, or of HF dataset ``source``.

    Malformed JSONL lines are skipped with a :class:`DataWarning` naming the line number.
    """
    path, is_dir, exists = probe(source, "problem file")
    if is_dir:
        files = sorted(p for p in path.iterdir() if p.suffix in (".jsonl", ".json", ".parquet"))
        if not files:
            raise ConfigError(f"no .jsonl/.json/.parquet files in {path}")
        return [row for f in files for row in read_rows(str(f), split=split)]
    if path.suffix in (".jsonl", ".json", ".parquet") or exists or "/" not in source or source.startswith((".", "~")):
        checked_file(path, "problem file")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError(
                f"{path}: {path.stat().st_size >> 20} MiB is too large for a problem file "
                f"(at most {MAX_FILE_BYTES >> 20} MiB)"
            )
        if path.suffix == ".parquet":
            return _sized_rows(_read_parquet(path), path)
        if path.suffix == ".json":
            data = read_json(path, "problem file", max_bytes=MAX_FILE_BYTES)
            if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
                raise ConfigError(f"{path}: expected a JSON list of objects")
            return _sized_rows(data, path)
        return list(_read_jsonl(path))
    return _read_hub(source, split)


def _sized_rows(rows: list[dict], path: Path) -> list[dict]:
    """``rows``, each at most ``MAX_LINE_BYTES`` as JSON: the limit a JSONL line has, for every format."""
    for i, row in enumerate(rows):
        if len(json.dumps(row, ensure_ascii=False, default=str).encode("utf-8")) > MAX_LINE_BYTES:
            raise ConfigError(
                f"{path}: row {i + 1} is longer than {MAX_LINE_BYTES >> 20} MiB; a problem row must be shorter"
            )
    return rows


def _read_jsonl(path: Path) -> Iterator[dict]:
    with path.open("rb") as f:
        lineno = 0
        while True:
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            lineno += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise ConfigError(
                    f"{path}:{lineno}: line longer than {MAX_LINE_BYTES >> 20} MiB; a problem row must be shorter"
                )
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")  # a byte-order mark is no row text
            except UnicodeDecodeError as e:
                raise ConfigError(
                    f"{path}:{lineno}: not UTF-8 text ({e.reason} at byte {e.start} of the line)"
                ) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                warnings.warn(f"{path}:{lineno}: skipped malformed JSON line ({e.msg})", DataWarning, stacklevel=3)
                continue
            if not isinstance(row, dict):
                warnings.warn(f"{path}:{lineno}: skipped line that is not a JSON object", DataWarning, stacklevel=3)
                continue
            row.setdefault("_line", lineno)
            yield row


def _read_parquet(path: Path) -> list[dict]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("reading parquet needs pyarrow: pip install pyarrow") from None
    try:
        return pq.read_table(path).to_pylist()
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise ConfigError(f"{path}: not a readable parquet file ({str(e).splitlines()[0]})") from None


def _read_hub(name: str, split: str) -> list[dict]:
    try:
        import datasets
    except ImportError:
        raise ConfigError(f"{name!r} is not a local file, and loading hub datasets needs `datasets`") from None
    try:
        return list(datasets.load_dataset(name, split=split))
    except Exception as e:  # noqa: BLE001 - offline, missing, gated ...
        raise ConfigError(f"cannot load dataset {name!r} split {split!r}: {str(e).splitlines()[0]}") from None


def pick(row: dict, keys: tuple[str, ...], what: str, where: str) -> str:
    """The first present key of ``row`` as a string (a text or a number); a ConfigError naming
    ``where`` and the field, never its value, if none is present or it holds something else."""
    for k in keys:
        if k in row and row[k] is not None:
            v = row[k]
            if isinstance(v, (str, int, float)) and not isinstance(v, bool):
                return str(v)
            raise ConfigError(f"{where}: field {k!r} must be a text or a number, got a {type(v).__name__}")
    raise ConfigError(f"{where}: row has no {what} field (looked for {', '.join(keys)})")
