"""Run untrusted Python (generated code) in a sandboxed subprocess.

Never in-process. Layers, each stopping a different escape:

* a fresh interpreter (``python -I``: no user site, no PYTHON* env) in a temporary
  working directory that is deleted afterwards, with a minimal environment;
* resource limits: CPU seconds, address space (memory), file size, open files, no core
  dumps; a new session, and the whole process group is SIGKILLed at the wall-clock limit;
* ``RLIMIT_NPROC`` for non-root users (root is exempt from it in Linux), and the
  guard below removes every way to create a process from Python;
* no network: a fresh network namespace (``unshare -rn``) when the kernel allows it;
  always also a Python guard that disables sockets;
* a Python guard run before the program: process creation (``os.fork``, ``subprocess``,
  ``posix``/``_posixsubprocess``/``ctypes``/``multiprocessing`` imports), signals, file
  deletion, renames, chmod/chown, ``shutil.rmtree`` and writing files outside the
  working directory raise ``PermissionError``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache

_GUARD = r'''
import builtins, os, shutil, socket, subprocess, sys
def _denied(*a, **k):
    raise PermissionError("disabled in the lrtune sandbox")
for _name in ("system", "popen", "fork", "forkpty", "kill", "killpg", "putenv", "remove", "removedirs",
              "rmdir", "unlink", "rename", "renames", "replace", "truncate", "fchmod", "chmod", "fchown",
              "chown", "lchown", "chroot", "setuid", "setgid", "execv", "execve", "execvp", "execvpe",
              "execl", "execle", "execlp", "execlpe", "spawnv", "spawnve", "spawnl", "posix_spawn",
              "posix_spawnp", "fchdir", "chdir"):
    if hasattr(os, _name):
        setattr(os, _name, _denied)
for _name in ("rmtree", "move", "chown"):
    setattr(shutil, _name, _denied)
subprocess.Popen = _denied
subprocess.run = subprocess.call = subprocess.check_call = subprocess.check_output = _denied
socket.socket = _denied
socket.create_connection = socket.socket_pair = socket.socketpair = _denied
socket.getaddrinfo = _denied
subprocess._fork_exec = _denied
for _mod in ("multiprocessing", "ctypes", "_ctypes", "posix", "_posixsubprocess", "_signal", "signal", "pty",
             "_socket", "ssl", "resource"):
    sys.modules[_mod] = None
import io
_open, _os_open, _home = builtins.open, os.open, os.path.realpath(os.getcwd())
def _inside(path):
    p = os.path.realpath(os.fspath(path)) if not isinstance(path, int) else _home
    return p == _home or p.startswith(_home + os.sep)
def _guarded_open(file, mode="r", *a, **k):
    if any(c in mode for c in "wax+") and not _inside(file):
        raise PermissionError("writing outside the sandbox directory is disabled")
    return _open(file, mode, *a, **k)
def _guarded_os_open(path, flags, *a, **k):
    if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC) and not _inside(path):
        raise PermissionError("writing outside the sandbox directory is disabled")
    return _os_open(path, flags, *a, **k)
builtins.open = io.open = _guarded_open
os.open = _guarded_os_open
del _denied, _name, _mod
'''


@dataclass(frozen=True)
class SandboxResult:
    """``status``: passed | failed | timeout. ``passed`` is True only for exit 0 in time."""

    status: str
    returncode: int | None
    seconds: float
    output: str

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@lru_cache(maxsize=1)
def _netns_prefix() -> tuple[str, ...]:
    """``("unshare", "-rn")`` when unprivileged network namespaces work here, else ()."""
    exe = shutil.which("unshare")
    if not exe:
        return ()
    try:
        ok = subprocess.run([exe, "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return ()
    return (exe, "-rn") if ok else ()


def _own_process_count() -> int:
    uid = os.getuid()
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                n += os.stat(f"/proc/{d}").st_uid == uid
            except OSError:
                pass
    return n


def _limits(timeout_s: float, memory_mb: int, nproc: int | None):
    def apply() -> None:  # runs in the child between fork and exec
        import resource

        os.setsid()
        cpu = int(timeout_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        mem = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 2**20, 16 * 2**20))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return apply


def run_python(program: str, *, timeout_s: float = 10.0, memory_mb: int = 1024) -> SandboxResult:
    """Run ``program`` (after the guard) in a sandboxed ``python -I``; see module docstring."""
    nproc = None if os.geteuid() == 0 else _own_process_count() + 8
    workdir = tempfile.mkdtemp(prefix="lrtune-sandbox-")
    try:
        path = os.path.join(workdir, "program.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(_GUARD + "\n" + program + "\n")
        env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
               "OMP_NUM_THREADS": "1"}
        cmd = [*_netns_prefix(), sys.executable, "-I", "-B", path]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, preexec_fn=_limits(timeout_s, memory_mb, nproc))
        try:
            out, _ = proc.communicate(timeout=timeout_s)
            status = "passed" if proc.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            status = "timeout"
            out = b""
        finally:
            _kill_group(proc)
        seconds = time.perf_counter() - t0
        text = (out or b"").decode("utf-8", "replace")[-2000:]
        return SandboxResult(status=status, returncode=proc.returncode, seconds=seconds, output=text)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole session/process group, then reap the child."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=5)
    except (subprocess.TimeoutExpired, ValueError):
        pass
    if proc.poll() is None:
        proc.kill()
        proc.wait()
