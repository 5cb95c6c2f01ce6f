"""User-facing errors.

Anything a user can cause (bad path, bad flag value, incompatible models) raises
:class:`LrtuneError` with a one-line message; the CLI prints ``error: <message>``
and exits with status 2 (no traceback).
"""

from __future__ import annotations


class LrtuneError(Exception):
    """A clear, one-line error caused by user input or the environment."""

    exit_code = 2


class ConfigError(LrtuneError, ValueError):
    """A configuration value is out of range or inconsistent."""


class ModelError(LrtuneError):
    """A model cannot be resolved, loaded, or is incompatible with its partner."""
