"""Crash-safe parquet storage for ``lrtune collect``.

Layout of an output directory::

    collect_config.json                 the config the rows were made with
    pairs/part-s{S}-p{I}.parquet        step-pair rows of problem I (written by shard S)
    problems/part-s{S}-p{I}.parquet     the per-problem row of problem I
    manifest-s{S}.json                  finished problems of shard S -> files, row counts, sha256
    README.md                           dataset card

Protocol per problem: write both parquet files under hidden *staged* names
(``pairs/.part-….parquet.staged``: temp file, fsync, rename), add the problem to the
manifest (temp, fsync, rename: the commit point), then rename the staged files to their
final names. So ``pairs/*.parquet`` only ever shows files of committed problems: a reader
never sees rows of a problem an interrupted run did not finish. On restart a committed
problem whose staged files were not yet renamed is rolled forward by the writer (checksums
verified; a reader such as ``train`` or ``collect --stats`` reads them where they lie and changes
nothing);
staged or temp files of uncommitted problems (and stale manifest temp files) are deleted;
a listed file whose checksum does not match is reported and its problem redone. So a run
killed at any moment and restarted with the same command ends with every row exactly once.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

from lrtune.errors import ConfigError
from lrtune.inputs import parse_json
from lrtune.runfiles import write_atomic


def parquet_bytes(rows: list[dict], schema=None) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows, schema=schema)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class ShardStore:
    """One shard's view of an output directory (see module docstring)."""

    def __init__(self, out: Path, shard_id: int) -> None:
        self.out = out
        self.shard_id = shard_id
        self.manifest_path = out / f"manifest-s{shard_id:03d}.json"
        for sub in ("pairs", "problems"):
            (out / sub).mkdir(parents=True, exist_ok=True)
        self.finished: dict[str, dict] = self._load_manifest()

    def _load_manifest(self, roll_forward: bool = True) -> dict[str, dict]:
        """The manifest's finished problems whose parts check out. ``roll_forward``: the writer
        (collect, resuming) renames the staged parts of a problem committed before a crash into
        place; a reader leaves them where they lie and reads them there (reading never writes)."""
        if not self.manifest_path.is_file():
            return {}
        from lrtune.filekinds import Manifest, check

        try:  # a part file of its own kind in this dataset, nothing else (lrtune.filekinds.Manifest)
            data = parse_json(self.manifest_path.read_bytes().decode("utf-8"), str(self.manifest_path))
            check(data, Manifest, str(self.manifest_path))
            entries = data["finished"]
        except (ConfigError, ValueError, UnicodeDecodeError) as e:
            where = str(self.manifest_path) + ": "
            why = str(e).removeprefix(where) if isinstance(e, ConfigError) else "not UTF-8 JSON"
            raise ConfigError(
                f"{self.manifest_path} is corrupt or not an lrtune manifest ({why}); move it away to redo shard "
                f"{self.shard_id}"
            ) from None
        finished = {}
        for pid, entry in entries.items():
            ok = True
            for kind in ("pairs", "problems"):
                f = self.out / entry[kind]["file"]
                staged = _staged(f)
                if not f.is_file() and staged.is_file() and sha256(staged) == entry[kind]["sha256"]:
                    if not roll_forward:  # read the committed part where it lies
                        entry = {**entry, kind: {**entry[kind], "file": str(staged.relative_to(self.out))}}
                        continue
                    try:
                        os.replace(staged, f)  # committed before the crash: roll forward
                    except OSError:
                        pass  # a read-only copy: reported below as missing
                if not f.is_file() or sha256(f) != entry[kind]["sha256"]:
                    if not roll_forward:  # a reader: the dataset is not whole, never read a part of it
                        raise ConfigError(
                            f"{f}: missing or corrupt (its sha256 is not the one {self.manifest_path.name} records "
                            f"for problem {pid}); rerun lrtune collect on {self.out} to redo it, or restore the file"
                        )
                    warnings.warn(
                        f"{f}: missing or corrupt (checksum mismatch); problem {pid} will be redone", stacklevel=3
                    )
                    ok = False
            if ok:
                finished[pid] = entry
        return finished

    def clean_orphans(self) -> int:
        """Delete this shard's files that the manifest does not list (interrupted writes):
        unlisted parts, staged parts, temp files, and stale temp files of its manifest."""
        listed = {e[k]["file"] for e in self.finished.values() for k in ("pairs", "problems")}
        n = 0
        mine = f"part-s{self.shard_id:03d}-"
        stale = [
            *(
                f
                for sub in ("pairs", "problems")
                for f in (self.out / sub).glob(".*")
                if f.name.lstrip(".").startswith(mine) and f.name.endswith((".tmp", ".staged"))
            ),
            *self.out.glob(f".{self.manifest_path.name}.*.tmp"),
        ]
        for sub in ("pairs", "problems"):
            for f in (self.out / sub).glob(f"part-s{self.shard_id:03d}-*"):
                if f"{sub}/{f.name}" not in listed:
                    stale.append(f)
        for f in stale:
            f.unlink()
            n += 1
        return n

    def add(
        self,
        problem_id: str,
        index: int,
        pair_rows: list[dict],
        problem_row: dict,
        pair_schema=None,
        problem_schema=None,
    ) -> None:
        """Write one problem's rows, then record it as finished."""
        entry = {"index": index}
        for kind, rows, schema in (("pairs", pair_rows, pair_schema), ("problems", [problem_row], problem_schema)):
            rel = f"{kind}/part-s{self.shard_id:03d}-p{index:06d}.parquet"
            staged = _staged(self.out / rel)
            write_atomic(staged, parquet_bytes(rows, schema))
            entry[kind] = {"file": rel, "rows": len(rows), "sha256": sha256(staged)}
            _fault_point(f"after-{kind}", len(self.finished))
        self.finished[problem_id] = entry
        data = {"shard_id": self.shard_id, "finished": self.finished}
        write_atomic(self.manifest_path, json.dumps(data, indent=1, sort_keys=True))  # the commit point
        _fault_point("after-manifest", len(self.finished) - 1)
        for kind in ("pairs", "problems"):
            final = self.out / entry[kind]["file"]
            os.replace(_staged(final), final)
        _fsync_dirs(self.out / "pairs", self.out / "problems")


