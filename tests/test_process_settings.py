"""The ``lrtune`` command re-runs itself once with the process settings it needs
(:mod:`lrtune.entry`): UTF-8 mode under a non-UTF-8 locale (``test_locale.py``) and glibc's
heap tunables, which make a freed large buffer leave the resident set."""

import os
import subprocess
import sys

import pytest

from lrtune.entry import MALLOC_TUNABLES, REEXEC_ENV, TUNABLES_ENV, _libc, _thp_setting, malloc_tunables, process_plan

MADVISE = "always [madvise] never\n"


def test_the_heap_tunables_apply_only_to_glibc_2_35_or_later_with_huge_pages_and_no_user_value():
    assert malloc_tunables({}, ("glibc", "2.36"), MADVISE) == MALLOC_TUNABLES
    assert malloc_tunables({}, ("glibc", "2.35"), "[always] madvise never") == MALLOC_TUNABLES
    assert malloc_tunables({}, ("glibc", "2.34"), MADVISE) is None  # no hugetlb tunable yet
    assert malloc_tunables({}, ("glibc", "2.36"), "always madvise [never]") is None  # 4 KiB faults: slower
    assert malloc_tunables({}, ("glibc", "2.36"), "") is None  # no such kernel setting (not Linux)
    assert malloc_tunables({}, ("", ""), MADVISE) is None  # musl, macOS
    assert malloc_tunables({TUNABLES_ENV: "glibc.malloc.arena_max=2"}, ("glibc", "2.36"), MADVISE) is None
    assert malloc_tunables({}, ("glibc", "bogus"), MADVISE) is None


def test_the_re_run_adds_utf8_mode_and_the_tunables_once():
    glibc = ("glibc", "2.36")
    assert process_plan({}, 0, "ascii", glibc, MADVISE) == {"PYTHONUTF8": "1", TUNABLES_ENV: MALLOC_TUNABLES}
    assert process_plan({}, 1, "ascii", glibc, MADVISE) == {TUNABLES_ENV: MALLOC_TUNABLES}
    assert process_plan({}, 0, "UTF-8", ("", ""), MADVISE) is None
    assert process_plan({REEXEC_ENV: "1"}, 0, "ascii", glibc, MADVISE) is None  # already the re-run


HEAP_CHILD = """
import ctypes, os
from lrtune.entry import ensure_process_settings
ensure_process_settings()  # the lrtune command's first step: re-runs this very code once
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
big = libc.malloc(16 << 20); ctypes.memset(big, 1, 16 << 20); libc.free(big)  # raises glibc's own threshold
before = rss()
bufs = [libc.malloc(6 << 20) for _ in range(20)]  # 120 MiB of 6 MiB buffers, as an engine step's activations
for b in bufs:
    ctypes.memset(b, 1, 6 << 20)
keep = libc.malloc(512 << 10); ctypes.memset(keep, 1, 512 << 10)  # a later survivor pins the heap's top
for b in bufs:
    libc.free(b)
print(os.environ.get("GLIBC_TUNABLES"), rss() - before)
"""


def test_the_command_runs_with_the_tunables_so_freed_large_buffers_leave_the_resident_set():
    env = {k: v for k, v in os.environ.items() if k not in (TUNABLES_ENV, REEXEC_ENV)}
    if malloc_tunables(env, _libc(), _thp_setting()) is None:
        pytest.skip("the tunables do not apply on this machine")

    def run(e):
        return subprocess.run([sys.executable, "-c", HEAP_CHILD], env=e, capture_output=True, text=True, check=True)

    tunables, kept = run(env).stdout.split()
    assert tunables == MALLOC_TUNABLES and float(kept) < 8
    # the control: glibc's defaults keep the freed buffers resident
    _, kept_default = run({**env, REEXEC_ENV: "1"}).stdout.split()
    assert float(kept_default) > 100


def test_without_signal_masks_the_re_run_does_not_touch_sigint(monkeypatch):
    import signal

    from lrtune import entry

    monkeypatch.delattr(signal, "pthread_sigmask")  # Windows has none
    entry._sigint_mask(block=True)
    entry._sigint_mask(block=False)
