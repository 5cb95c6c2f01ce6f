"""Ctrl-C at any moment: one line, exit 130, nothing written half.

Python turns SIGINT into a KeyboardInterrupt in whatever Python code runs, and some of that
code runs inside native libraries (torch's and tokenizers' callbacks during imports and model
loads): there the exception cannot unwind and the process aborts with a C++ traceback. So the
``lrtune`` command (:func:`install`) handles SIGINT itself: outside a :func:`cleanup_on_interrupt`
block it prints ``lrtune: interrupted`` and leaves at once with status 130 (every write lrtune
makes is atomic, temp file then rename, and collect resumes after a kill); inside one (a block
whose ``except``/``finally`` must run, e.g. putting a checkpoint back) it raises the
KeyboardInterrupt as Python would, and the CLI's error boundary reports it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

INTERRUPTED = 130
_depth = 0


@contextlib.contextmanager
def cleanup_on_interrupt():
    """A block whose cleanup must run on Ctrl-C: SIGINT raises KeyboardInterrupt inside it."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1


def _handler(signum, frame) -> None:
    if _depth:
        raise KeyboardInterrupt
    exit_interrupted()


def exit_interrupted(say: bool = True) -> None:
    """Print the one line (unless it was printed), flush, and leave with status 130 at once:
    no unwinding, and no Python shutdown (which would re-raise a SIGINT that native code
    recorded as unhandled)."""
    try:
        if say:
            sys.stderr.write("lrtune: interrupted\n")
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except (OSError, ValueError):
        pass
    os._exit(INTERRUPTED)


def install() -> None:
    """Handle SIGINT as the module docstring says (main thread of the ``lrtune`` command)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _handler)
