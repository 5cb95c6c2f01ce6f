"""lrtune.runfiles: atomic writes."""

from __future__ import annotations

import os

from lrtune.runfiles import write_atomic


def test_write_atomic_leaves_a_file_with_the_same_content_untouched_and_rewrites_a_changed_one(tmp_path):
    path = tmp_path / "card.md"
    write_atomic(path, "a\n")
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    write_atomic(path, b"a\n")  # same bytes (str or bytes): no write
    assert path.stat().st_mtime_ns == 1_000_000_000
    write_atomic(path, "b\n")
    assert path.read_text() == "b\n" and path.stat().st_mtime_ns != 1_000_000_000
    assert [p.name for p in tmp_path.iterdir()] == ["card.md"]  # no temp file left behind
