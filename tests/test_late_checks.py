"""Checks made before anything runs (issue 53: validate everything before side effects): a
score round with a two-sided verifier, from a spec, before any model loads or ``--out`` is
claimed; a GPU memory cap too small for any engine, as one line."""

import os
import subprocess
import sys

import pytest

from lrtune.api import ModelConfig, check_configs
from lrtune.decoder import DecodeConfig
from lrtune.errors import ConfigError
from lrtune.memory import plan_gpu_memory
from lrtune.verifiers import VerifierSpec


@pytest.mark.parametrize("spec,one_sided", [("target_logprob", True), ("target_logprob(min)@0.4", True),
                                            ("always", True), ("random(0.3)", True), ("exact", False),
                                            ("embedding@0.9", False), ("llm_judge", False), ("target_score", False)])
def test_a_specs_one_sidedness_is_known_before_it_is_built(spec, one_sided):
    assert VerifierSpec.parse(spec).one_sided is one_sided


@pytest.mark.parametrize("verifier", ["exact", "embedding"])
def test_a_score_schedule_with_a_two_sided_verifier_is_refused_before_any_model_loads(verifier):
    models = ModelConfig(target="/nonexistent/target", draft="/nonexistent/draft", verifier=verifier)
    with pytest.raises(ConfigError, match="compares two steps"):  # not "model path not found"
        check_configs(models, DecodeConfig(method="lr", schedule="score"), progress=False)


def test_evaluate_refuses_a_score_method_with_a_two_sided_verifier_before_claiming_out(tmp_path):
    out = tmp_path / "run"
    got = subprocess.run([sys.executable, "-m", "lrtune", "evaluate", "--methods", "target,score/v=exact", "--out",
                          str(out), "--limit", "1"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert got.returncode == 2 and "compares two steps" in got.stderr and len(got.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_a_memory_cap_that_leaves_nothing_is_one_line_naming_the_flag():
    with pytest.raises(ConfigError, match="--gpu-memory-utilization is 0.01 of device 0 for target, draft; raise"):
        plan_gpu_memory({"target": 2**30, "draft": 2**29}, cap=0.01)
