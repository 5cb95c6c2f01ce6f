"""The ``lrtune`` command's entry point (``lrtune`` script and ``python -m lrtune``): text is
UTF-8 whatever the locale (:func:`ensure_utf8_mode`), and Ctrl-C is handled from the first
moment (:mod:`lrtune.interrupts`), before the CLI's modules import."""

from __future__ import annotations

import os
import sys

from lrtune.interrupts import INTERRUPTED, exit_interrupted, install

REEXEC_ENV = "LRTUNE_UTF8_REEXEC"  # set in the re-run process: re-run once at most


def needs_utf8_mode(utf8_mode: int, encoding: str) -> bool:
    """Whether the interpreter reads arguments and files in a non-UTF-8 locale encoding (e.g.
    ``ascii`` under ``LC_ALL=C PYTHONUTF8=0``): then a prompt like "Café" arrives as surrogate
    escapes and printing "α" fails after the work is done."""
    return not utf8_mode and encoding.lower().replace("-", "").replace("_", "") != "utf8"


def ensure_utf8_mode() -> None:
    """Re-run this command once in Python's UTF-8 mode (``-X utf8``: arguments, standard
    streams and files default to UTF-8) when the locale would make them anything else."""
    import locale

    if os.environ.get(REEXEC_ENV) or not needs_utf8_mode(sys.flags.utf8_mode, locale.getpreferredencoding(False)):
        return
    os.environ[REEXEC_ENV] = "1"
    os.execv(sys.executable, [sys.executable, "-X", "utf8", *sys.orig_argv[1:]])


def main() -> int:
    ensure_utf8_mode()
    install()
    try:
        from lrtune.cli import main as cli_main

        code = cli_main()
    except KeyboardInterrupt:
        exit_interrupted()
    if code == INTERRUPTED:  # the CLI reported an interrupt raised inside a cleanup block: leave now
        exit_interrupted(say=False)
    return code
