"""The one gate between a command's checks and its side effects.

Every command runs in two phases. Phase 1 reads and checks everything: flags, config files,
datasets, checkpoints, model directories, the environment (``VLLM_PLUGINS``, writable caches
and outputs). Phase 2 acts. :func:`passed` marks the line between them, once per command:
nothing before it may

* write, create, rename or remove a file or folder (outputs, the model cache, inputs);
* load a model's weights (transformers, peft, vLLM, safetensors, torch).

(Probes that leave nothing behind are checks, not acts: ``serve`` binds its port for a moment
to see that it is free.)

So a command refused in phase 1 leaves no trace, and the corrected command just works.

:func:`watch` is the spy that proves it: it records every such side effect made under the
folders it watches before the gate passes (Python's audit hooks see every file operation,
whichever library makes it; the loaders are wrapped while it watches). The test over every
command runs each one up to its gate under it (``tests/test_side_effect_gate.py``). A leaf of
the core (standard library only; the loaders are imported only while watching).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_PASSED: list[str] = []  # the command whose gate has passed in this process (empty: phase 1)
_WATCHES: list[Watch] = []  # the spies now open
_HOOKED: list[bool] = []  # [True] once the audit hook is installed (it cannot be removed)

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# audit events that change the file system: event -> indices of its path arguments
_PATH_EVENTS = {
    "os.mkdir": (0,),
    "os.rename": (0, 1),  # os.replace too
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.truncate": (0,),
    "os.symlink": (0, 1),
    "os.link": (0, 1),
    "os.chmod": (0,),
    "os.utime": (0,),
    "shutil.copyfile": (1,),
    "shutil.copytree": (1,),
    "shutil.move": (0, 1),
    "shutil.rmtree": (0,),
}


class GatePassed(BaseException):
    """Raised by a stop placed at the gate (:func:`watch` with ``stop=True``): the command
    reached its gate; a BaseException, so no command's error handling turns it into a result."""


def passed(command: str) -> None:
    """Mark that ``command`` has checked every input and may now act (idempotent: a stage
    run by the pipeline after the pipeline's own gate changes nothing)."""
    if not _PASSED:
        _PASSED.append(command)
    for w in _WATCHES:
        if w.reached is None:
            w.reached = command
            if w.stop:
                raise GatePassed(command)


def reset() -> None:
    """Back to phase 1 (a command has ended; the next one in this process checks again)."""
    _PASSED.clear()


@dataclass
class Watch:
    """What :func:`watch` saw: ``effects`` made before the gate (``"open-for-write /x/y"``,
    ``"load-model transformers ..."``), the command whose gate was ``reached`` (None: no
    gate passed) and, when asked for (``everything``), the file operations ``after`` it as
    ``(operation, path, ...)`` in order (``open-append`` for a file opened to append)."""

    roots: tuple[Path, ...]
    stop: bool
    effects: list[str] = field(default_factory=list)
    reached: str | None = None
    everything: bool = False
    after: list[tuple[str, ...]] = field(default_factory=list)

    def under_roots(self, path) -> bool:
        try:
            p = Path(os.fsdecode(path)).absolute()
        except (TypeError, ValueError):
            return False
        return any(p == r or r in p.parents for r in self.roots)

    def record(self, what: str, paths: tuple[str, ...] = ()) -> None:
        """Keep one side effect on ``paths`` (absolute; named by the first under a root)."""
        if self.reached is None:
            self.effects.append(" ".join([what, *[p for p in paths if self.under_roots(p)][:1]]))
        elif self.everything:
            self.after.append((what, *paths))


def _write_open(args: tuple) -> str | None:
    """``open-append``, ``open-for-write`` or None (a read) for the audit event ``open``'s arguments."""
    _path, mode, flags = (tuple(args) + (None, None, None))[:3]
    if isinstance(mode, str):
        return "open-append" if "a" in mode else "open-for-write" if any(c in mode for c in "wx+") else None
    if not isinstance(flags, int) or not flags & _WRITE_FLAGS:
        return None
    return "open-append" if flags & os.O_APPEND else "open-for-write"


def _audit(event: str, args: tuple) -> None:
    if not _WATCHES or (_PASSED and not any(w.everything for w in _WATCHES)):
        return
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        what = _write_open(args)
        if what is None:
            return
        paths = (args[0],)
    elif event in _PATH_EVENTS:
        paths, what = tuple(args[i] for i in _PATH_EVENTS[event] if i < len(args)), event
    else:
        return
    for w in _WATCHES:
        if any(isinstance(p, (str, bytes, os.PathLike)) and w.under_roots(p) for p in paths):
            w.record(what, tuple(str(Path(os.fsdecode(p)).absolute()) for p in paths))


def _loader_wrappers(stack: contextlib.ExitStack) -> None:
    """Wrap the functions that load a model's weights, so a load before the gate is recorded."""
    import importlib

    targets = [
        ("transformers.modeling_utils", "PreTrainedModel", "from_pretrained"),
        ("peft", "PeftModel", "from_pretrained"),
        ("safetensors.torch", None, "load_file"),
        ("torch", None, "load"),
        ("vllm", "LLM", "__init__"),
    ]
    for module, owner, name in targets:
        try:
            mod = importlib.import_module(module)
        except Exception:  # noqa: BLE001 - a library this install lacks loads nothing
            continue
        holder = getattr(mod, owner) if owner else mod
        original = holder.__dict__[name] if owner else getattr(holder, name)
        label = f"load-model {module}.{owner + '.' if owner else ''}{name}"
        stack.callback(setattr, holder, name, original)
        setattr(holder, name, _wrap(original, label))


def _wrap(original, label: str):
    is_classmethod = isinstance(original, classmethod)
    func = original.__func__ if is_classmethod else original

    @functools.wraps(func)  # vLLM reads LLM.__init__'s signature
    def spied(*args, **kwargs):
        if not _PASSED:
            for w in _WATCHES:
                w.record(label, ())
        return func(*args, **kwargs)

    return classmethod(spied) if is_classmethod else spied


@contextlib.contextmanager
def watch(*roots: str | Path, stop: bool = False, everything: bool = False) -> Iterator[Watch]:
    """Record every side effect under ``roots`` (and every model load, wherever)
    made before the gate passes; with ``stop`` the command ends at its gate (:class:`GatePassed`
    is caught here); with ``everything`` the file operations after the gate are kept too
    (``Watch.after``). Starts in phase 1; the gate is reset when the block ends."""
    if not _HOOKED:
        sys.addaudithook(_audit)  # audit hooks cannot be removed: it is idle unless a watch is open
        _HOOKED.append(True)
    w = Watch(tuple(Path(r).absolute() for r in roots), stop, everything=everything)
    reset()
    with contextlib.ExitStack() as stack:
        _loader_wrappers(stack)
        _WATCHES.append(w)
        try:
            yield w
        except GatePassed:
            pass
        finally:
            _WATCHES.remove(w)
            reset()
