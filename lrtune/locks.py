"""Exclusive locks on output directories, so two lrtune commands never write one at once.

A command that claims an output directory takes ``fcntl.flock`` on a lock file in it (non
blocking) and holds it until the command ends (:func:`release_all`, called by the error
boundary) or the process exits (the kernel drops it even after SIGKILL, so a killed run never
leaves a stale lock). The lock file is created once, empty, and never written: a rerun that
finds nothing to do changes nothing in the folder. A leaf of the core (standard library only).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

_HELD: dict[str, int] = {}  # resolved lock file -> its open descriptor, held by this process


def hold(lock_file: Path) -> bool:
    """Take the lock on ``lock_file`` (created empty if missing) for this process; True when
    taken (or already held here), False when another process holds it."""
    key = str(Path(lock_file).resolve())
    if key in _HELD:
        return True
    fd = os.open(key, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _HELD[key] = fd
    return True


def release_all() -> None:
    """Drop every lock this process holds (the end of a command)."""
    while _HELD:
        _, fd = _HELD.popitem()
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
