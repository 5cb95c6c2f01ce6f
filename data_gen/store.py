"""Crash-safe parquet storage for ``lrtune collect``.

Layout of an output directory::

    collect_config.json                 the config the rows were made with
    pairs/part-s{S}-p{I}.parquet        step-pair rows of problem I (written by shard S)
    problems/part-s{S}-p{I}.parquet     the per-problem row of problem I
    manifest-s{S}.json                  finished problems of shard S -> files, row counts, sha256
    README.md                           dataset card

Protocol per problem: write both parquet files (temp file, fsync, rename), then add the
problem to the manifest (temp, fsync, rename). The manifest is the truth: a file not
listed in it is an orphan of an interrupted run and is deleted on restart; a listed file
whose checksum does not match is reported and its problem redone. So a run killed at any
moment and restarted with the same command ends with every row exactly once.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

from lrtune.errors import ConfigError
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

    def _load_manifest(self) -> dict[str, dict]:
        if not self.manifest_path.is_file():
            return {}
        try:
            data = json.loads(self.manifest_path.read_text())
        except json.JSONDecodeError:
            raise ConfigError(f"{self.manifest_path} is corrupt; move it away to redo shard {self.shard_id}") from None
        finished = {}
        for pid, entry in data.get("finished", {}).items():
            ok = True
            for kind in ("pairs", "problems"):
                f = self.out / entry[kind]["file"]
                if not f.is_file() or sha256(f) != entry[kind]["sha256"]:
                    warnings.warn(f"{f}: missing or corrupt (checksum mismatch); problem {pid} will be redone",
                                  stacklevel=3)
                    ok = False
            if ok:
                finished[pid] = entry
        return finished

    def clean_orphans(self) -> int:
        """Delete this shard's files that the manifest does not list (interrupted writes)."""
        listed = {e[k]["file"] for e in self.finished.values() for k in ("pairs", "problems")}
        n = 0
        for sub in ("pairs", "problems"):
            for f in (self.out / sub).glob(f"part-s{self.shard_id:03d}-*"):
                if f"{sub}/{f.name}" not in listed:
                    f.unlink()
                    n += 1
            for f in (self.out / sub).glob(f".part-s{self.shard_id:03d}-*.tmp"):
                f.unlink()
                n += 1
        return n

    def add(self, problem_id: str, index: int, pair_rows: list[dict], problem_row: dict, pair_schema=None,
            problem_schema=None) -> None:
        """Write one problem's rows, then record it as finished."""
        entry = {"index": index}
        for kind, rows, schema in (("pairs", pair_rows, pair_schema), ("problems", [problem_row], problem_schema)):
            rel = f"{kind}/part-s{self.shard_id:03d}-p{index:06d}.parquet"
            path = self.out / rel
            write_atomic(path, parquet_bytes(rows, schema))
            entry[kind] = {"file": rel, "rows": len(rows), "sha256": sha256(path)}
            _fault_point(f"after-{kind}", len(self.finished))
        self.finished[problem_id] = entry
        data = {"shard_id": self.shard_id, "finished": self.finished}
        write_atomic(self.manifest_path, json.dumps(data, indent=1, sort_keys=True))
        _fault_point("after-manifest", len(self.finished) - 1)


def _fault_point(name: str, problem_number: int) -> None:
    """Fault injection for crash tests: ``LRTUNE_FAULT=after-pairs:1`` SIGKILLs this
    process right after the pairs file of the second problem is written."""
    spec = os.environ.get("LRTUNE_FAULT")
    if spec and spec == f"{name}:{problem_number}":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def all_entries(out: Path) -> dict[str, dict]:
    """Finished problems of every shard manifest in ``out`` (checksums verified)."""
    entries: dict[str, dict] = {}
    for m in sorted(out.glob("manifest-s*.json")):
        shard = int(m.stem.split("-s")[1])
        store = ShardStore.__new__(ShardStore)
        store.out, store.shard_id, store.manifest_path = out, shard, m
        for pid, e in store._load_manifest().items():
            if pid in entries:
                raise ConfigError(f"problem {pid} appears in two shard manifests of {out}")
            entries[pid] = e
    return entries
