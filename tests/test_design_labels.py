"""The design page's module tables say which modules are pure; a pure module reads no file,
starts no process and reads no environment."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IO = re.compile(
    r"\bopen\(|\.read_text\(|\.write_text\(|\.read_bytes\(|\.write_bytes\(|\bsubprocess\b|\.is_file\(|\.exists\("
    r"|\bos\.environ\b|\bjson\.load\(|\.mkdir\(|\bread_json\(|\bread_meta\("
)


def pure_modules() -> list[str]:
    rows = (ROOT / "docs/design.md").read_text().splitlines()
    return [r.split("`")[1] for r in rows if r.startswith("| `") and r.rstrip().endswith("| yes |")]


def test_modules_the_design_page_calls_pure_do_no_file_process_or_environment_io():
    mods = pure_modules()
    assert len(mods) > 20  # the tables were read
    found = {m: sorted(set(IO.findall((ROOT / m).read_text()))) for m in mods}
    assert {m: hits for m, hits in found.items() if hits} == {}
