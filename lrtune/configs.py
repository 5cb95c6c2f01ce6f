"""Dataclass configs -> argparse, plus ``--config file.yaml`` loading (DESIGN §6).

Every field of a config dataclass becomes ``--field-name`` with the field's ``help``
metadata; values from ``--config`` are defaults that explicit flags override.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any, get_type_hints

from lrtune.errors import ConfigError


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line and exits with status 2, and takes
    no abbreviated flags (``--method`` must never silently mean ``--methods``)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D401 - argparse API
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(2)


def add_dataclass_args(parser: argparse.ArgumentParser, cls: type, *, skip: tuple[str, ...] = (),
                       help: dict[str, str] | None = None) -> None:
    """Add one ``--flag`` per dataclass field (bool fields get ``--flag/--no-flag``); ``help``
    replaces the help text of the named fields."""
    hints = get_type_hints(cls)
    group = parser.add_argument_group(cls.__name__)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
        help_ = (help or {}).get(f.name, f.metadata.get("help", "")).replace("%", "%%")
        default = f.default if f.default is not dataclasses.MISSING else None
        typ = hints[f.name]
        if typ is bool or str(typ) in ("bool | None", "typing.Optional[bool]"):
            group.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None,
                               help=f"{help_} (default: {default})")
            continue
        conv = _converter(typ)
        group.add_argument(flag, dest=f.name, type=conv, default=None, metavar=f.name.upper(),
                           choices=f.metadata.get("choices"), help=f"{help_} (default: {default!r})")


def _converter(typ: Any):
    s = str(typ)
    if typ is int or s == "int":
        return int
    if typ is float or s == "float":
        return float
    if "int" in s and "None" in s:
        return int
    if "float" in s and "None" in s:
        return float
    return str


def build(cls: type, args: argparse.Namespace, file_values: dict[str, Any]) -> Any:
    """Instantiate ``cls`` from YAML values overridden by explicit flags; a file value of
    the wrong type (``gamma1: 2.5``, ``gamma1: "abc"``) is a ConfigError (see :func:`checked`)."""
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: checked(k, v, hints[k]) for k, v in file_values.items() if k in names}
    for name in names:
        v = getattr(args, name, None)
        if v is not None:
            values[name] = v
    return cls(**values)


def checked(name: str, value: Any, typ: Any) -> Any:
    """``value`` as the field type ``typ`` (int, float, bool, str, or one of them | None):
    ints pass as floats, nothing else converts; ConfigError names the option otherwise."""
    s = str(typ)
    optional = "None" in s
    if value is None:
        if optional:
            return None
        raise ConfigError(f"option {name!r} must not be empty (null)")
    kinds = [k for k in ("bool", "int", "float", "str") if k in s.replace("Optional", "")] or ["str"]
    if isinstance(value, bool):
        if "bool" in kinds:
            return value
    elif isinstance(value, int) and ("int" in kinds or "float" in kinds):
        return value if "int" in kinds else float(value)
    elif isinstance(value, float) and "float" in kinds:
        return value
    elif isinstance(value, str) and "str" in kinds:
        return value
    want = " or ".join({"bool": "true/false", "int": "an integer", "float": "a number", "str": "text"}[k] for k in kinds)
    raise ConfigError(f"option {name!r} must be {want}, got {value!r} ({type(value).__name__})")


def load_config_file(path: str | None) -> dict[str, Any]:
    """Flat mapping from a YAML (or JSON) file; keys may use ``-`` or ``_``."""
    if not path:
        return {}
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {path}")
    import yaml

    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"cannot parse {path}: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of option: value")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def check_unknown_keys(file_values: dict[str, Any], *classes: type, extra: tuple[str, ...] = ()) -> None:
    known = set(extra)
    for cls in classes:
        known |= {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(file_values) - known)
    if unknown:
        raise ConfigError(f"unknown option(s) in config file: {', '.join(unknown)}")
