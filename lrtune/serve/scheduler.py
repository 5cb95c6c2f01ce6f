"""Continuous batching at the round level for ``lrtune serve`` (DESIGN §3.7).

One thread owns the decoder and its engines. Requests wait in a bounded queue; before every
round the thread admits waiting requests up to ``max_concurrent`` in flight, drops those
that were cancelled (a client that went away, a timeout), runs one round of every slot
(:meth:`LookaheadDecoder.run_round`: one draft call per position, one target call, one
verifier call for all of them, each slot with its own method and depths), streams what each
slot committed, and retires the slots that ended. A target or SD request runs in chunks of
``horizon`` tokens per round, so it shares the target's calls with the LR requests and never
holds a newcomer back for a whole answer.

Each request hears of its progress through ``emit`` (called on this thread; the app makes it
thread-safe): :class:`Admitted`, :class:`Delta` (text committed, held back while it could
still be the start of a stop sequence), then :class:`Done` or :class:`Error`. An exception in
a round fails the requests of that round only, in one log line; the thread goes on.
"""

from __future__ import annotations

import copy
import functools
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from lrtune.control import ProblemInfo
from lrtune.decoding import checked_token_ids
from lrtune.errors import ConfigError, LrtuneError, check_count, one_line
from lrtune.slots import PromptState
from lrtune.serve.protocol import RequestError, ServeRequest
from lrtune.stats import BatchStats


@dataclass(frozen=True)
class Admitted:
    prompt_tokens: int


@dataclass(frozen=True)
class Delta:
    text: str


@dataclass(frozen=True)
class Done:
    finish_reason: str  # OpenAI's: stop (EOS or a stop sequence) | length
    prompt_tokens: int
    completion_tokens: int
    stats: dict


@dataclass(frozen=True)
class Error:
    status: int
    message: str
    param: str | None = None


Event = Admitted | Delta | Done | Error


def error_of(e: Exception) -> Error:
    """The error a request's own failure answers with: a :class:`RequestError`'s status and
    field, 400 for another lrtune error (bad input), 500 for anything else (tokenizer trouble)."""
    if isinstance(e, RequestError):
        return Error(e.status, str(e), e.param)
    if isinstance(e, LrtuneError):
        return Error(400, one_line(e))
    return Error(500, one_line(f"{type(e).__name__}: {e}"))


class QueueFull(LrtuneError):
    """The queue holds ``max_queue`` requests already (the app answers 429)."""


class Stopping(LrtuneError):
    """The server is draining (the app answers 503)."""


@dataclass(eq=False)
class Job:
    """One request in the scheduler: its checked form and where its events go."""

    request: ServeRequest
    emit: Callable[[Event], None]
    id: int = 0
    cancelled: bool = False
    slot: PromptState | None = None
    sent: str = ""  # text already sent
    stopped_at: int | None = None  # completion tokens when a stop sequence ended it
    resident: bool = False  # a target/sd request that stays in the engine between token steps
    submitted: float = field(default_factory=time.monotonic)
    ids: list[int] | None = None  # the prompt's token ids, encoded before submit (None: encoded when admitted)


def stop_cut(text: str, stops: tuple[str, ...], start: int = 0) -> int | None:
    """Index of the earliest stop sequence in ``text`` at or after ``start`` (None: none)."""
    hits = [i for i in (text.find(s, start) for s in stops) if i >= 0]
    return min(hits) if hits else None


def safe_prefix(text: str, stops: tuple[str, ...], final: bool) -> str:
    """What may be sent of ``text`` now: all of it when ``final``; else without a trailing
    partial character (U+FFFD from a split UTF-8 sequence) and without the last characters
    that could still begin a stop sequence."""
    if final:
        return text
    text = text.rstrip("\ufffd")
    hold = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                hold = max(hold, k)
                break
    return text[: len(text) - hold]


