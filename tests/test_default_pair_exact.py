"""On the real default pair, ``--numerics exact`` makes target, sd and lr+sd with the never
verifier write the same tokens (a few dozen tokens of one gsm_symbolic problem, decoded alone
and batched), through the drift benchmark itself (benchmarks/lossless.py), in its own process
(the pair's float32 engines hold about 13 GiB). Skipped where the default pair is not built
(install the ``models`` extra and run any lrtune command once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

from lrtune.default_pair import built_default_model  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_exact_numerics_make_lossless_decodes_of_the_default_pair_identical(tmp_path):
    if built_default_model("target") is None or built_default_model("draft") is None:
        pytest.skip("the default pair is not built here (bash scripts/install.sh cpu,models; lrtune doctor)")
    out = tmp_path / "exact.json"
    cmd = [sys.executable, "-m", "benchmarks.lossless", "--numerics", "exact", "--problems", "1", "--alone", "1"]
    cmd += ["--methods", "target,sd,lr+sd", "--max-new-tokens", "40", "--max-step-tokens", "24", "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    pairs = res["pairs"]
    assert set(pairs) == {"target/alone vs target", "target vs sd", "target vs lr+sd", "sd vs lr+sd"}
    for name, drift in pairs.items():
        assert drift["identical"] == drift["problems"] == 1, (name, drift)
    assert len(res["methods"]["target"]["token_ids"][0]) == 40
