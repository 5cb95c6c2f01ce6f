"""Bad input -> one line on stderr and exit status 2, before any engine starts."""

import subprocess
import sys

import pytest

from tiny_models import get_tiny_pair


def run_cli(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "lrtune", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
    )


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
    proc = run_cli(
        "decode", "What is 2+2?", "--target", str(pair.target), "--draft", str(pair.other_vocab), "--method", "lr+sd"
    )
    assert_one_line_error(proc, "vocab")


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--method", "lr", "--gamma1", "0"], "gamma1"),
        (["--method", "lr+sd", "--gamma1", "99"], "gamma1"),
        (["--method", "sd", "--gamma2", "0"], "gamma2"),
        (["--method", "lr+sd", "--gamma2", "-3"], "gamma2"),
        (["--gamma1", "two"], "gamma1"),
        (["--method", "beam"], "method"),
    ],
)
def test_gamma_and_method_out_of_range_are_one_line_errors(flags, needle):
    assert_one_line_error(run_cli("decode", "What is 2+2?", *flags), needle)


@pytest.mark.parametrize("command", ["decode", "serve"])
def test_a_schedule_for_a_method_without_lr_steps_is_one_line_before_any_model_resolves(tmp_path, command):
    missing = str(tmp_path / "no-such-model")  # refused before this path is looked at
    args = ["--method", "sd", "--schedule", "score", "--target", missing, "--draft", missing]
    proc = run_cli(command, *(["What is 2+2?"] if command == "decode" else []), *args)
    assert_one_line_error(proc, "--schedule score applies to lr and lr+sd only; --method sd has no draft steps")


@pytest.mark.parametrize("prompt", ["", "   "])
def test_empty_prompt_is_a_one_line_error(prompt):
    assert_one_line_error(run_cli("decode", prompt), "empty prompt")


def test_missing_config_file_is_a_one_line_error(tmp_path):
    assert_one_line_error(run_cli("decode", "hi", "--config", str(tmp_path / "nope.yaml")), "config file")


# ---- the one error boundary (lrtune.cli.main, lrtune.entry) ------------------------------------------------
def test_an_unexpected_error_is_one_line_naming_it_exit_1_and_debug_shows_the_traceback(monkeypatch, capsys):
    import lrtune.cli as cli

    def boom(args):
        raise ValueError("something nobody expected\nsecond line")

    monkeypatch.setattr(cli, "cmd_prepare", boom)
    assert cli.main(["prepare"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "lrtune: error: unexpected ValueError: something nobody expected (rerun with --debug for the traceback)"
    ]
    with pytest.raises(ValueError, match="nobody expected"):
        cli.main(["prepare", "--debug"])


def test_an_interrupt_wrapped_in_another_exception_still_reads_as_interrupted(monkeypatch, capsys):
    import lrtune.cli as cli

    def wrapped(args):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:  # what Python does to a Ctrl-C inside a class body's __set_name__
            raise RuntimeError("Error calling __set_name__") from e

    monkeypatch.setattr(cli, "cmd_prepare", wrapped)
    assert cli.main(["prepare"]) == 130
    assert capsys.readouterr().err.strip() == "lrtune: interrupted"


def test_every_error_line_is_bounded_in_length(monkeypatch, capsys):
    import lrtune.cli as cli
    from lrtune.errors import MAX_MESSAGE, ConfigError

    monkeypatch.setattr(cli, "cmd_prepare", lambda args: (_ for _ in ()).throw(ConfigError("x" * 100_000)))
    assert cli.main(["prepare"]) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and len(line) <= len("lrtune: error: ") + MAX_MESSAGE


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.8, 1.2, 2.0])
def test_ctrl_c_at_any_point_is_one_line_and_exit_130(delay):
    import os
    import signal
    import time

    pair = get_tiny_pair()
    argv = [
        "lrtune",
        "decode",
        "hi",
        "--target",
        str(pair.target),
        "--draft",
        str(pair.draft),
        "--backend",
        "transformers",
        "--device",
        "cpu",
        "--method",
        "lr",
        "--max-new-tokens",
        "300",
        "--max-step-tokens",
        "16",
        "--max-model-len",
        "512",
    ]
    # `python -m lrtune`, after one line once the interpreter is up: a Ctrl-C before that point
    # (before Python imported `site`) is Python's own fatal error, outside any program's reach;
    # the delays count from there, so a busy machine cannot move them into interpreter start-up
    start = (
        f"import runpy, sys; print('ready', flush=True); sys.argv = {argv!r}; "
        "runpy.run_module('lrtune', run_name='__main__', alter_sys=True)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", start],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the decode finished before the interrupt")
    assert proc.returncode == 130 and err.strip() == "lrtune: interrupted", (proc.returncode, err)


def test_inside_a_cleanup_block_ctrl_c_raises_so_the_cleanup_runs():
    """lrtune.interrupts: a block marked cleanup_on_interrupt gets the KeyboardInterrupt (its
    except/finally runs, e.g. a retrain puts the old checkpoint back)."""
    import signal

    from lrtune import interrupts

    ran = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.cleanup_on_interrupt():
            try:
                interrupts._handler(signal.SIGINT, None)
            finally:
                ran.append("cleanup")
    assert ran == ["cleanup"] and interrupts._depth == 0
