"""Text is UTF-8 whatever the locale: under ``LC_ALL=C PYTHONUTF8=0`` (an ASCII locale) the
command re-runs itself in Python's UTF-8 mode, so a non-ASCII prompt is read as typed and
"α" or "—" print after the work is done."""

import json
import os
import subprocess
import sys

from lrtune.entry import needs_utf8_mode
from tiny_models import get_tiny_pair


def test_only_a_non_utf8_locale_asks_for_utf8_mode():
    assert needs_utf8_mode(0, "ANSI_X3.4-1968") and needs_utf8_mode(0, "ascii") and needs_utf8_mode(0, "latin-1")
    assert not needs_utf8_mode(0, "UTF-8") and not needs_utf8_mode(0, "utf8") and not needs_utf8_mode(1, "ascii")


def test_an_ascii_locale_reads_a_non_ascii_prompt_and_prints_greek_letters():
    pair = get_tiny_pair()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LC_") and k not in ("LANG", "LRTUNE_REEXEC")},
        "LC_ALL": "C",
        "PYTHONUTF8": "0",
        "HF_HUB_OFFLINE": "1",
    }
    base = [
        sys.executable,
        "-m",
        "lrtune",
        "decode",
        "Café costs 3 — α?",
        "--target",
        str(pair.target),
        "--draft",
        str(pair.draft),
        "--backend",
        "transformers",
        "--verifier",
        "exact",  # the prompt is what this test is about: no embedding model to load
        "--max-new-tokens",
        "8",
        "--max-step-tokens",
        "8",
        "--max-model-len",
        "512",
    ]
    table = subprocess.run(base, capture_output=True, env=env, timeout=300)
    assert table.returncode == 0, table.stderr.decode("utf-8", "replace")[-500:]
    assert "α1 (step acceptance)" in table.stdout.decode("utf-8")
    out = subprocess.run(base + ["--json"], capture_output=True, env=env, timeout=300)
    utf8 = subprocess.run(
        base + ["--json"], capture_output=True, timeout=300, env={**env, "LC_ALL": "C.UTF-8", "PYTHONUTF8": "1"}
    )
    assert out.returncode == 0 == utf8.returncode
    # the same greedy answer as in a UTF-8 locale: the prompt was read as typed
    assert json.loads(out.stdout.decode("utf-8"))["text"] == json.loads(utf8.stdout.decode("utf-8"))["text"]
