"""Reading a dataset never changes it: a committed problem whose parts a crash left staged is
read where it lies (only ``lrtune collect``, the writer, rolls it forward), and a manifest entry
that points outside its own dataset is refused before anything is read or renamed."""

from __future__ import annotations

import json
import os

import pytest

from lrtune.errors import ConfigError
from tests.test_collect import _tiny_dataset


def _tree(root):
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*"))


def test_a_committed_problem_left_staged_by_a_crash_is_read_where_it_lies_and_nothing_is_renamed(tmp_path):
    from lrtune.dataset import load_tables
    from lrtune.store import ShardStore, _staged, all_entries

    root = tmp_path / "data"
    _tiny_dataset(root, "gsm8k", ["a", "b"])
    final = root / "pairs" / "part-s000-p000001.parquet"
    os.replace(final, _staged(final))  # the crash window: manifest committed, parts not yet renamed
    before = _tree(root)
    entries = all_entries(root)
    pairs, _ = load_tables(root)
    assert _tree(root) == before  # reading renamed nothing
    assert entries["b"]["pairs"]["file"] == "pairs/.part-s000-p000001.parquet.staged"
    assert sorted(pairs.column("problem_id").to_pylist()) == ["a", "b"]  # every committed row, once
    store = ShardStore(root, 0)  # the writer (collect resuming) rolls it forward
    assert final.is_file() and not _staged(final).exists() and set(store.finished) == {"a", "b"}
    assert store.finished["b"]["pairs"]["file"] == "pairs/part-s000-p000001.parquet"


@pytest.mark.parametrize(
    "file",
    [
        "../victim/part-s000-p000000.parquet",
        "/etc/passwd",
        "pairs/../../x.parquet",
        "problems/part-s000-p000000.parquet",
    ],
)
def test_a_manifest_entry_outside_its_own_part_files_is_refused_and_nothing_moves(tmp_path, file):
    from lrtune.store import all_entries

    root = tmp_path / "data"
    _tiny_dataset(root, "gsm8k", ["a"])
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / ".part-s000-p000000.parquet.staged").write_bytes(b"precious")
    m = root / "manifest-s000.json"
    data = json.loads(m.read_text())
    data["finished"]["a"]["pairs"]["file"] = file  # problems/ under pairs: the wrong kind
    m.write_text(json.dumps(data))
    before, victim_before = _tree(root), _tree(victim)
    with pytest.raises(ConfigError, match="corrupt or not an lrtune manifest"):
        all_entries(root)
    assert _tree(root) == before and _tree(victim) == victim_before
