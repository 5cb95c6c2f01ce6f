"""User-facing errors and the one line the CLI prints for any error.

Anything a user can cause (bad path, bad flag value, incompatible models) raises
:class:`LrtuneError` with a one-line message; the CLI prints ``lrtune: error: <message>``
and exits with status 2 (no traceback). :func:`one_line` bounds every message the CLI prints.
"""

from __future__ import annotations


class LrtuneError(Exception):
    """A clear, one-line error caused by user input or the environment."""

    exit_code = 2


class ConfigError(LrtuneError, ValueError):
    """A configuration value is out of range or inconsistent."""


class ConfigTypeError(ConfigError, TypeError):
    """An argument of the Python API has the wrong type (also a ``TypeError``)."""


class ModelError(LrtuneError):
    """A model cannot be resolved, loaded, or is incompatible with its partner."""


MAX_MESSAGE = 400  # characters of an error line (a message may quote user input of any size)


def check_count(name: str, value, least: int) -> int:
    """``value`` when it is an int (not a bool) >= ``least``; else one :class:`ConfigTypeError` or
    :class:`ConfigError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigTypeError(f"{name}: an integer >= {least}, got {value!r}")
    if value < least:
        raise ConfigError(f"{name} must be >= {least}, got {value}")
    return value


def one_line(message: object, limit: int = MAX_MESSAGE) -> str:
    """``message`` as one printable line of at most ``limit`` characters: line breaks and
    control characters become spaces, a longer text is cut with an ellipsis."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(message))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def os_error_message(e: OSError) -> str:
    """An OSError as the user's problem: what failed, on which file (shortened)."""
    what = e.strerror or type(e).__name__
    name = e.filename if e.filename is not None else ""
    shown = str(name)
    if len(shown) > 120:
        shown = shown[:60] + "…" + shown[-40:]
    return f"{what}: {shown}" if shown else what
