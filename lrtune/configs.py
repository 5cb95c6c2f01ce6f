"""Dataclass configs -> argparse, plus ``--config file.yaml`` loading (DESIGN §6).

Every field of a config dataclass becomes ``--field-name`` with the field's ``help``
metadata; values from ``--config`` are defaults that explicit flags override.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from typing import Any, Literal, get_args, get_origin

from lrtune import schema
from lrtune.configshape import flat_dict, flat_fields, flat_name, nested  # noqa: F401 - re-exported
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


def add_dataclass_args(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    skip: tuple[str, ...] = (),
    help: dict[str, str] | None = None,
    defaults: dict[str, Any] | None = None,
) -> None:
    """Add one ``--flag`` per option of the dataclass, sub-configs flattened (bool options
    get ``--flag/--no-flag``); ``help`` replaces the help text of the named options (flat
    names); ``defaults`` are the command's own defaults of some options (shown in their help)."""
    group = parser.add_argument_group(cls.__name__)
    removed = getattr(cls, "LEGACY_REMOVED_IN", "a later version")
    for name, (flag, value) in legacy_flags(cls).items():  # old switches, still accepted
        if name not in skip:
            group.add_argument(
                flag,
                dest=name,
                action="store_true",
                default=None,
                help=f"deprecated (removed in lrtune {removed}): {value}",
            )
    for name, f, typ in flat_fields(cls):
        if name in skip:
            continue
        flag = f.metadata.get("flag") or "--" + name.replace("_", "-")
        help_ = (help or {}).get(name, f.metadata.get("help", "")).replace("%", "%%")
        default = f.default if f.default is not dataclasses.MISSING else None
        default = (defaults or {}).get(name, default)
        if typ is bool or str(typ) in ("bool | None", "typing.Optional[bool]"):
            group.add_argument(
                flag,
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=f"{help_} (default: {default})",
            )
            continue
        conv = _converter(typ)
        group.add_argument(
            flag,
            dest=name,
            type=conv,
            default=None,
            metavar=name.upper(),
            choices=_choices(f, typ),
            help=f"{help_} (default: {default!r})",
        )


def _converter(typ: Any):
    """The argparse type of a field: int or float (also inside ``X | None``), else str."""
    args = [a for a in (get_args(typ) or (typ,)) if a is not type(None)]
    for kind in (bool, int, float):
        if kind in args and kind is not bool:
            return kind
    return str


def _choices(f: dataclasses.Field, typ: Any):
    """The allowed values of a field: its ``Literal[...]`` values (the type states them, so the
    schema checks them wherever a value comes from)."""
    args = [a for a in (get_args(typ) or ()) if a is not type(None)]
    if get_origin(typ) is Literal:
        return tuple(get_args(typ))
    lits = [a for a in args if get_origin(a) is Literal]
    return tuple(get_args(lits[0])) if lits else None


def build(cls: type, args: argparse.Namespace, file_values: dict[str, Any]) -> Any:
    """Instantiate ``cls`` from YAML values overridden by explicit flags, validated against
    its schema (:func:`lrtune.schema.check`: type, range, finiteness, allowed values), so a
    file value of the wrong type (``gamma1: 2.5``, ``gamma1: "abc"``) or a flag out of range
    (``--temperature nan``) is one ConfigError line before anything runs. A sub-config takes
    its flat options (``rollout_tokens: 128``) or a mapping (``rollout: {tokens: 128}``)."""
    values = {k: v for k, v in file_values.items()}
    for name in [n for n, _, _ in flat_fields(cls)] + list(legacy_flags(cls)):
        v = getattr(args, name, None)
        if v is not None:
            values[name] = v
    obj = from_flat(cls, values)
    old = sorted(flag for name, (flag, _) in legacy_flags(cls).items() if values.get(name))
    if old:  # once per command, with the new spelling and the version that removes the old
        removed = getattr(cls, "LEGACY_REMOVED_IN", "a later version")
        sys.stderr.write(
            f"lrtune: warning: {', '.join(old)} {'is' if len(old) == 1 else 'are'} deprecated and will be "
            f"removed in lrtune {removed}; use --schedule {getattr(obj, 'schedule', '')} --record "
            f"{getattr(obj, 'record', '')}\n"
        )
    obj = schema.check(obj) if hasattr(cls, "__pydantic_config__") else obj
    if hasattr(obj, "check_asked"):  # the rules of what a user asks for (DecodeConfig.check_asked)
        obj.check_asked(set(vars(args)))
    return obj


