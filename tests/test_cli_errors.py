"""Bad input -> one line on stderr and exit status 2, before any engine starts."""

import subprocess
import sys

import pytest

from tiny_models import get_tiny_pair


def run_cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "lrtune", *args], capture_output=True, text=True, timeout=timeout,
                          env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})


def assert_one_line_error(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "error" in lines[0] and "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0]


def test_unknown_model_path_is_a_one_line_error(tmp_path):
    proc = run_cli("decode", "What is 2+2?", "--target", str(tmp_path / "no-such-model"), "--method", "target")
    assert_one_line_error(proc, "no-such-model")


def test_draft_target_vocabulary_mismatch_with_sd_is_a_one_line_error():
    pair = get_tiny_pair()
    proc = run_cli("decode", "What is 2+2?", "--target", str(pair.target), "--draft", str(pair.other_vocab),
                   "--method", "lr+sd")
    assert_one_line_error(proc, "vocab")


@pytest.mark.parametrize("flags, needle", [
    (["--method", "lr", "--gamma1", "0"], "gamma1"),
    (["--method", "lr+sd", "--gamma1", "99"], "gamma1"),
    (["--method", "sd", "--gamma2", "0"], "gamma2"),
    (["--method", "lr+sd", "--gamma2", "-3"], "gamma2"),
    (["--gamma1", "two"], "gamma1"),
    (["--method", "beam"], "method"),
])
def test_gamma_and_method_out_of_range_are_one_line_errors(flags, needle):
    assert_one_line_error(run_cli("decode", "What is 2+2?", *flags), needle)


@pytest.mark.parametrize("prompt", ["", "   "])
def test_empty_prompt_is_a_one_line_error(prompt):
    assert_one_line_error(run_cli("decode", prompt), "empty prompt")


def test_missing_config_file_is_a_one_line_error(tmp_path):
    assert_one_line_error(run_cli("decode", "hi", "--config", str(tmp_path / "nope.yaml")), "config file")
