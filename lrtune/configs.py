"""Dataclass configs -> argparse, plus ``--config file.yaml`` loading (DESIGN §6).

Every field of a config dataclass becomes ``--field-name`` with the field's ``help``
metadata; values from ``--config`` are defaults that explicit flags override.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any, Literal, get_args, get_origin, get_type_hints

from lrtune import schema
from lrtune.errors import ConfigError


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line and exits with status 2, and takes
    no abbreviated flags (``--method`` must never silently mean ``--methods``)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D401 - argparse API
        from lrtune.errors import one_line

        sys.stderr.write(f"lrtune: error: {one_line(message)} (see {self.prog} --help)\n")
        raise SystemExit(2)


def add_dataclass_args(parser: argparse.ArgumentParser, cls: type, *, skip: tuple[str, ...] = (),
                       help: dict[str, str] | None = None) -> None:
    """Add one ``--flag`` per dataclass field (bool fields get ``--flag/--no-flag``); ``help``
    replaces the help text of the named fields."""
    hints = get_type_hints(cls)
    group = parser.add_argument_group(cls.__name__)
    for name, (flag, value) in legacy_flags(cls).items():  # old switches, still accepted
        if name not in skip:
            group.add_argument(flag, dest=name, action="store_true", default=None, help=f"old spelling of {value}")
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
                           choices=_choices(f, typ), help=f"{help_} (default: {default!r})")


def _converter(typ: Any):
    """The argparse type of a field: int or float (also inside ``X | None``), else str."""
    args = [a for a in (get_args(typ) or (typ,)) if a is not type(None)]
    for kind in (bool, int, float):
        if kind in args and kind is not bool:
            return kind
    return str


def _choices(f: dataclasses.Field, typ: Any):
    """The allowed values of a field: its ``choices`` metadata, or its ``Literal[...]`` values."""
    if f.metadata.get("choices"):
        return f.metadata["choices"]
    args = [a for a in (get_args(typ) or ()) if a is not type(None)]
    if get_origin(typ) is Literal:
        return tuple(get_args(typ))
    lits = [a for a in args if get_origin(a) is Literal]
    return tuple(get_args(lits[0])) if lits else None


def build(cls: type, args: argparse.Namespace, file_values: dict[str, Any]) -> Any:
    """Instantiate ``cls`` from YAML values overridden by explicit flags, validated against
    its schema (:func:`lrtune.schema.check`: type, range, finiteness, allowed values), so a
    file value of the wrong type (``gamma1: 2.5``, ``gamma1: "abc"``) or a flag out of range
    (``--temperature nan``) is one ConfigError line before anything runs."""
    names = {f.name for f in dataclasses.fields(cls)} | set(legacy_flags(cls))
    values = {k: v for k, v in file_values.items() if k in names}
    for name in names:
        v = getattr(args, name, None)
        if v is not None:
            values[name] = v
    if hasattr(cls, "legacy_values"):
        values = cls.legacy_values(values)
    obj = cls(**values)
    return schema.check(obj) if hasattr(cls, "__pydantic_config__") else obj


def load_config_file(path: str | None) -> dict[str, Any]:
    """Flat mapping from a YAML (or JSON) file; keys may use ``-`` or ``_``. Parsed safely
    (:func:`lrtune.inputs.read_yaml_mapping`: size, UTF-8, no aliases, no key twice)."""
    if not path:
        return {}
    from lrtune.inputs import read_yaml_mapping

    data = read_yaml_mapping(path, "config file")
    out: dict[str, Any] = {}
    for k, v in data.items():
        name = str(k).replace("-", "_")
        if name in out:
            raise ConfigError(f"config file {path}: {k!r} is given twice (as - and _)")
        out[name] = v
    return out


def legacy_flags(cls: type) -> dict[str, tuple[str, str]]:
    """Old option names a config still accepts (its ``LEGACY_FLAGS``): ``{name: (flag, what
    it now means)}``; its ``legacy_values(values)`` folds them into the new fields."""
    return dict(getattr(cls, "LEGACY_FLAGS", {}))


def check_unknown_keys(file_values: dict[str, Any], *classes: type, extra: tuple[str, ...] = ()) -> None:
    known = set(extra)
    for cls in classes:
        known |= {f.name for f in dataclasses.fields(cls)} | set(legacy_flags(cls))
    unknown = sorted(set(file_values) - known)
    if unknown:
        raise ConfigError(f"unknown option(s) in config file: {', '.join(unknown)}")


@dataclasses.dataclass(frozen=True)
class Section:
    """One config dataclass of a command: its flags (``skip`` left out, ``help`` replacing
    some texts) and the command's own defaults for some fields (a file or a flag wins)."""

    cls: type
    skip: tuple[str, ...] = ()
    help: dict[str, str] | None = None
    defaults: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class Command:
    """A stage command's command line: its config sections, built from flags and ``--config
    FILE`` (validated against the schema), and its ``python -m`` entry, which runs through
    the CLI's one error boundary (:func:`lrtune.cli.main`). Every stage's CLI tail is this."""

    words: tuple[str, ...]  # ("train", "verifier"): `lrtune train verifier`
    description: str
    sections: tuple[Section, ...]
    extra: Any = None  # optional ``extra(parser)`` adding hand-written flags

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", help="YAML file with any of these options")
        if self.extra is not None:
            self.extra(p)
        for s in self.sections:
            add_dataclass_args(p, s.cls, skip=s.skip, help=s.help)

    def make_parser(self) -> ArgumentParser:
        p = ArgumentParser(prog="lrtune " + " ".join(self.words), description=self.description)
        self.add_arguments(p)
        return p

    def config(self, args: argparse.Namespace) -> Any:
        """The validated config of a one-section command."""
        (cfg,) = self.configs(args)
        return cfg.validate() if hasattr(cfg, "validate") else cfg

    def configs(self, args: argparse.Namespace) -> list[Any]:
        """One validated instance per section, from the ``--config`` file and the flags."""
        file_values = load_config_file(getattr(args, "config", None))
        check_unknown_keys(file_values, *(s.cls for s in self.sections))
        return [build(s.cls, args, {**(s.defaults or {}), **file_values}) for s in self.sections]

    def main(self) -> None:
        """``python -m <stage> ARGS``: the same as ``lrtune <words> ARGS``."""
        from lrtune.cli import main

        raise SystemExit(main([*self.words, *sys.argv[1:]]))
