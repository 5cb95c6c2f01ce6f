"""Resident rows in lrtune serve's scheduler (orchestration, on a fake target that keeps
requests between steps as a vLLM engine does; the real engine is in
test_vllm_resident.py): a target or sd request starts between two token steps, streams every
step, and leaves the engine at its end, its stop sequence, its cancellation or an engine error."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from fake_backend import FakeBackend
from lrtune.decoder import LookaheadDecoder
from lrtune.serve.scheduler import Admitted, Delta, Done, Error, Job, RoundScheduler
from lrtune.verifiers import make_verifier
from test_serve_scheduler import BASE, PROMPTS, WAIT, Sink, alone, pair, request, submit


class ResidentFake(FakeBackend):
    """A fake target with resident rows: each step reveals one more token of every resident
    row's answer (the fake's own ``generate`` of it), then calls ``between``. Steps wait for
    ``gate``; ``fail_next`` makes the next step raise. A ``generate`` call (an LR round's)
    takes one step too, as it does on a shared vLLM engine."""

    supports_resident = True

    def __init__(self, table, name="target") -> None:
        super().__init__(table, name)
        self.rows: dict[int, list] = {}  # key -> [answer, shown, on_update]
        self.aborted: list[int] = []
        self.between = None
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail_next = False

    def serve_resident(self, between=None) -> None:
        self.between = between

    def add_resident(self, key, prefix, params, on_update) -> None:
        self.rows[key] = [FakeBackend.generate(self, [prefix], params).outputs[0], 0, on_update]

    def generate(self, *a, **kw):
        """A round's call: the engine steps resident rows with it (one step here)."""
        out = super().generate(*a, **kw)
        self.step_resident()
        return out

    def abort_resident(self, key):
        if self.rows.pop(key, None) is not None:
            self.aborted.append(key)
        return None

    @property
    def resident_rows(self) -> int:
        return len(self.rows)

    def step_resident(self) -> None:
        self.entered.set()
        assert self.gate.wait(WAIT)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("engine died")
        for key, row in list(self.rows.items()):
            if key not in self.rows:  # an update before it ended the row
                continue
            gen, shown, update = row
            row[1] = shown = shown + 1
            if shown >= len(gen.token_ids):
                del self.rows[key]
                update(list(gen.token_ids), gen, None)
            else:
                update(list(gen.token_ids[:shown]), None, None)
        if self.between is not None:
            self.between()


@pytest.fixture
def sched():
    made = []

    def make(dec, **kw):
        s = RoundScheduler(dec, **{"log": lambda line: None, **kw})
        made.append(s)
        return s

    yield make
    for s in made:
        s.shutdown(WAIT)


def resident_decoder():
    target, draft = pair()
    fake = ResidentFake(target.table)
    return LookaheadDecoder(fake, draft, make_verifier("exact"), BASE), fake


class Log:
    """Events of several requests in one order: (name, event type)."""

    def __init__(self) -> None:
        self.order: list[tuple[str, type]] = []

    def sink(self, name: str) -> Sink:
        s = Sink()
        inner = s.__call__

        def emit(ev) -> None:
            self.order.append((name, type(ev)))
            inner(ev)

        s.__call__ = emit  # type: ignore[method-assign]
        return s


def submit_to(s, log: Log, name: str, ids, **cfg):
    sink = log.sink(name)
    job = s.submit(Job(request(ids, **cfg), emit=lambda ev: sink.__call__(ev)))
    return job, sink


def test_a_sd_request_joins_between_token_steps_and_streams_each_step(sched):
    dec, fake = resident_decoder()
    s = sched(dec, max_concurrent=4)
    log = Log()
    _, first = submit_to(s, log, "first", PROMPTS[0], method="sd", max_new_tokens=40)
    assert fake.entered.wait(WAIT)  # the decode thread waits inside a step with the first request in the engine
    _, second = submit_to(s, log, "second", PROMPTS[1], method="target", max_new_tokens=8)
    fake.gate.set()
    assert first.ended.wait(WAIT) and second.ended.wait(WAIT)
    first_deltas = [i for i, e in enumerate(log.order) if e == ("first", Delta)]
    assert first_deltas[0] < log.order.index(("second", Admitted)) < first_deltas[1]  # joined after one step
    assert log.order.index(("second", Done)) < log.order.index(("first", Done))
    assert first.text == alone(PROMPTS[0], method="sd", max_new_tokens=40)
    assert second.text == alone(PROMPTS[1], method="target", max_new_tokens=8)
    assert sum(isinstance(e, Delta) for e in first.events) > 3  # a delta per step, not one per answer
    assert isinstance(first.last, Done) and first.last.completion_tokens > 0 and s.running == 0


def test_an_lr_request_at_the_head_of_the_queue_holds_the_ones_behind_it_until_a_round_boundary(sched):
    dec, fake = resident_decoder()
    s = sched(dec, max_concurrent=4)
    log = Log()
    submit_to(s, log, "sd", PROMPTS[0], method="sd", max_new_tokens=30)
    assert fake.entered.wait(WAIT)
    _, lr = submit_to(s, log, "lr", PROMPTS[1], method="lr+sd", max_new_tokens=16)
    _, late = submit_to(s, log, "late", PROMPTS[2], method="target", max_new_tokens=8)
    fake.gate.set()
    assert lr.ended.wait(WAIT) and late.ended.wait(WAIT)
    assert log.order.index(("lr", Admitted)) < log.order.index(("late", Admitted))  # arrival order
    assert lr.text == alone(PROMPTS[1], method="lr+sd", max_new_tokens=16)


def test_a_sd_request_joins_during_an_lr_rounds_target_call(sched):
    dec, fake = resident_decoder()
    s = sched(dec, max_concurrent=4)
    log = Log()
    _, lr = submit_to(s, log, "lr", PROMPTS[0], method="lr+sd", max_new_tokens=24)
    assert fake.entered.wait(WAIT)  # inside the LR round's target call
    _, sd = submit_to(s, log, "sd", PROMPTS[1], method="sd", max_new_tokens=8)
    fake.gate.set()
    assert lr.ended.wait(WAIT) and sd.ended.wait(WAIT)
    assert log.order.index(("sd", Admitted)) < log.order.index(("lr", Delta))  # before the round committed
    assert lr.text == alone(PROMPTS[0], method="lr+sd", max_new_tokens=24)
    assert sd.text == alone(PROMPTS[1], method="sd", max_new_tokens=8)


def test_a_cancelled_resident_request_leaves_the_engine_and_hears_nothing_more(sched):
    dec, fake = resident_decoder()
    s = sched(dec, max_concurrent=2)
    job, sink = submit(s, PROMPTS[2], method="sd", max_new_tokens=40)
    assert fake.entered.wait(WAIT)
    s.cancel(job)
    fake.gate.set()
    _, after = submit(s, PROMPTS[3], method="target", max_new_tokens=8)
    assert after.ended.wait(WAIT) and isinstance(after.last, Done)
    assert job.id in fake.aborted and not sink.ended.is_set() and s.running == 0
    assert all(not isinstance(e, (Done, Error)) for e in sink.events)


def test_a_stop_sequence_ends_a_resident_request_and_aborts_it_in_the_engine(sched):
    full = alone(PROMPTS[4], method="target")
    stop = full[len(full) // 2 : len(full) // 2 + 4]
    dec, fake = resident_decoder()
    fake.gate.set()
    s = sched(dec)
    sink = Sink()
    job = s.submit(Job(replace(request(PROMPTS[4], method="target"), stop=(stop,)), emit=sink))
    assert sink.ended.wait(WAIT)
    assert sink.text == full[: full.index(stop)] and sink.last.finish_reason == "stop"
    assert job.id in fake.aborted and fake.resident_rows == 0


def test_an_engine_error_in_a_step_fails_the_resident_requests_and_the_thread_goes_on(sched):
    dec, fake = resident_decoder()
    lines: list[str] = []
    s = sched(dec, max_concurrent=2, log=lines.append)
    _, a = submit(s, PROMPTS[0], method="sd")
    assert fake.entered.wait(WAIT)
    fake.fail_next = True
    fake.gate.set()
    assert a.ended.wait(WAIT) and isinstance(a.last, Error) and a.last.status == 500
    assert len(lines) == 1 and "engine died" in lines[0] and fake.resident_rows == 0
    _, b = submit(s, PROMPTS[1], method="sd")
    assert b.ended.wait(WAIT) and isinstance(b.last, Done) and b.text == alone(PROMPTS[1], method="sd")
