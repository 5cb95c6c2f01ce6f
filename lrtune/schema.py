"""One declarative schema for every option of every command.

Each config dataclass declares, on its fields' type hints, what a value may be: its type
(checked strictly: ``"3"`` is no integer, ``1`` no boolean), its range (``Annotated[int,
Interval(ge=1, le=16)]``), finiteness (no NaN or infinity anywhere), its allowed values
(``Literal[...]``, which also gives the flag its choices) and, for text, its length and
characters. :func:`check` validates a config instance against its class with pydantic (the
library vLLM validates its own config dataclasses with), whether the values came from flags,
a YAML file or Python, and turns the first violation into one :class:`ConfigError` line
that names the option. Configs derive from :class:`Checked`, so the check runs when an
instance is built; rules between options (this one excludes that one) live in each config's
``check_rules()``, run right after, and ``validate()`` runs both again (after a change).

The aliases below are the vocabulary the configs use.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Annotated, Any

from annotated_types import Ge, Gt, Interval
from pydantic import ConfigDict, StringConstraints, TypeAdapter, ValidationError

from lrtune.errors import ConfigError

# on every config class: ``__pydantic_config__ = STRICT``
STRICT = ConfigDict(strict=True, allow_inf_nan=False, revalidate_instances="always")

MAX_COUNT = 10_000_000  # tokens, pairs, characters: more would exhaust memory long before a run ends
MAX_PROBLEMS = 1_000_000  # problems of one run (generating 10^6 gsm_symbolic problems takes ~20 s, ~2 GB)
MAX_TEXT = 4096  # a path, a spec or a list of them

NO_NUL = r"^[^\x00]*$"
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT, pattern=NO_NUL)]
Count = Annotated[int, Interval(ge=1, le=MAX_COUNT)]  # at least one
Size = Annotated[int, Interval(ge=0, le=MAX_COUNT)]  # zero allowed
Problems = Annotated[int, Interval(ge=1, le=MAX_PROBLEMS)]  # a number of problems
ProblemIndex = Annotated[int, Interval(ge=0, le=MAX_PROBLEMS - 1)]
Seed = Annotated[int, Interval(ge=0, le=2**63 - 1)]
Gamma = Annotated[int, Interval(ge=1, le=16)]
MIN_CONTEXT = 16  # tokens of an engine's context (--max-model-len): a prompt token and a step at least
ContextLength = Annotated[int, Interval(ge=MIN_CONTEXT, le=MAX_COUNT)]  # an engine's --max-model-len
Share = Annotated[float, Interval(gt=0, le=1)]  # a share of a device
Fraction = Annotated[float, Interval(ge=0, le=1)]
Positive = Annotated[float, Gt(0)]
NonNegative = Annotated[float, Ge(0)]


def flag_name(f: dataclasses.Field, prefix: str = "") -> str:
    return f.metadata.get("flag") or "--" + (f.metadata.get("flat") or prefix + f.name).replace("_", "-")


def _flag_at(cls: type, loc: list[str]) -> str:
    """The flag of the option at ``loc`` (a field, or a sub-config's field) of ``cls``."""
    from lrtune.configshape import nested

    prefix = ""
    for i, part in enumerate(loc):
        fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
        if part not in fields:
            return "--" + (prefix + part).replace("_", "-")
        subs = nested(cls)
        if part in subs and i + 1 < len(loc):
            cls, sub_prefix = subs[part]
            prefix += sub_prefix
            continue
        return flag_name(fields[part], prefix)
    return cls.__name__


@lru_cache(maxsize=None)
def _adapter(cls: type) -> TypeAdapter:
    return TypeAdapter(cls)


_CHECKING: ContextVar[bool] = ContextVar("lrtune_schema_checking", default=False)


@contextmanager
def deferred():
    """Configs built inside this block skip their check: a sub-config assembled for its parent,
    which checks the whole tree when it is built (and names each option by its flat flag)."""
    token = _CHECKING.set(True)
    try:
        yield
    finally:
        _CHECKING.reset(token)


class Checked:
    """Base of the config dataclasses: the schema is checked when an instance is built, whatever
    builds it (flags, a YAML file, Python, ``dataclasses.replace``), and the checked values are
    kept (ints given for float options become floats); then :meth:`check_rules`, the rules
    between options. A bad value raises :class:`ConfigError` at once, naming the option."""

    def __post_init__(self) -> None:
        if _CHECKING.get():  # the copy pydantic builds while checking this instance, or a deferred sub-config
            return
        with deferred():  # the copies pydantic builds while checking this one are not checked again
            ok = check(self)
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, getattr(ok, f.name))
        self.check_rules()

    def check_rules(self) -> None:
        """The rules between options (none here); ConfigError on the first one broken."""


def check(obj: Any) -> Any:
    """``obj`` (a config dataclass instance) validated against its class's schema; a
    :class:`ConfigError` naming the first bad option otherwise. Returns the validated copy
    (ints given for float options become floats)."""
    cls = type(obj)
    try:
        return _adapter(cls).validate_python(obj)
    except ValidationError as e:
        raise ConfigError(message(cls, e)) from None


def message(cls: type, e: ValidationError) -> str:
    """One line for a validation error: the option's flag, what is wrong, the value given."""
    errors = e.errors(include_url=False)
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if not isinstance(p, int)]
    name = _flag_at(cls, loc) if loc else cls.__name__
    given = first.get("input")
    shown = repr(given)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{name}: {_plain(first)}, got {shown}{more}"


def _plain(err: dict) -> str:
    """pydantic's message in this project's words."""
    kind, ctx = err.get("type", ""), err.get("ctx") or {}
    if kind == "finite_number":
        return "must be a finite number"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}[kind]
        bound = next(iter(ctx.values()), "")
        return f"must be {op} {bound}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')}"
    if kind in ("int_type", "int_from_float"):
        return "must be an integer"
    if kind == "float_type":
        return "must be a number"
    if kind == "bool_type":
        return "must be true or false"
    if kind == "string_type":
        return "must be text"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        return "must not contain a NUL byte" if pattern == NO_NUL else f"must match {pattern}"
    return str(err.get("msg", "invalid value")).rstrip(".").lower()
