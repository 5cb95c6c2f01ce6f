"""Peak resident memory is sampled over the process tree, children included."""

from __future__ import annotations

import subprocess
import sys
import time

from lrtune.peakmem import PeakMemory, tree_rss_bytes


def test_the_peak_counts_a_child_process_that_held_memory_while_it_ran():
    with PeakMemory(interval=0.05) as pm:
        base = tree_rss_bytes()
        # a child that holds ~300 MiB until it has been seen, then exits
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096]); "
                "sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline()",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout.readline().strip() == "ready"  # wait for readiness, never a fixed sleep
        seen = tree_rss_bytes()
        deadline = time.monotonic() + 60
        while pm.peak_bytes - base < 250 * 2**20 and time.monotonic() < deadline:  # until the sampler has seen it
            time.sleep(0.01)
        child.stdin.write("done\n")
        child.stdin.flush()
        child.wait(timeout=60)
    assert seen - base > 250 * 2**20
    assert pm.peak_bytes - base > 250 * 2**20 and pm.peak_gib == pm.peak_bytes / 2**30


TRIM_CHILD = """
import psutil
from lrtune.peakmem import trim_heap
rss = lambda: psutil.Process().memory_info().rss / 2**20
blocks = [bytearray(60_000) for _ in range(5000)]  # ~290 MiB of heap chunks, below mmap's threshold
for b in blocks:
    b[::4096] = b"x" * len(b[::4096])
keep = blocks[::50]  # survivors scattered through the heap pin it: free() alone returns little
del blocks
freed = rss()
print(trim_heap(), freed - rss())
"""


def test_trim_heap_hands_freed_heap_pages_back_to_the_os():
    import platform

    import pytest

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("malloc_trim is glibc's")
    out = subprocess.run([sys.executable, "-c", TRIM_CHILD], capture_output=True, text=True, check=True).stdout
    ok, returned_mib = out.split()
    assert ok == "True" and float(returned_mib) > 150


def test_a_child_forked_from_the_run_does_not_count_the_pages_it_shares_twice():
    """PSS, not RSS: a forked child shares its parent's pages, and the tree holds them once."""
    import os
    import platform

    import pytest

    if platform.system() != "Linux":
        pytest.skip("PSS is Linux's")
    block = bytearray(300 * 2**20)
    block[::4096] = b"x" * len(block[::4096])  # touched: resident
    before = tree_rss_bytes()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child holds the shared pages until the parent has measured
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    try:
        during = tree_rss_bytes()
    finally:
        os.write(w, b"x")
        os.waitpid(pid, 0)
    assert during - before < 100 * 2**20, (before, during)  # RSS would add another 300 MiB


MAXRSS_CHILD = """
import psutil
from lrtune.peakmem import max_rss_gib
before = max_rss_gib()  # a forked child starts from its parent's resident set: its mark may be above its own
now = psutil.Process().memory_info().rss / 2**30
b = bytearray(int((max(before - now, 0.0) + 300 / 1024) * 2**30))  # up to 300 MiB past the mark
b[::4096] = b"x" * len(b[::4096])
del b  # freed: the high-water mark keeps it
print(before, max_rss_gib())
"""


def test_the_high_water_rss_keeps_memory_freed_before_it_was_read():
    """max_rss_gib is the kernel's high-water mark: a peak between two samples is not lost."""
    import platform

    import pytest

    if platform.system() not in ("Linux", "Darwin"):
        pytest.skip("getrusage's ru_maxrss")
    out = subprocess.run([sys.executable, "-c", MAXRSS_CHILD], capture_output=True, text=True, check=True).stdout
    before, after = map(float, out.split())
    assert after - before > 250 / 1024


def test_ru_maxrss_is_kib_on_linux_and_bytes_on_macos():
    from lrtune.peakmem import ru_maxrss_gib

    assert ru_maxrss_gib(8 * 2**20, "linux") == 8.0 and ru_maxrss_gib(8 * 2**30, "darwin") == 8.0


def test_the_high_water_mark_of_a_process_is_read_while_it_runs_and_none_once_it_is_gone():
    import os
    import platform

    import pytest

    from lrtune.peakmem import high_water_bytes

    if platform.system() != "Linux":
        pytest.skip("VmHWM is Linux's")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    assert high_water_bytes(os.getpid()) > 10 * 2**20 and high_water_bytes(child.pid) is None


def test_the_heap_is_trimmed_only_once_a_call_has_left_more_than_the_slack():
    from lrtune.peakmem import HeapTrimmer

    rss, trims = [1000], []

    def trim():
        trims.append(rss[0])
        rss[0] = 1010  # what the heap kept after the trim

    heap = HeapTrimmer(slack_bytes=100, rss=lambda: rss[0], trim=trim)
    heap.mark()
    rss[0] = 1100  # grew by exactly the slack: no trim
    assert heap.after_call() is False and trims == []
    rss[0] = 1101
    assert heap.after_call() is True and trims == [1101] and heap.trims == 1
    assert heap.level == 1010  # the new level is what the trim left
    rss[0] = 1050
    assert heap.after_call() is False
    rss[0] = 900  # the set shrank (an engine closed): the level follows it down
    assert heap.after_call() is False and heap.level == 900
    rss[0] = 1001
    assert heap.after_call() is True and len(trims) == 2


def test_the_heap_trimmer_reads_this_process_resident_set():
    import platform

    import psutil
    import pytest

    from lrtune.peakmem import _own_rss_bytes

    if platform.system() != "Linux":
        pytest.skip("reads /proc/self/statm")
    mine, theirs = _own_rss_bytes(), psutil.Process().memory_info().rss
    assert abs(mine - theirs) < 0.1 * theirs


def test_a_reset_during_a_slow_sample_does_not_bring_the_old_peak_back(monkeypatch):
    import threading

    from lrtune import peakmem

    pm = peakmem.PeakMemory(interval=3600)  # no sampler thread: samples are taken by hand
    pm.peak_bytes = 9 * 2**30  # the previous window's peak
    reading, release = threading.Event(), threading.Event()

    def slow_rss():
        reading.set()
        release.wait(10)
        return 7 * 2**30  # what the process holds now

    monkeypatch.setattr(peakmem, "tree_rss_bytes", slow_rss)
    sampler = threading.Thread(target=pm._sample)
    sampler.start()
    assert reading.wait(10)
    pm.reset()  # while the sample is being read
    release.set()
    sampler.join(10)
    assert pm.peak_bytes == 7 * 2**30
