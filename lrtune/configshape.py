"""The shape of a config dataclass: its sub-configs and its flat option names.

A leaf module (dataclasses and typing only) so that the schema, the run files and the
command line all read one definition without importing each other.
"""

from __future__ import annotations

import dataclasses
from typing import Any, get_type_hints


def nested(cls: type) -> dict[str, tuple[type, str]]:
    """The fields of ``cls`` that hold a config of their own (a sub-config): ``{field: (its
    dataclass, the prefix of its flat names)}``. A sub-config's field ``x`` is the flat option
    ``prefix + x`` (``--rollout-tokens`` for ``rollout.tokens``); its ``flat`` metadata names it
    otherwise (``--ray`` for ``ray.enabled``)."""
    hints = get_type_hints(cls)
    return {
        f.name: (hints[f.name], f.metadata.get("prefix", f.name + "_"))
        for f in dataclasses.fields(cls)
        if dataclasses.is_dataclass(hints[f.name])
    }


def flat_name(f: dataclasses.Field, prefix: str = "") -> str:
    return f.metadata.get("flat") or prefix + f.name


def flat_fields(cls: type, prefix: str = "") -> list[tuple[str, dataclasses.Field, Any]]:
    """``(flat name, field, type)`` of every option of ``cls``, sub-configs flattened."""
    hints, subs, out = get_type_hints(cls), nested(cls), []
    for f in dataclasses.fields(cls):
        if f.name in subs:
            sub, sub_prefix = subs[f.name]
            out += flat_fields(sub, prefix + sub_prefix)
        else:
            out.append((flat_name(f, prefix), f, hints[f.name]))
    return out


def flat_dict(obj: Any) -> dict[str, Any]:
    """A config as ``{flat name: value}``: sub-configs flattened the way their flags are (what
    run directories record, so the records keep their shape when options move into groups)."""
    out: dict[str, Any] = {}

    def walk(o: Any, prefix: str) -> None:
        subs = nested(type(o))
        for f in dataclasses.fields(o):
            v = getattr(o, f.name)
            if f.name in subs:
                walk(v, prefix + subs[f.name][1])
            else:
                out[flat_name(f, prefix)] = v

    walk(obj, "")
    return out
