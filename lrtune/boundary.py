"""The one error boundary of every lrtune command (``lrtune ...`` and ``python -m <stage>``).

Errors become exit statuses here and nowhere else, one line on stderr each:

* an error the user can fix (:class:`~lrtune.errors.LrtuneError`, an unreadable file): exit 2;
* anything unexpected: one line naming the exception and ``--debug``, exit 1
  (with ``debug`` the traceback is shown instead);
* Ctrl-C, at any point, start-up included: ``lrtune: interrupted``, exit 130.

A leaf of the core (it imports only :mod:`lrtune.errors` and :mod:`lrtune.locks`, whose
output-directory locks it releases when a command ends), so the command line and the stages'
own entry points share it without importing each other.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

from lrtune.errors import LrtuneError, one_line, os_error_message


def split_debug(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without ``--debug``, and whether tracebacks are wanted (``--debug`` anywhere,
    or ``LRTUNE_DEBUG=1``)."""
    return [a for a in argv if a != "--debug"], "--debug" in argv or os.environ.get("LRTUNE_DEBUG") == "1"


def run_guarded(command: Callable[[], int], debug: bool = False) -> int:
    """``command()``'s exit status, with every error turned into one line (module docstring)."""
    # quiet logs: torch's C++ warnings (e.g. vLLM's CPU worker "NUMA binding" notice) are read
    # from the environment when torch loads, which the commands do; a user value wins
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    from lrtune import gate, locks

    with _one_line_warnings(debug):
        try:
            return command()
        except SystemExit as e:  # argparse: --help (0) or a bad flag (2, its line already printed)
            return e.code if isinstance(e.code, int) else 2
        except KeyboardInterrupt:
            sys.stderr.write("lrtune: interrupted\n")
            return 130
        except LrtuneError as e:
            return _fail(str(e), e.exit_code)
        except OSError as e:
            return _fail(os_error_message(e), 2)
        except MemoryError:
            return _fail("out of memory (lower --limit, --max-concurrent or the model sizes)", 1)
        except Exception as e:  # noqa: BLE001 - the one boundary for unexpected errors
            if _caused_by_interrupt(e):  # e.g. "Error calling __set_name__" wrapping a Ctrl-C mid-import
                sys.stderr.write("lrtune: interrupted\n")
                return 130
            if debug:
                raise
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            return _fail(f"unexpected {type(e).__name__}: {first} (rerun with --debug for the traceback)", 1)
        finally:
            locks.release_all()  # the command's output directories are free again
            gate.reset()  # the next command in this process checks its inputs again


def _caused_by_interrupt(e: BaseException) -> bool:
    """True when a KeyboardInterrupt is in ``e``'s chain of causes and contexts."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"lrtune: error: {one_line(message)}\n")
    return code


@contextlib.contextmanager
def _one_line_warnings(debug: bool):
    """lrtune's own warnings as one ``lrtune: warning:`` line each; third-party warnings
    (torch, vLLM, transformers) silenced unless ``--debug``."""
    if debug:
        yield
        return
    mine = tuple(
        str(Path(__file__).resolve().parents[1] / pkg) for pkg in ("lrtune", "eval", "data_gen", "train", "policies")
    )

    def show(message, category, filename, lineno, file=None, line=None):
        if str(filename).startswith(mine):
            sys.stderr.write(f"lrtune: warning: {one_line(message)}\n")

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = show
        yield
