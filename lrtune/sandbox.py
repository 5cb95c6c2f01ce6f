"""Run untrusted Python (generated code) in OS-level isolation.

Never in-process, never without isolation. ``run_python`` runs the program with
`bubblewrap <https://github.com/containers/bubblewrap>`_ (``bwrap``), which gives it:

* new user, PID, network, IPC, UTS and cgroup namespaces (``--unshare-all``): it sees only
  its own processes, has no network interface but loopback, and runs as ``nobody``;
* a filesystem of its own: the interpreter and system libraries read-only, a private
  tmpfs as working directory (``/sandbox``, the program read-only in it) and ``/tmp``;
  nothing else of the host exists there (no ``/etc/passwd``, no home, no project files);
* no inherited environment (``--clearenv``), a new session (no terminal), and
  ``--die-with-parent``: when the sandbox's first process dies, the kernel kills every
  process of its PID namespace, so a ``setsid`` grandchild cannot outlive the time limit;
* resource limits: CPU seconds, address space, file size, open files, no core dumps,
  and a process count cap through a ``pids`` cgroup (Linux exempts root-owned processes
  from ``RLIMIT_NPROC``, and in a user namespace started by root the sandbox's processes
  are root-owned on the host); ``RLIMIT_NPROC`` for non-root callers;
* a bounded reader: at most ``max_output`` bytes of stdout/stderr are kept (the head, and
  the tail where the success marker lands); the rest is read and dropped.

A program *passes* only when it ran to its end: the harness prints a per-run random marker
after the program's last line, and only that marker with exit status 0 counts (a program
that calls ``os._exit(0)`` early fails). The old Python guard (no process creation,
sockets, deletions, writes outside the working directory) still runs first, as defence in
depth only.

Without a working ``bwrap`` generated code is refused (:class:`SandboxUnavailable`) unless
the caller opts in with ``unsafe_exec=True`` (``--unsafe-exec``): then the program runs with
the Python guard, the limits and ``unshare -rn`` only, which is not isolation.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from lrtune.errors import LrtuneError

MAX_OUTPUT = 64 * 1024  # bytes of stdout/stderr kept (head + tail)
MAX_PROCESSES = 64  # processes (and threads) a sandbox may hold at once

_GUARD = r"""
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
"""


_MISSING = (
    "running generated code needs OS-level isolation, and bubblewrap is missing or cannot build a sandbox "
    "here: install it (Debian/Ubuntu: apt-get install bubblewrap; scripts/install.sh does), or pass "
    "--unsafe-exec to run it with the in-process Python guard only"
)


class SandboxUnavailable(LrtuneError):
    """No OS-level isolation here, and the caller did not opt in to running without it."""


_UNSAFE = {"on": os.environ.get("LRTUNE_UNSAFE_EXEC") == "1"}


def set_unsafe_exec(allowed: bool) -> None:
    """Allow generated code to run without OS-level isolation (``--unsafe-exec``)."""
    _UNSAFE["on"] = bool(allowed)


def require_isolation(unsafe_exec: bool = False) -> None:
    """Fail now (before any model loads) when generated code could not run isolated."""
    set_unsafe_exec(unsafe_exec or _UNSAFE["on"])
    if bwrap_path() is None and not _UNSAFE["on"]:
        raise SandboxUnavailable(_MISSING)


@dataclass(frozen=True)
class SandboxResult:
    """``status``: passed | failed | timeout. ``passed``: exit 0 *and* the harness marker
    printed after the program's last line (see module docstring)."""

    status: str
    returncode: int | None
    seconds: float
    output: str
    isolated: bool = True

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


def _interpreter() -> tuple[str, str]:
    """(the real interpreter binary, its installation prefix) for the sandbox's ``python``."""
    return os.path.realpath(sys.executable), os.path.realpath(sys.base_prefix)


def _bwrap_cmd(bwrap: str, program_path: str, extra_args: list[str]) -> list[str]:
    python, prefix = _interpreter()
    ro = ["/usr", "/bin", "/lib", "/lib64", "/lib32", "/etc/ld.so.cache", "/etc/alternatives"]
    cmd = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--uid", "65534", "--gid", "65534"]
    for path in ro:
        cmd += ["--ro-bind-try", path, path]
    if not (prefix == "/usr" or prefix.startswith("/usr/")):
        cmd += ["--ro-bind", prefix, prefix]
    cmd += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/sandbox",
        "--ro-bind",
        program_path,
        "/sandbox/program.py",
        "--chdir",
        "/sandbox",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "HOME",
        "/sandbox",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "PYTHONDONTWRITEBYTECODE",
        "1",
        "--setenv",
        "OMP_NUM_THREADS",
        "1",
        "--",
        python,
        "-I",
        "-B",
        "/sandbox/program.py",
        *extra_args,
    ]
    return cmd


