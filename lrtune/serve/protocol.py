"""What an OpenAI request to ``lrtune serve`` asks for, checked before it is queued.

The request schemas are the ``openai`` package's own (``CompletionCreateParams`` of chat and
of completions, validated strictly with pydantic: as in OpenAI's API, ``"5"``, ``5.0`` and
``true`` are no integer, ``"0.5"`` no number, and every count given is checked, even one another
supersedes); lrtune's options ride in the same JSON object as extra fields (the OpenAI
client's ``extra_body``) and are checked by :class:`DecodeConfig`, exactly as the CLI checks
them, and a ``schedule`` a request names must be one its method runs. What the server
cannot honour is refused by name, never ignored: ``n`` > 1, penalties, logprobs, tools,
images. Every refusal is a :class:`RequestError` naming the field; the app answers it with
a 400 in OpenAI's error shape. Pure: no engine, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from lrtune.decodeconfig import DecodeConfig
from lrtune.modelconfig import ModelConfig
from lrtune.errors import ConfigError, one_line

Kind = Literal["chat", "completion"]

# lrtune's own per-request options (extra fields): DecodeConfig fields a request may set
LRTUNE_FIELDS: tuple[str, ...] = (
    "method",
    "gamma1",
    "gamma2",
    "schedule",
    "max_step_tokens",
    "context_tokens",
    "draft_stop",
)
SERVED_SCHEDULES = ("sync", "abort", "reuse", "reuse+abort", "score")  # round-level batching: no async
MAX_STOP = 4  # OpenAI's own limit on stop sequences

# OpenAI fields the server does not implement, accepted only at the value that means "off"
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "best_of": (1,),
    "frequency_penalty": (0, 0.0),
    "presence_penalty": (0, 0.0),
    "logprobs": (False, 0),
    "top_logprobs": (0,),
    "echo": (False,),
    "store": (False,),
    "parallel_tool_calls": (False, True),
}
# OpenAI fields with no effect on decoding, accepted as they are
IGNORED = ("user", "metadata", "safety_identifier", "prompt_cache_key", "service_tier")


class RequestError(ConfigError):
    """A request the server refuses (HTTP ``status``), naming the field (``param``)."""

    def __init__(self, param: str | None, message: str, status: int = 400) -> None:
        super().__init__(one_line(f"{param}: {message}" if param else message))
        self.param = param
        self.status = status


@dataclass(frozen=True)
class ServeRequest:
    """One checked request: what to encode (``messages`` for chat, ``prompt`` text or ids
    for completions), the decode config (the server's defaults with the request's fields),
    and how to answer."""

    kind: Kind
    model: str
    cfg: DecodeConfig
    messages: tuple[dict, ...] = ()
    prompt: str | tuple[int, ...] = ""
    stream: bool = False
    include_usage: bool = False
    stop: tuple[str, ...] = ()
    auto: bool = False  # the request asked for method "auto" (cfg holds what it resolved to)


@dataclass(frozen=True)
class ServerLimits:
    """What the loaded server can decode: its defaults, its model names, whether a draft is
    loaded, and the largest γ2 its SD engine drafts (a request may ask for less)."""

    defaults: DecodeConfig
    models: tuple[str, ...]
    has_draft: bool
    gamma2_max: int
    auto_method: str = "sd"  # what method "auto" runs on this server (resolved once, at start)
    one_sided: bool = False  # the server's verifier judges a draft step alone (score rounds need it)


def _adapter(kind: Kind):
    from pydantic import TypeAdapter

    if kind == "chat":
        from openai.types.chat import completion_create_params as p
    else:
        from openai.types import completion_create_params as p
    return TypeAdapter(p.CompletionCreateParamsNonStreaming), set(p.CompletionCreateParamsBase.__annotations__)


_ADAPTERS: dict[str, tuple] = {}


def _schema(kind: Kind):
    if kind not in _ADAPTERS:
        _ADAPTERS[kind] = _adapter(kind)
    return _ADAPTERS[kind]


def field_path(loc: tuple) -> str:
    """A pydantic error location as ``messages[1].role`` (a union's member names dropped)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part[:1].isupper():  # a TypedDict member of a union
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


def _first_error(err, prefix: tuple = ()) -> RequestError:
    """The first pydantic error as one :class:`RequestError`; a union's literal choices merged."""
    errors = err.errors()
    first = errors[0]
    path = field_path(prefix + tuple(first["loc"]))
    same = [e for e in errors if field_path(prefix + tuple(e["loc"])) == path]
    expected = [e.get("ctx", {}).get("expected") for e in same if e["type"] == "literal_error"]
    if len(expected) == len(same) and len(same) > 1:
        return RequestError(path, "should be " + " or ".join(x for x in expected if x))
    return RequestError(path, first["msg"][:1].lower() + first["msg"][1:])


def _materialize(value: Any, loc: tuple) -> Any:
    """Consume pydantic's lazy iterators (OpenAI types declare lists as ``Iterable``) so that
    every element is checked now; lists and dicts inside are walked too."""
    from pydantic import ValidationError

    if isinstance(value, dict):
        return {k: _materialize(v, loc + (k,)) for k, v in value.items()}
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)) or hasattr(value, "__next__") or type(value).__name__ == "ValidatorIterator":
        try:
            items = list(value)
        except ValidationError as e:
            raise _first_error(e, loc) from None
        return [_materialize(v, loc + (i,)) for i, v in enumerate(items)]
    return value


