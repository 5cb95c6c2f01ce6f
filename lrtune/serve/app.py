"""The HTTP face of ``lrtune serve``: an OpenAI-compatible ASGI app (Starlette) over one
:class:`~lrtune.serve.scheduler.RoundScheduler`.

Routes: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (JSON, or server-sent
events with ``stream: true``), ``GET /v1/models``, ``GET /health``, ``GET /metrics``.
Responses are the ``openai`` package's own models (``ChatCompletion``, ``ChatCompletionChunk``,
``Completion``, ``Model``), with lrtune's per-request stats in an extra ``lrtune`` field. An
error is OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``: 400 for a bad
request (naming the field; a body that is not JSON, nested deeper than :data:`MAX_BODY_DEPTH`
or holding a lone UTF-16 surrogate included), 404 for an unknown model or route, 405 for a
method a route does not take, 413 for a body over :data:`MAX_BODY_BYTES` (refused before it is
parsed), 429 with ``Retry-After`` when the queue is full, 503 while draining, 504 when a request
runs past ``request_timeout``, 500 when its round failed. No error is ever a traceback, and none
stops the server.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from lrtune.errors import one_line
from lrtune.inputs import nesting
from lrtune.serve.metrics import CONTENT_TYPE, ServeMetrics
from lrtune.serve.protocol import RequestError, ServeRequest, ServerLimits, parse_request
from lrtune.serve.scheduler import Admitted, Delta, Done, Error, Job, QueueFull, RoundScheduler, Stopping, error_of

ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 429: "rate_limit_error"}
DISCONNECT_POLL_S = 0.5
MAX_BODY_BYTES = 4 * 2**20  # a request body: 4 MiB (a 128k-token prompt is about 0.5 MiB of text)
MAX_BODY_DEPTH = 32  # lists and objects nested in a request body (OpenAI's deepest request is about 5)


@dataclass(frozen=True)
class AppSettings:
    """What the app needs besides the scheduler: request limits and the retry hint."""

    limits: ServerLimits
    request_timeout: float | None = 600.0  # seconds from arrival to the answer's end; None: none
    retry_after: int = 1  # seconds, the 429's Retry-After
    max_body_bytes: int = MAX_BODY_BYTES  # a larger request body is a 413, refused before it is parsed


def error_body(message: str, kind: str, param: str | None = None) -> dict:
    """OpenAI's error object: one line of ``message``, its ``type``, the field it names."""
    return {"error": {"message": one_line(message), "type": kind, "param": param, "code": None}}


def error_response(status: int, message: str, param: str | None = None, headers: dict | None = None) -> JSONResponse:
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return JSONResponse(error_body(message, kind, param), status_code=status, headers=headers)


def _sse(obj) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def _usage(done: Done):
    from openai.types import CompletionUsage

    return CompletionUsage(
        prompt_tokens=done.prompt_tokens,
        completion_tokens=done.completion_tokens,
        total_tokens=done.prompt_tokens + done.completion_tokens,
    )


def _dump(model) -> dict:
    return model.model_dump(mode="json", exclude_unset=True)