@lru_cache(maxsize=1)
def bwrap_path() -> str | None:
    """``bwrap`` when it is installed and can build the sandbox here, else None."""
    exe = shutil.which("bwrap")
    if not exe:
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write("print('ok')\n")
    try:
        out = subprocess.run(_bwrap_cmd(exe, f.name, []), capture_output=True, timeout=30)
        return exe if out.returncode == 0 and out.stdout.strip() == b"ok" else None
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        os.unlink(f.name)


class _PidsCgroup:
    """A ``pids`` cgroup (v1 or v2) capping the sandbox's process count; inactive (no cap)
    where this process may not create one. ``kill()`` SIGKILLs what is left in it."""

    def __init__(self, limit: int) -> None:
        self.path: Path | None = None
        for root in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
            if not (root / "cgroup.procs").is_file() or (
                root == Path("/sys/fs/cgroup") and "pids" not in _read(root / "cgroup.controllers")
            ):
                continue
            path = root / f"lrtune-sandbox-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                path.mkdir()
                (path / "pids.max").write_text(str(limit))
                self.path = path
                return
            except OSError:
                try:
                    path.rmdir()
                except OSError:
                    pass

    def join(self) -> None:  # in the child, before exec
        if self.path is not None:
            (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def kill(self) -> None:
        if self.path is None:
            return
        for _ in range(50):
            pids = [int(x) for x in _read(self.path / "cgroup.procs").split()]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)
        try:
            self.path.rmdir()
        except OSError:
            pass


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _limits(timeout_s: float, memory_mb: int, nproc: int | None, cgroup: _PidsCgroup | None):
    def apply() -> None:  # runs in the child between fork and exec
        import resource

        os.setsid()
        if cgroup is not None:
            cgroup.join()
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


_HARNESS_HEAD = """
def __lrtune_marker():
    import sys as _sys
    _nonce = _sys.argv.pop(1)
    def _done():
        _sys.stdout.write("\\n" + _nonce + "\\n")
        _sys.stdout.flush()
    return _done
__lrtune_done = __lrtune_marker()
del __lrtune_marker
"""


class _BoundedReader(threading.Thread):
    """Drain a pipe, keeping its first and last ``limit // 2`` bytes."""

    def __init__(self, pipe, limit: int) -> None:
        super().__init__(daemon=True)
        self.pipe, self.half = pipe, max(1, limit // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def run(self) -> None:
        while True:
            chunk = self.pipe.read1(65536) if hasattr(self.pipe, "read1") else self.pipe.read(65536)
            if not chunk:
                return
            room = self.half - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            self.tail += chunk
            if len(self.tail) > self.half:
                self.dropped += len(self.tail) - self.half
                del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        mid = f"\n[... {self.dropped} bytes dropped ...]\n".encode() if self.dropped else b""
        return (bytes(self.head) + mid + bytes(self.tail)).decode("utf-8", "replace")


def run_python(
    program: str,
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    max_output: int = MAX_OUTPUT,
    unsafe_exec: bool | None = None,
) -> SandboxResult:
    """Run ``program`` isolated (see module docstring); ``unsafe_exec`` (default: the
    ``--unsafe-exec`` setting) allows the guard-only fallback where ``bwrap`` is missing."""
    bwrap = bwrap_path()
    unsafe = _UNSAFE["on"] if unsafe_exec is None else unsafe_exec
    if bwrap is None and not unsafe:
        raise SandboxUnavailable(_MISSING)
    nonce = "LRTUNE-DONE-" + secrets.token_hex(16)
    workdir = tempfile.mkdtemp(prefix="lrtune-sandbox-")
    cgroup = _PidsCgroup(MAX_PROCESSES) if bwrap is not None else None
    try:
        path = os.path.join(workdir, "program.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(_HARNESS_HEAD + _GUARD + "\n" + program + "\n\n__lrtune_done()\n")
        os.chmod(workdir, 0o755)
        os.chmod(path, 0o644)
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": workdir,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": "1",
        }
        if bwrap is not None:
            cmd, cwd = _bwrap_cmd(bwrap, path, [nonce]), "/"
        else:
            cmd, cwd = [*_netns_prefix(), sys.executable, "-I", "-B", path, nonce], workdir
        nproc = None if os.geteuid() == 0 else _own_process_count() + MAX_PROCESSES
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=_limits(timeout_s, memory_mb, nproc, cgroup),
        )
        reader = _BoundedReader(proc.stdout, max_output)
        reader.start()
        try:
            proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc)
            if cgroup is not None:
                cgroup.kill()
        reader.join(timeout=5)
        if not reader.is_alive():  # the pipe is ours to close (else a ResourceWarning when proc is collected)
            proc.stdout.close()
        seconds = time.perf_counter() - t0
        text = reader.text()
        lines = text.rstrip("\n").rsplit("\n", 1)
        finished = bool(lines) and lines[-1] == nonce
        if finished:
            text = lines[0] if len(lines) > 1 else ""
        status = "timeout" if timed_out else "passed" if (proc.returncode == 0 and finished) else "failed"
        return SandboxResult(
            status=status, returncode=proc.returncode, seconds=seconds, output=text[-2000:], isolated=bwrap is not None
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


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


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole session/process group, then reap the child."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