def _text_of(content: Any, path: str) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for j, part in enumerate(content or []):
        if part.get("type") != "text":
            raise RequestError(f"{path}[{j}]", f"only text parts are served, not {part.get('type')!r}")
        parts.append(part["text"])
    return "".join(parts)


_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str only from JSON's "\\ud800" escapes: no UTF-8 text


def lone_surrogate_at(body: Any) -> str | None:
    """The field (``messages[0].content``) of the first text in ``body`` holding a lone UTF-16
    surrogate, which no tokenizer encodes (a key holding one: the object it is in); None when
    there is none. Walked without recursion."""
    stack = [(body, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return path or "body"
        elif isinstance(item, Mapping):
            for k, v in reversed(list(item.items())):
                if isinstance(k, str) and _SURROGATE.search(k):
                    return path or "body"
                stack.append((v, f"{path}.{k}" if path else str(k)))
        elif isinstance(item, list):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None


def parse_request(body: Any, kind: Kind, limits: ServerLimits) -> ServeRequest:
    """``body`` (the decoded JSON of a request) checked against OpenAI's schema of ``kind``
    and the server's ``limits``; :class:`RequestError` naming the first bad field."""
    from pydantic import ValidationError

    if not isinstance(body, Mapping):
        raise RequestError(None, "the request body must be a JSON object")
    bad = lone_surrogate_at(body)
    if bad is not None:
        raise RequestError(
            bad, "holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape that pairs with none): not text"
        )
    adapter, openai_fields = _schema(kind)
    known = openai_fields | {"stream"}
    unknown = sorted(k for k in body if k not in known and k not in LRTUNE_FIELDS)
    if unknown:
        raise RequestError(unknown[0], f"unknown field (OpenAI's, or lrtune's own: {', '.join(LRTUNE_FIELDS)})")
    standard = {k: v for k, v in body.items() if k in openai_fields}
    try:  # strict, as OpenAI's API: "5", 5.0 and true are no integer, "0.5" and true no number
        checked = _materialize(dict(adapter.validate_python(standard, strict=True)), ())
    except ValidationError as e:
        raise _first_error(e) from None
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise RequestError("stream", "must be true or false")
    for name, value in checked.items():
        if name in NEUTRAL and value is not None and value not in NEUTRAL[name]:
            raise RequestError(name, f"not supported by lrtune serve (only {NEUTRAL[name][0]!r})")
        if name not in NEUTRAL and name not in IGNORED and name not in _USED[kind] and value is not None:
            raise RequestError(name, "not supported by lrtune serve")
    model = checked["model"]
    if model not in limits.models:
        raise RequestError(
            "model", f"{model!r} is not served here (GET /v1/models lists {', '.join(limits.models)})", 404
        )
    cfg = _decode_config(checked, body, limits)
    stop = checked.get("stop")
    stops = () if stop is None else (stop,) if isinstance(stop, str) else tuple(stop)
    if len(stops) > MAX_STOP or any(not s for s in stops):
        raise RequestError("stop", f"up to {MAX_STOP} non-empty strings")
    options = checked.get("stream_options") or {}
    if options and not stream:
        raise RequestError("stream_options", "only with stream: true")
    common = dict(
        kind=kind,
        model=model,
        cfg=cfg,
        stream=bool(stream),
        include_usage=bool(options.get("include_usage")),
        stop=stops,
        auto=body.get("method") == "auto",
    )
    if kind == "chat":
        msgs = checked["messages"]
        if not msgs:
            raise RequestError("messages", "at least one message")
        messages = tuple(
            {"role": m["role"], "content": _text_of(m.get("content"), f"messages[{i}].content")}
            for i, m in enumerate(msgs)
        )
        return ServeRequest(messages=messages, **common)
    return ServeRequest(prompt=_prompt_of(checked["prompt"]), **common)


_USED = {
    "chat": {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "stream_options",
    },
    "completion": {"model", "prompt", "max_tokens", "temperature", "top_p", "seed", "stop", "stream_options"},
}


def _prompt_of(prompt: Any) -> str | tuple[int, ...]:
    """One prompt: a text or a list of token ids (a batch of prompts is refused: send one
    request per prompt, they are batched on the server)."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise RequestError("prompt", "empty")
        return prompt
    items = list(prompt)
    if items and all(isinstance(t, int) and not isinstance(t, bool) for t in items):
        return tuple(items)
    if len(items) == 1 and isinstance(items[0], (str, list)):
        return _prompt_of(items[0])
    raise RequestError("prompt", "one prompt per request (a text or a list of token ids); the server batches requests")


def _decode_config(checked: dict, body: Mapping, limits: ServerLimits) -> DecodeConfig:
    """The server's defaults with the request's sampling and lrtune fields; DecodeConfig's
    own checks name the field."""
    values: dict[str, Any] = {}
    source: dict[str, str] = {}  # DecodeConfig field -> the request field that set it
    counts = [name for name in ("max_completion_tokens", "max_tokens") if checked.get(name) is not None]
    for name in counts[1:]:  # superseded by max_completion_tokens, and still refused out of range
        _checked_config(limits.defaults, {"max_new_tokens": checked[name]}, {"max_new_tokens": name})
    if counts:
        values["max_new_tokens"], source["max_new_tokens"] = checked[counts[0]], counts[0]
    for name in ("temperature", "top_p", "seed"):
        if checked.get(name) is not None:
            values[name], source[name] = checked[name], name
    for name in LRTUNE_FIELDS:
        if name in body:
            values[name], source[name] = body[name], name
    if values.get("method") == "auto":  # the server's choice for this machine and verifier
        values["method"] = limits.auto_method
    cfg = _checked_config(limits.defaults, values, source)
    if "schedule" in body and body.get("method") != "auto":  # the server's own schedule runs its LR requests
        try:
            cfg.check_asked()
        except ConfigError as e:
            raise RequestError("schedule", str(e)) from None
    if cfg.async_lr:
        raise RequestError("schedule", f"the server batches sync rounds: one of {', '.join(SERVED_SCHEDULES)}")
    if body.get("method") != "auto":  # a field of this request its method does not read
        from lrtune.consumers import method_unread

        asked = {f for f, s in source.items() if s in LRTUNE_FIELDS}
        unread = method_unread(cfg, _DEFAULT_MODELS, given=asked)  # a request sets no model option
        if unread:
            name = unread[0].split()[0][2:].replace("-", "_")
            raise RequestError(source.get(name, name), unread[0].split(": ", 1)[1])
    if cfg.uses_lr and cfg.score_rounds and not limits.one_sided:
        raise RequestError(
            "schedule", "score rounds need a verifier that judges a draft step alone; this server's compares two steps"
        )
    if (cfg.uses_lr or cfg.uses_sd) and not limits.has_draft:
        raise RequestError("method", f"{cfg.method!r} needs a draft model; this server loaded none")
    if cfg.uses_sd and cfg.gamma2 > limits.gamma2_max:
        raise RequestError("gamma2", f"at most {limits.gamma2_max} (the server's SD engine drafts that many)")
    return cfg


_DEFAULT_MODELS = ModelConfig()


def _checked_config(defaults: DecodeConfig, values: dict, source: dict[str, str]) -> DecodeConfig:
    """``defaults`` with ``values``, checked by DecodeConfig; a :class:`RequestError` names the
    request field (``source``: DecodeConfig field -> request field) its error is about."""
    try:
        return replace(defaults, **values).validate()
    except ConfigError as e:
        m = re.match(r"--([a-z0-9-]+): (.*)", str(e))
        field = m.group(1).replace("-", "_") if m else None
        if field in source:
            raise RequestError(source[field], m.group(2)) from None
        raise RequestError(None, str(e)) from None