class Responses:
    """OpenAI response objects of one request (chat or completion), by the ``openai`` types."""

    def __init__(self, req: ServeRequest) -> None:
        self.req = req
        self.id = ("chatcmpl-" if req.kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    def _head(self, kind: str) -> dict:
        """The fields every object of this response carries; ``kind`` is its ``object``."""
        return {"id": self.id, "object": kind, "created": self.created, "model": self.req.model}

    def whole(self, text: str, done: Done) -> dict:
        if self.req.kind == "chat":
            from openai.types.chat import ChatCompletion, ChatCompletionMessage
            from openai.types.chat.chat_completion import Choice

            obj = ChatCompletion(
                **self._head("chat.completion"),
                choices=[
                    Choice(
                        index=0,
                        message=ChatCompletionMessage(role="assistant", content=text),
                        finish_reason=done.finish_reason,
                    )
                ],
                usage=_usage(done),
            )
        else:
            from openai.types import Completion, CompletionChoice

            obj = Completion(
                **self._head("text_completion"),
                choices=[CompletionChoice(index=0, text=text, finish_reason=done.finish_reason)],
                usage=_usage(done),
            )
        return {**_dump(obj), "lrtune": self.extra(done)}

    def chunk(self, text: str | None = None, *, first: bool = False, done: Done | None = None) -> dict:
        """A stream chunk: the role first (chat), then text deltas, then the finish reason."""
        reason = done.finish_reason if done is not None else None
        if self.req.kind == "chat":
            from openai.types.chat import ChatCompletionChunk
            from openai.types.chat.chat_completion_chunk import Choice, ChoiceDelta

            delta = (
                ChoiceDelta(role="assistant", content="")
                if first
                else ChoiceDelta(content=text)
                if text
                else ChoiceDelta()
            )
            obj = ChatCompletionChunk(
                **self._head("chat.completion.chunk"),
                choices=[Choice(index=0, delta=delta, finish_reason=reason)],
            )
        else:
            from openai.types import Completion, CompletionChoice

            obj = Completion(
                **self._head("text_completion"),
                # a stream chunk before the last has no finish reason, which the type's Literal
                # does not admit (OpenAI's own stream sends null there): built without validation
                choices=[
                    CompletionChoice.model_construct(index=0, text=text or "", finish_reason=reason, logprobs=None)
                ],
            )
        out = _dump(obj)
        if done is not None:
            out["lrtune"] = self.extra(done)
        return out

    def extra(self, done: Done) -> dict:
        """lrtune's own part of a response: the method run (``auto``: what it chose) and stats."""
        return {"method": self.req.cfg.method, "auto": self.req.auto, **_public_stats(done.stats)}

    def usage_chunk(self, done: Done) -> dict:
        """The last chunk with ``stream_options.include_usage``: no choices, the usage."""
        kind = "chat.completion.chunk" if self.req.kind == "chat" else "text_completion"
        return {**self._head(kind), "choices": [], "usage": _dump(_usage(done))}


def _public_stats(stats: dict) -> dict:
    keys = (
        "alpha1",
        "alpha2",
        "lr_rounds",
        "sd_rounds",
        "score_rounds",
        "drafted_steps",
        "accepted_steps",
        "exploration_s",
        "wall_s",
    )
    return {k: stats.get(k) for k in keys}


def make_app(scheduler: RoundScheduler, settings: AppSettings, metrics: ServeMetrics | None = None) -> Starlette:
    """The ASGI app over ``scheduler`` (which the caller started and shuts down)."""
    routes = _Routes(scheduler, settings, metrics or ServeMetrics(lambda: scheduler.queued, lambda: scheduler.running))
    return Starlette(
        routes=[
            Route("/v1/chat/completions", routes.chat, methods=["POST"]),
            Route("/v1/completions", routes.completions, methods=["POST"]),
            Route("/v1/models", routes.models, methods=["GET"]),
            Route("/health", routes.health, methods=["GET"]),
            Route("/metrics", routes.prometheus, methods=["GET"]),
        ],
        exception_handlers={Exception: _crash, HTTPException: _no_route},
    )


async def _crash(_: Request, exc: Exception) -> Response:
    """The 500 of an unexpected exception: one line naming it, never a traceback."""
    return error_response(500, f"internal error: {type(exc).__name__}: {exc}")


async def _no_route(request: Request, exc: HTTPException) -> Response:
    """An unknown route (404) or a method its route does not take (405, with ``Allow``), in
    OpenAI's error shape like every other error."""
    where = f"{request.method} {request.url.path}"
    if exc.status_code == 404:
        message = f"no route {where} (served: /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics)"
    elif exc.status_code == 405:
        message = f"method not allowed: {where} (allowed: {(exc.headers or {}).get('Allow', '')})"
    else:
        message = f"{where}: {exc.detail}"
    return error_response(exc.status_code, message, headers=exc.headers)


async def read_body(request: Request, limit: int) -> bytes | None:
    """The request's body; None once it is larger than ``limit`` bytes (by its Content-Length,
    or as it arrives), with no more of it read."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    parts, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


def parse_body(raw: bytes):
    """The JSON value of a request body; a :class:`RequestError` (400) when it is not JSON or is
    nested deeper than :data:`MAX_BODY_DEPTH` (json's decoder recurses: far deeper input raises
    RecursionError, caught here)."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise RequestError(None, f"the request body is nested more than {MAX_BODY_DEPTH} levels deep") from None
    except (ValueError, UnicodeDecodeError):
        raise RequestError(None, "the request body is not valid JSON") from None
    if nesting(body) > MAX_BODY_DEPTH:
        raise RequestError(None, f"the request body is nested more than {MAX_BODY_DEPTH} levels deep")
    return body


class _Routes:
    """The app's state (scheduler, settings, metrics) with one method per route."""

    def __init__(self, scheduler: RoundScheduler, settings: AppSettings, metrics: ServeMetrics) -> None:
        """Hold what every route reads."""
        self.scheduler, self.settings, self.metrics = scheduler, settings, metrics

    def answered(self, endpoint: str, method: str, status: int) -> None:
        """Count one answered request (and its error, from 400 up)."""
        self.metrics.requests.labels(endpoint, method, str(status)).inc()
        if status >= 400:
            self.metrics.errors.labels(str(status)).inc()

    async def health(self, _: Request) -> Response:
        """``GET /health``: ok with the running and queued counts, 503 while draining or without a decode thread."""
        if self.scheduler.stopping:
            return error_response(503, "the server is draining")
        if not self.scheduler.alive:
            return error_response(503, "the decode thread has stopped")
        return JSONResponse({"status": "ok", "running": self.scheduler.running, "queued": self.scheduler.queued})

    async def models(self, _: Request) -> Response:
        """``GET /v1/models``: the served model names as OpenAI ``Model`` objects."""
        from openai.types import Model

        data = [_dump(Model(id=m, created=0, object="model", owned_by="lrtune")) for m in self.settings.limits.models]
        return JSONResponse({"object": "list", "data": data})

    async def prometheus(self, _: Request) -> Response:
        """``GET /metrics``: the Prometheus text exposition."""
        return Response(self.metrics.render(), media_type=CONTENT_TYPE)

    async def chat(self, request: Request) -> Response:
        """``POST /v1/chat/completions``."""
        return await self.complete(request, "chat", "/v1/chat/completions")

    async def completions(self, request: Request) -> Response:
        """``POST /v1/completions``."""
        return await self.complete(request, "completion", "/v1/completions")

    async def complete(self, request: Request, kind: str, endpoint: str) -> Response:
        """Parse, queue and answer one request of ``kind``: whole JSON, or server-sent events with ``stream``."""
        arrived = time.monotonic()
        limit = self.settings.max_body_bytes
        raw = await read_body(request, limit)
        if raw is None:
            self.answered(endpoint, "-", 413)
            return error_response(413, f"the request body is larger than {limit} bytes ({limit / 2**20:g} MiB)")
        try:
            req = parse_request(parse_body(raw), kind, self.settings.limits)  # type: ignore[arg-type]
        except RequestError as e:
            self.answered(endpoint, "-", e.status)
            return error_response(e.status, str(e), e.param)
        call = _Call(self, request, req, endpoint, arrived)
        refusal = await call.encode()  # off the decode thread and off the event loop
        refusal = refusal or call.submit()
        if refusal is not None:
            return refusal
        first = await call.next_event()
        if not isinstance(first, Admitted):
            return call.refused(first)
        out = Responses(req)
        if not req.stream:
            return await call.whole(out)
        return StreamingResponse(
            call.stream(out), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )


class _Call:
    """One parsed request on its way through the scheduler: its job, the job's events, its deadline."""

    def __init__(self, routes: _Routes, request: Request, req: ServeRequest, endpoint: str, arrived: float) -> None:
        """A job for ``req`` whose events come back on this event loop; the deadline counts from ``arrived``."""
        timeout = routes.settings.request_timeout
        self.routes, self.request, self.req, self.endpoint, self.arrived = routes, request, req, endpoint, arrived
        self.deadline = None if timeout is None else arrived + timeout
        self.method = req.cfg.method
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        self.events = events
        self.job = Job(req, emit=lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev))

    async def encode(self) -> Response | None:
        """Tokenize the prompt in a worker thread (``job.ids``); the 400 (ids that cannot run, a
        library error on bad input) or 500 that refuses it, else None."""
        try:
            self.job.ids = await run_in_threadpool(self.routes.scheduler.encode, self.req)
        except Exception as e:  # noqa: BLE001 - this request only, as when the scheduler admits it
            return self.refused(error_of(e))
        return None

    def submit(self) -> Response | None:
        """Queue the job; the 429 (queue full) or 503 (draining) that refuses it, else None."""
        try:
            self.routes.scheduler.submit(self.job)
        except QueueFull as e:
            self.routes.answered(self.endpoint, self.method, 429)
            return error_response(429, str(e), headers={"Retry-After": str(self.routes.settings.retry_after)})
        except Stopping as e:
            self.routes.answered(self.endpoint, self.method, 503)
            return error_response(503, str(e))
        return None

    async def next_event(self):
        """The job's next event; "gone" when the client left, "timeout" past the deadline."""
        while True:
            wait = (
                DISCONNECT_POLL_S if self.deadline is None else min(DISCONNECT_POLL_S, self.deadline - time.monotonic())
            )
            if wait <= 0:
                return "timeout"
            try:
                return await asyncio.wait_for(self.events.get(), wait)
            except asyncio.TimeoutError:
                if await self.request.is_disconnected():
                    return "gone"

    def ending(self, ev) -> tuple[int, str, str | None]:
        """Status, message and field of a request that ends without its answer: an
        :class:`Error` event, the deadline ("timeout") or the client gone ("gone")."""
        if isinstance(ev, Error):
            return ev.status, ev.message, ev.param
        if ev == "timeout":
            return 504, f"request timed out after {self.routes.settings.request_timeout:g} s", None
        return 499, "client went away", None

    def refused(self, ev) -> Response:
        """Cancel the job and answer the error that ended it (:meth:`ending`)."""
        self.routes.scheduler.cancel(self.job)
        status, message, param = self.ending(ev)
        self.routes.answered(self.endpoint, self.method, status)
        return error_response(status, message, param)

    async def whole(self, out: Responses) -> Response:
        """The non-streamed answer: every delta gathered, then one JSON response (or the error)."""
        metrics = self.routes.metrics
        parts: list[str] = []
        while True:
            ev = await self.next_event()
            if isinstance(ev, Delta):
                if not parts:
                    metrics.first_step.observe(time.monotonic() - self.arrived)
                parts.append(ev.text)
                continue
            if not isinstance(ev, Done):
                return self.refused(ev)
            self.routes.scheduler.cancel(self.job)
            metrics.observe_done(ev.stats, ev.prompt_tokens, ev.completion_tokens)
            metrics.latency.observe(time.monotonic() - self.arrived)
            self.routes.answered(self.endpoint, self.method, 200)
            return JSONResponse(out.whole("".join(parts), ev))

    async def stream(self, out: Responses):
        """The streamed answer's server-sent events: role, deltas, finish (usage), ``[DONE]``, or an error event."""
        metrics = self.routes.metrics
        status = None  # how it ended; None in `finally`: the client went away mid-stream
        sent_any = False
        try:
            if self.req.kind == "chat":
                yield _sse(out.chunk(first=True))
            while status is None:
                ev = await self.next_event()
                if isinstance(ev, Delta):
                    if not sent_any:
                        metrics.first_step.observe(time.monotonic() - self.arrived)
                        sent_any = True
                    yield _sse(out.chunk(ev.text))
                elif isinstance(ev, Done):
                    metrics.observe_done(ev.stats, ev.prompt_tokens, ev.completion_tokens)
                    yield _sse(out.chunk(done=ev))
                    if self.req.include_usage:
                        yield _sse(out.usage_chunk(ev))
                    yield _sse("[DONE]")
                    metrics.latency.observe(time.monotonic() - self.arrived)
                    status = 200
                else:
                    status, message, param = self.ending(ev)
                    if status != 499:  # nobody is left to read it
                        yield _sse(error_body(message, "timeout" if status == 504 else "server_error", param))
        finally:
            self.routes.scheduler.cancel(self.job)  # a client that left mid-stream frees its slot at the next round
            self.routes.answered(self.endpoint, self.method, 499 if status is None else status)
