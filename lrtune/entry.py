"""The ``lrtune`` command's entry point (``lrtune`` script and ``python -m lrtune``): the
CLI's modules import inside it, so Ctrl-C during start-up is one line and exit 130 too."""

from __future__ import annotations

import os
import sys

INTERRUPTED = 130


def main() -> int:
    try:
        from lrtune.cli import main as cli_main

        code = cli_main()
    except KeyboardInterrupt:
        sys.stderr.write("lrtune: interrupted\n")
        code = INTERRUPTED
    if code == INTERRUPTED:
        # CPython marks a KeyboardInterrupt raised inside code that C extensions run at import
        # (PyRun_* calls) as unhandled even when lrtune caught it, and then kills its own process
        # with SIGINT at exit: leave now, streams flushed, with the status the CLI promises.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(INTERRUPTED)
    return code