class RoundScheduler:
    """The decode thread (module docstring). ``decoder``: a :class:`LookaheadDecoder` whose
    engines this thread alone calls; ``verifier``: the server's; ``max_len``: the engine's
    context (a longer request fails alone, with a 400)."""

    def __init__(
        self,
        decoder,
        *,
        max_concurrent: int = 8,
        max_queue: int = 64,
        max_len: int | None = None,
        horizon: int = 128,
        log: Callable[[str], None] = print,
        on_round: Callable[[list[Job], float], None] | None = None,
        auto_controller=None,
    ) -> None:
        for name, value, least in (
            ("max_concurrent", max_concurrent, 1),
            ("max_queue", max_queue, 0),
            ("horizon", horizon, 0),
        ):
            check_count(name, value, least)
        if max_len is not None:
            check_count("max_len", max_len, 1)
        self.decoder = decoder
        self.auto_controller = auto_controller  # copied into each "auto" request's slot (adaptive)
        self.max_concurrent = max_concurrent
        self.max_queue = max_queue
        self.max_len = max_len
        self.horizon = horizon
        self.log = log
        self.on_round = on_round  # metrics: the round's jobs and its seconds
        self.batch = BatchStats(max_concurrent=max_concurrent)
        self._pending: deque[Job] = deque()
        self._active: list[Job] = []
        self._cv = threading.Condition()
        self._ids = itertools.count(1)
        self._stopping = False
        # target/sd requests stay in the target's engine and join between token steps where it can
        self.resident = bool(getattr(decoder.target, "supports_resident", False))
        if self.resident:
            decoder.target.serve_resident(between=self._admit_between)
        self._thread = threading.Thread(target=self._run, name="lrtune-rounds", daemon=True)
        self._thread.start()

    # ---- called from the app (any thread) ------------------------------------------
    @property
    def queued(self) -> int:
        return len(self._pending)

    @property
    def running(self) -> int:
        return len(self._active)

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, job: Job) -> Job:
        """Queue ``job``; :class:`QueueFull` when every slot is taken and ``max_queue`` requests
        wait already (``max_queue`` 0: no waiting), :class:`Stopping` while draining."""
        with self._cv:
            if self._stopping:
                raise Stopping("the server is shutting down")
            free = max(0, self.max_concurrent - len(self._active))  # joins at the next round without waiting
            if len(self._pending) >= self.max_queue + free:
                raise QueueFull(f"every slot is busy and {self.max_queue} request(s) wait already; retry later")
            job.id = next(self._ids)
            self._pending.append(job)
            self._cv.notify()
        return job

    def cancel(self, job: Job) -> None:
        """Drop ``job``: at once if it waits, at the next round boundary if it runs."""
        with self._cv:
            job.cancelled = True
            if job in self._pending:
                self._pending.remove(job)
            self._cv.notify()

    def stop_admitting(self) -> None:
        """Refuse new requests from now on (:class:`Stopping`); the queued ones still run."""
        with self._cv:
            self._stopping = True
            self._cv.notify()

    def shutdown(self, timeout: float | None = None) -> bool:
        """Stop admitting new requests, let the queued and running ones finish, stop the
        thread; True when it ended within ``timeout`` seconds."""
        self.stop_admitting()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # ---- the decode thread ---------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._pending and not self._active and not self._stopping:
                    self._cv.wait()
                if self._stopping and not self._pending and not self._active:
                    return
                admitted = []
                while self._pending and len(self._active) + len(admitted) < self.max_concurrent:
                    admitted.append(self._pending.popleft())
            for job in admitted:
                self._admit(job)
            self._drop_cancelled()
            if not self._active:
                continue
            jobs = [j for j in self._active if not j.resident]
            t0 = time.perf_counter()
            try:
                if jobs:  # resident rows advance with the round's target call when they share its engine
                    self.decoder.run_round(
                        [j.slot for j in jobs], on_commit=lambda i, _src, _ids: self._committed(i), batch=self.batch
                    )
                elif self.decoder.target.resident_rows:
                    self.decoder.target.step_resident()
                else:  # a resident job whose request the engine no longer holds: never spin on it
                    raise RuntimeError("a request left the engine without its end")
            except Exception as e:  # an engine error fails the requests in flight in it only
                self._fail_all(e)
                continue
            if jobs and self.on_round is not None:
                self.on_round(jobs, time.perf_counter() - t0)
            for j in [j for j in jobs if j.slot.done]:
                self._active.remove(j)
                if not j.cancelled:
                    self._finish(j)

    def _fail_all(self, e: Exception) -> None:
        msg = one_line(f"{type(e).__name__}: {e}")
        failed, self._active = self._active, []
        self.log(f"lrtune serve: a round failed ({len(failed)} request(s) dropped): {msg}")
        for j in failed:
            if j.resident:
                self.decoder.target.abort_resident(j.id)
            j.emit(Error(500, f"decoding failed: {msg}"))

    def _drop_cancelled(self) -> None:
        for j in [j for j in self._active if j.cancelled]:
            self._leave(j)

    def _leave(self, job: Job):
        """Take ``job`` out of flight (a resident row out of the engine: its SD counters)."""
        self._active.remove(job)
        return self.decoder.target.abort_resident(job.id) if job.resident else None

    def _admit_between(self) -> None:
        """Between two engine steps: admit waiting target/sd requests while slots are free, in
        arrival order (an LR request at the head waits for the round's end, and so do those
        behind it)."""
        while True:
            with self._cv:
                if not self._pending or len(self._active) >= self.max_concurrent:
                    return
                if self._pending[0].request.cfg.uses_lr:
                    return
                job = self._pending.popleft()
            self._admit(job)

    def _admit(self, job: Job) -> None:
        """Encode the request and open its slot (a target/sd request on an engine that keeps
        resident rows starts in the engine at once); a prompt that cannot run fails alone."""
        if job.cancelled:
            return
        req, dec = job.request, self.decoder
        try:
            ids = job.ids if job.ids is not None else self.encode(req)
            cfg = req.cfg
            if self.max_len is not None and cfg.tokens_needed(len(ids)) > self.max_len:
                # the field to lower: the step's when the prompt and the budget alone would fit
                fits = len(ids) + cfg.max_new_tokens <= self.max_len
                raise RequestError(
                    "max_step_tokens" if cfg.uses_lr and fits else "max_tokens",
                    f"the prompt ({len(ids)} tokens) + max_tokens ({cfg.max_new_tokens})"
                    + (f" + a step ({cfg.max_step_tokens})" if cfg.uses_lr else "")
                    + f" exceed the server's context of {self.max_len} tokens",
                )
            problem = ProblemInfo(id=f"request-{job.id}", text=_problem_text(req, dec, ids), prompt_tokens=len(ids))
            controller = "copy"
            if req.auto and self.auto_controller is not None and cfg.uses_lr:
                controller = copy.copy(self.auto_controller)
            job.slot = dec.open_slot(job.id, ids, cfg, problem=problem, controller=controller, horizon=self.horizon)
            if self.resident and not cfg.uses_lr:
                update = functools.partial(self._resident_update, job)
                dec.target.add_resident(job.id, ids, dec.plain_params(cfg), update)
                job.resident = True
        except Exception as e:  # noqa: BLE001 - this request only
            job.emit(error_of(e))
            return
        self._active.append(job)
        job.emit(Admitted(prompt_tokens=len(ids)))

    def encode(self, req: ServeRequest) -> list[int]:
        """The token ids of ``req``'s prompt (chat template for messages; ids checked against the
        vocabulary). Called by the app off the decode thread, so a long prompt's tokenizing never
        holds the rounds of the requests in flight; :class:`RequestError` for ids that cannot run."""
        target = self.decoder.target
        if req.kind == "chat":
            return target.encode_messages(list(req.messages))
        if isinstance(req.prompt, str):
            return target.encode_prompt(req.prompt, chat=False)
        try:
            return checked_token_ids(req.prompt, getattr(target, "vocab_size", None))
        except ConfigError as e:
            raise RequestError("prompt", str(e)) from None

    def _resident_update(self, job: Job, tokens: list[int], gen, sd) -> None:
        """A resident row advanced (``gen``: its :class:`Generation` when it ended): stream
        the new text; end it at its end, a stop sequence or a cancellation."""
        if job.slot is None or job.slot.done or job not in self._active:
            return
        if job.cancelled:
            self._leave(job)
            return
        job.slot.gen = list(gen.token_ids) if gen is not None else list(tokens)
        self._committed(job.id)
        if not job.slot.done and gen is None:
            return
        left = self._leave(job)  # a stop sequence ended it while the engine still runs it: aborted
        job.slot.done = True
        job.slot.steps = [("target", list(job.slot.gen))]
        job.slot.stats.observe_target_call(time.perf_counter() - job.slot.started, sd if gen is not None else left)
        self._finish(job)

    def _job(self, index: int) -> Job | None:
        return next((j for j in self._active if j.id == index), None)

    def _committed(self, index: int) -> None:
        """A slot committed tokens: send the new text, end it at a stop sequence."""
        job = self._job(index)
        if job is None or job.cancelled or job.stopped_at is not None:
            return
        stops = job.request.stop
        text = self.decoder.target.decode(job.slot.gen, skip_special_tokens=True)
        if stops:
            cut = stop_cut(text, stops, max(0, len(job.sent) - max(map(len, stops))))
            if cut is not None:
                job.stopped_at = len(job.slot.gen)
                job.slot.done = True
                text = text[:cut]
                self._send(job, text)
                return
        self._send(job, safe_prefix(text, stops, final=False))

    def _send(self, job: Job, text: str) -> None:
        if len(text) > len(job.sent) and text.startswith(job.sent):
            job.emit(Delta(text[len(job.sent) :]))
            job.sent = text

    def _finish(self, job: Job) -> None:
        result, stats = self.decoder.close_slot(job.slot)
        if job.stopped_at is None:
            self._send(job, result.text)
        tokens = job.stopped_at if job.stopped_at is not None else len(result.token_ids)
        reason = "stop" if job.stopped_at is not None or result.finish == "eos" else "length"
        job.emit(Done(reason, len(job.slot.prompt), tokens, stats.to_dict()))


def _problem_text(req: ServeRequest, dec, ids: list[int]) -> str:
    """What a verifier reads as the problem statement: the last user message, the prompt text."""
    if req.kind == "chat":
        users = [m["content"] for m in req.messages if m["role"] == "user"]
        return users[-1] if users else req.messages[-1]["content"]
    return req.prompt if isinstance(req.prompt, str) else dec.target.decode(ids, skip_special_tokens=True)
