"""The code passes ruff's lint (pyproject ``[tool.ruff]``: pycodestyle errors and warnings,
lines up to 120, pyflakes) and is formatted as ``ruff format`` writes it, in the default suite so
CI runs it."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", str(ROOT)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]


def test_the_code_is_formatted_by_ruff_format():
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", str(ROOT)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]


def test_ruff_reads_the_projects_rules(tmp_path):
    """The rule set applies: an unused import in a project file is reported (so a clean run means something)."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n" + "x = '" + "a" * 130 + "'\n")
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1 and "F401" in out.stdout and "E501" in out.stdout


def test_no_module_of_lrtune_is_over_600_lines():
    """Small modules (design §6): every module of the library and its stages stays within 600
    lines as ruff formats it."""
    roots = [ROOT / d for d in ("lrtune", "data_gen", "train", "eval", "policies")]
    long = {
        str(p.relative_to(ROOT)): n
        for r in roots
        for p in r.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600
    }
    assert not long, long
