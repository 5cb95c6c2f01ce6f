"""The README, the docs site and the results pages: short, built strictly, generated from files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import render_results as rr

ROOT = Path(__file__).resolve().parents[1]


def test_every_results_page_matches_its_result_files():
    stale = [
        str(p.relative_to(ROOT))
        for p, text in rr.pages().items()
        if not p.is_file() or p.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"run `python -m benchmarks.render_results`: {stale}"


def test_every_result_file_and_script_belongs_to_a_study():
    assert rr.unclaimed_files() == []


def test_the_readme_is_short_and_free_of_project_history():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert not re.search(r"\bissues? \d+|\(issue|measured before|this session", text, re.I)


def test_the_docs_pages_carry_no_issue_numbers():
    hits = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in (ROOT / "docs").rglob("*.md")
        for m in re.finditer(r"\bissues? \d+\b", p.read_text(encoding="utf-8"), re.I)
    ]
    assert hits == []


def test_the_fresh_machine_commands_are_the_same_in_readme_ci_and_docs():
    tests_cmd = "bash scripts/install.sh cpu,dev && .venv/bin/python -m pytest -q"
    demo_cmd = "bash scripts/install.sh cpu,models && .venv/bin/lrtune demo"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert tests_cmd in readme and tests_cmd in start and tests_cmd in ci
    assert demo_cmd in readme and demo_cmd in start


def test_the_docs_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra (part of dev) is not installed")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "site" / "results" / "index.html").is_file()
    assert "LookaheadDecoder" in (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "path,expected",
    [
        (".a.b", 1),
        ('.a["x y"]', 2),
        (".l[1]", 4),
        (".l[9]", None),
        (".missing.b", None),
        (".a.b.c", None),
    ],
)
def test_a_path_reads_keys_quoted_keys_and_list_items(path, expected):
    doc = {"a": {"b": 1, "x y": 2}, "l": [3, 4]}
    assert rr.read_path(doc, path) == expected


def test_a_template_formats_values_and_prints_a_dash_for_missing_ones():
    doc = {"m": {"sd": {"s": 1.444, "ok": True}, "lr+sd": {"s": None}}, "t": {"a": 2, "b": 3}}
    assert rr.fill('{.m.sd.s|.2f}× {.m["lr+sd"].s|.2f}', doc) == "1.44× —"
    assert rr.fill("{@key}: {.s|.1f} {.ok}", doc, doc["m"]["sd"], "sd") == "sd: 1.4 yes"
    assert rr.fill("{#$.t} {+$.t} {$.m[@key].s|.0f}", doc, None, "sd") == "2 5 1"


def test_a_template_with_a_bad_field_is_an_error_not_a_guess():
    with pytest.raises(rr.StudyError):
        rr.fill("{m.sd}", {"m": {"sd": 1}})
    with pytest.raises(rr.StudyError):
        rr.fill("{.m|.2f}", {"m": "text"})
    with pytest.raises(rr.StudyError):
        rr.fill("{%finished}", {}, None, "sd")
