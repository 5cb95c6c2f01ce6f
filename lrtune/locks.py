"""Exclusive locks on output directories, so two lrtune commands never write one at once.

A command that claims an output directory takes ``fcntl.flock`` (non blocking) on the directory
itself, so it leaves no file behind (a checkpoint folder holds only the checkpoint), or, where
several writers share one folder by design (collect's shards), on a lock file of its own part.
It holds the lock until the command ends (:func:`release_all`, called by the error boundary) or
the process exits (the kernel drops it even after SIGKILL, so a killed run never leaves a stale
lock). A lock file is created once, empty, and never written: a rerun that finds nothing to do
changes nothing in the folder. A leaf of the core (standard library only).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

_HELD: dict[str, int] = {}  # resolved lock file -> its open descriptor, held by this process


def hold(target: Path) -> bool:
    """Take the lock on ``target``, a directory or a lock file (created empty if missing), for
    this process; True when taken (or already held here), False when another process holds it."""
    key = str(Path(target).resolve())
    if key in _HELD:
        return True
    fd = os.open(key, os.O_RDONLY) if os.path.isdir(key) else os.open(key, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _HELD[key] = fd
    return True


@contextlib.contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Hold ``lock_file`` (created empty if missing) exclusively for a short critical section,
    waiting for another process that holds it: a check-then-write several writers of one folder
    must not interleave (collect's shards recording their shared config)."""
    fd = os.open(str(lock_file), os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def release_all() -> None:
    """Drop every lock this process holds (the end of a command)."""
    while _HELD:
        _, fd = _HELD.popitem()
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