def _staged(final: Path) -> Path:
    """Where a part is written before its problem commits (hidden from ``*.parquet``)."""
    return final.with_name(f".{final.name}.staged")


def _fsync_dirs(*dirs: Path) -> None:
    for d in dirs:
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fault_point(name: str, problem_number: int) -> None:
    """Fault injection for crash tests: ``LRTUNE_FAULT=after-pairs:1`` SIGKILLs this
    process right after the pairs file of the second problem is written."""
    spec = os.environ.get("LRTUNE_FAULT")
    if spec and spec == f"{name}:{problem_number}":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def all_entries(out: Path) -> dict[str, dict]:
    """Finished problems of every shard manifest in ``out`` (checksums verified: a part that is
    missing or differs is a ConfigError), read without changing anything (a part a crash left
    staged is read under its staged name); each entry carries its ``problem_id``."""
    entries: dict[str, dict] = {}
    for m in sorted(out.glob("manifest-s*.json")):
        shard = _shard_of(m)
        store = ShardStore.__new__(ShardStore)
        store.out, store.shard_id, store.manifest_path = out, shard, m
        for pid, e in store._load_manifest(roll_forward=False).items():
            if pid in entries:
                raise ConfigError(f"problem {pid} appears in two shard manifests of {out}")
            entries[pid] = {**e, "problem_id": pid}
    return entries


def _shard_of(manifest: Path) -> int:
    """The shard number in a ``manifest-s{S}.json`` name; a ConfigError naming a file that only looks like one."""
    digits = manifest.name[len("manifest-s") : -len(".json")]
    if not (digits.isascii() and digits.isdigit()):
        raise ConfigError(f"{manifest} is not an lrtune shard manifest (manifest-s<number>.json); move it away")
    return int(digits)
