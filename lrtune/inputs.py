"""Reading files a user hands in, each refused in one :class:`ConfigError` line when it
cannot be what it claims: missing, unreadable (permissions, a name too long), too big, not
UTF-8, not parseable, nested deeper than any lrtune file is, or (YAML) with a key given twice
or an alias (``*name``, which can expand a few hundred bytes into gigabytes).

Every reader here reads the whole file once, bounded in size, and has no side effect: the
commands call them while they validate, before they claim an output directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lrtune.errors import ConfigError, os_error_message

MiB = 2**20
MAX_CONFIG_BYTES = 1 * MiB  # a YAML/JSON config of options
MAX_META_BYTES = 64 * MiB  # a metadata JSON file (manifest, checkpoint, controller, profile)
MAX_DEPTH = 32  # nesting of any lrtune JSON/YAML file (the deepest is about 5)


def probe(path: str | Path, what: str) -> tuple[Path, bool, bool]:
    """(path, is a directory, exists), an OSError ("File name too long", ...) as a ConfigError."""
    p = Path(path).expanduser()
    try:
        return p, p.is_dir(), p.exists()
    except OSError as e:
        raise ConfigError(f"{what}: {os_error_message(e)}") from None


def checked_file(path: str | Path, what: str) -> Path:
    """``path`` as an existing regular file; ConfigError naming ``what`` otherwise (an OSError
    such as "File name too long" or "Permission denied" included)."""
    p = Path(path).expanduser()
    try:
        if not p.exists():
            raise ConfigError(f"{what} not found: {_short(p)}")
        if not p.is_file():
            raise ConfigError(f"{what} is not a file: {_short(p)}")
    except OSError as e:
        raise ConfigError(f"{what}: {os_error_message(e)}") from None
    return p


def checked_dir(path: str | Path, what: str) -> Path:
    """``path`` as an existing directory; ConfigError naming ``what`` otherwise."""
    p = Path(path).expanduser()
    try:
        if not p.is_dir():
            raise ConfigError(f"{what} {'is not a directory' if p.exists() else 'not found'}: {_short(p)}")
    except OSError as e:
        raise ConfigError(f"{what}: {os_error_message(e)}") from None
    return p


def read_bytes(path: str | Path, what: str, max_bytes: int) -> bytes:
    p = checked_file(path, what)
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise ConfigError(
                f"{what} {_short(p)} is {size / MiB:.1f} MiB, larger than the {max_bytes / MiB:g} MiB "
                "such a file may be"
            )
        with open(p, "rb") as f:
            return f.read(max_bytes + 1)[:max_bytes]
    except OSError as e:
        raise ConfigError(f"{what}: {os_error_message(e)}") from None


def decode_text(blob: bytes, where: str) -> str:
    """UTF-8 text (a leading byte-order mark dropped); ConfigError naming the byte otherwise."""
    try:
        return blob.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_text(path: str | Path, what: str, max_bytes: int = MAX_META_BYTES) -> str:
    return decode_text(read_bytes(path, what, max_bytes), f"{what} {_short(Path(path))}")


def parse_json(text: str, where: str, max_depth: int = MAX_DEPTH) -> Any:
    """JSON, nested at most ``max_depth`` deep; ConfigError (one line) otherwise (json's
    decoder recurses: far deeper input raises RecursionError, caught here too)."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise ConfigError(f"{where}: nested too deep to be an lrtune file") from None
    except ValueError as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"{where}: not valid JSON ({first})") from None
    if nesting(data) > max_depth:
        raise ConfigError(f"{where}: nested more than {max_depth} levels deep (not an lrtune file)")
    return data


def read_json(path: str | Path, what: str, max_bytes: int = MAX_META_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    return parse_json(read_text(path, what, max_bytes), f"{what} {_short(Path(path))}", max_depth)


def read_json_object(path: str | Path, what: str, max_bytes: int = MAX_META_BYTES) -> dict:
    data = read_json(path, what, max_bytes)
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {_short(Path(path))} must hold a JSON object, not {type(data).__name__}")
    return data


def read_yaml_mapping(path: str | Path, what: str = "config file", max_bytes: int = MAX_CONFIG_BYTES) -> dict:
    """A flat ``option: value`` mapping from a YAML (or JSON) file, parsed safely: no Python
    objects (safe loader), no aliases, no key given twice, nesting bounded."""
    import yaml

    text = read_text(path, what, max_bytes)
    where = f"{what} {_short(Path(path))}"
    try:
        data = yaml.load(text, Loader=_strict_loader(where))  # noqa: S506 - a SafeLoader subclass
    except ConfigError:
        raise
    except (yaml.YAMLError, RecursionError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"cannot parse {where}: {first}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must hold a mapping of option: value")
    return data


def _strict_loader(where: str):
    import yaml

    class StrictLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise ConfigError(f"{where}: line {mark.line + 1}: YAML aliases (*name) are not allowed")
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ConfigError(f"{where}: nested more than {MAX_DEPTH} levels deep")
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, (str, int, float, bool)) or key is None:
                    raise ConfigError(f"{where}: line {key_node.start_mark.line + 1}: a key must be a name")
                if key in seen:
                    raise ConfigError(f"{where}: line {key_node.start_mark.line + 1}: {str(key)[:60]!r} is given twice")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def nesting(data: Any) -> int:
    """How deep lists and dicts nest in ``data`` (a scalar: 0), without recursion."""
    best, stack = 0, [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            best = max(best, depth)
            stack.extend((x, depth + 1) for x in item if isinstance(x, (list, dict)))
    return best


def _short(p: Path) -> str:
    s = str(p)
    return s if len(s) <= 120 else s[:60] + "…" + s[-40:]