def from_flat(cls: type, values: dict[str, Any], prefix: str = "") -> Any:
    """An instance of ``cls`` from flat option values (sub-configs assembled from their
    prefixed names, or from a mapping under the sub-config's own name); unknown names are
    ignored (:func:`check_unknown_keys` refuses them first)."""
    subs, kwargs = nested(cls), {}
    for f in dataclasses.fields(cls):
        if f.name in subs:
            sub, sub_prefix = subs[f.name]
            given = values.get(f.name) if not prefix else None
            part = dict(given) if isinstance(given, dict) else {}
            rest = {k: v for k, v in values.items() if not (k == f.name and isinstance(v, dict))}
            mapped = {flat_name(g, sub_prefix): part[g.name] for g in dataclasses.fields(sub) if g.name in part}
            kwargs[f.name] = from_flat(sub, {**mapped, **rest}, prefix + sub_prefix)
        elif flat_name(f, prefix) in values:
            kwargs[f.name] = values[flat_name(f, prefix)]
    if hasattr(cls, "legacy_values"):
        extra = {k: values[k] for k in legacy_flags(cls) if k in values}
        kwargs = cls.legacy_values({**kwargs, **extra})
    if prefix:  # a sub-config: its parent checks the whole tree, naming each option by its flat flag
        with schema.deferred():
            return cls(**kwargs)
    return cls(**kwargs)


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
    """ConfigError for a config-file key no class of the command knows; a sub-config given as
    a mapping must be one, with its own keys only."""
    known = set(extra)
    for cls in classes:
        known |= {n for n, _, _ in flat_fields(cls)} | set(nested(cls)) | set(legacy_flags(cls))
        flat = {n for n, _, _ in flat_fields(cls)}
        for name, (sub, _) in nested(cls).items():
            if name in file_values:
                given = file_values[name]
                if not isinstance(given, dict) and name in flat:  # also a flat option (teacher: SPEC)
                    continue
                if not isinstance(given, dict):
                    raise ConfigError(
                        f"option {name!r} must be a mapping of its options "
                        f"({', '.join(f.name for f in dataclasses.fields(sub))})"
                    )
                bad = sorted(set(map(str, given)) - {f.name for f in dataclasses.fields(sub)})
                if bad:
                    raise ConfigError(f"unknown option(s) under {name!r} in config file: {', '.join(bad)}")
    unknown = sorted(set(file_values) - known)
    if unknown:
        raise ConfigError(f"unknown option(s) in config file: {', '.join(unknown)}")
    for cls in classes:
        seen: dict[str, str] = {}
        for name, spelled in spelled_options(cls, file_values):
            if name in seen:
                raise ConfigError(
                    f"option {name!r} is given twice in config file ({seen[name]} and {spelled}); give it once"
                )
            seen[name] = spelled


def spelled_options(
    cls: type, values: dict[str, Any], prefix: str = "", shown: dict[str, str] | None = None
) -> list[tuple[str, str]]:
    """``(flat name, how the file spells it)`` of every option of ``cls`` that config-file
    ``values`` give: flat (``max_model_len``) or inside a sub-config's mapping
    (``engine.max_model_len``), the two ways :func:`from_flat` reads; an option may appear twice.
    ``shown``: the file's own key of each of ``values``' flat names (a sub-config's field names)."""
    flat = {n for n, _, _ in flat_fields(cls, prefix)}
    subs = nested(cls) if not prefix else {}  # from_flat reads a mapping only where no prefix applies
    out = []
    for key, value in values.items():
        spelled = (shown or {}).get(key, key)
        if key in subs and isinstance(value, dict):
            sub, sub_prefix = subs[key]
            names = {flat_name(g, sub_prefix): g.name for g in dataclasses.fields(sub) if g.name in value}
            inner = spelled_options(sub, {n: value[g] for n, g in names.items()}, prefix + sub_prefix, names)
            out += [(n, f"{spelled}.{s}") for n, s in inner]
        elif key in flat:
            out.append((key, spelled))
    return out


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
    the one error boundary (:func:`lrtune.boundary.run_guarded`). Every stage's CLI tail is this."""

    words: tuple[str, ...]  # ("train", "verifier"): `lrtune train verifier`
    description: str
    sections: tuple[Section, ...]
    extra: Any = None  # optional ``extra(parser)`` adding hand-written flags

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", help="YAML file with any of these options")
        if self.extra is not None:
            self.extra(p)
        for s in self.sections:
            add_dataclass_args(p, s.cls, skip=s.skip, help=s.help, defaults=s.defaults)

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

    def main(self, run: Callable[[argparse.Namespace], int]) -> None:
        """``python -m <stage> ARGS``: the same as ``lrtune <words> ARGS`` (``run`` is what the
        command line calls with the parsed flags), through the same error boundary."""
        from lrtune.boundary import run_guarded, split_debug

        argv, debug = split_debug(sys.argv[1:])
        raise SystemExit(run_guarded(lambda: run(self.make_parser().parse_args(argv)), debug))
