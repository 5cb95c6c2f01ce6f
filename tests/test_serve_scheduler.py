"""lrtune serve's round scheduler, on the deterministic fake pair (orchestration only; the
real engines are in test_serve_openai.py): requests join and leave between rounds, each
gets what it gets alone, and faults stay with their own requests."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from fake_backend import FakeBackend, chain
from lrtune.decoder import DecodeConfig, LookaheadDecoder
from lrtune.errors import ConfigError
from lrtune.serve.protocol import ServeRequest
from lrtune.serve.scheduler import Admitted, Delta, Done, Error, Job, QueueFull, RoundScheduler, Stopping
from lrtune.verifiers import make_verifier

BASE = DecodeConfig(method="lr+sd", gamma1=2, gamma2=2, max_new_tokens=40, max_step_tokens=8)
PROMPTS = [[5 + i, 9, 11 + 2 * i, 7] for i in range(8)]
WAIT = 60  # seconds: an upper bound for a wait on readiness, never a sleep


def pair(seed: int = 3):
    table, other = chain(seed), chain(seed + 100)
    draft = [o if i % 4 == 0 else t for i, (t, o) in enumerate(zip(table, other))]
    return FakeBackend(table, "target"), FakeBackend(draft, "draft")


def decoder(**kw) -> LookaheadDecoder:
    target, draft = pair()
    return LookaheadDecoder(target, draft, make_verifier("exact"), BASE, **kw)


class Sink:
    """A request's events, in order; ``ended`` is set on Done or Error."""

    def __init__(self) -> None:
        self.events: list = []
        self.ended = threading.Event()
        self.first_delta = threading.Event()

    def __call__(self, ev) -> None:
        self.events.append(ev)
        if isinstance(ev, Delta):
            self.first_delta.set()
        if isinstance(ev, (Done, Error)):
            self.ended.set()

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, Delta))

    @property
    def last(self):
        return self.events[-1]


def request(ids, **cfg) -> ServeRequest:
    return ServeRequest(kind="completion", model="m", cfg=replace(BASE, **cfg), prompt=tuple(ids))


def submit(sched: RoundScheduler, ids, **cfg) -> tuple[Job, Sink]:
    sink = Sink()
    job = sched.submit(Job(request(ids, **cfg), emit=sink))
    return job, sink


def alone(ids, **cfg) -> str:
    res, _ = decoder().decode(ids, replace(BASE, **cfg))
    return res.text


@pytest.fixture
def sched():
    made = []

    def make(dec=None, **kw):
        s = RoundScheduler(dec or decoder(), log=lambda line: None, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.shutdown(WAIT)


def test_sixteen_requests_with_four_methods_each_get_what_they_get_alone(sched):
    s = sched(max_concurrent=5, horizon=6)
    methods = ["target", "sd", "lr", "lr+sd"]
    jobs = [(m, p, submit(s, p, method=m)[1]) for m in methods for p in PROMPTS[:4]]
    for m, p, sink in jobs:
        assert sink.ended.wait(WAIT)
        assert isinstance(sink.events[0], Admitted) and isinstance(sink.last, Done), (m, sink.last)
        assert sink.text == alone(p, method=m), m
        assert sink.last.completion_tokens > 0 and sink.last.prompt_tokens == len(p)


def test_a_request_that_arrives_while_others_decode_joins_the_next_round(sched):
    dec, gated = gated_decoder()
    slots_per_round: list[int] = []
    s = sched(dec, max_concurrent=4, on_round=lambda jobs, secs: slots_per_round.append(len(jobs)))
    _, first = submit(s, PROMPTS[0], max_new_tokens=40)
    assert gated.entered.wait(WAIT)  # the first request's first round is under way
    _, second = submit(s, PROMPTS[1], max_new_tokens=8)
    gated.gate.set()
    assert second.ended.wait(WAIT) and first.ended.wait(WAIT)
    assert slots_per_round[0] == 1 and 2 in slots_per_round  # it joined at a round boundary
    assert second.text == alone(PROMPTS[1], max_new_tokens=8) and first.text == alone(PROMPTS[0])


def test_a_cancelled_request_leaves_at_the_next_round_and_hears_nothing_more(sched):
    dec, gated = gated_decoder()
    s = sched(dec, max_concurrent=2)
    job, sink = submit(s, PROMPTS[2], max_new_tokens=40)
    assert gated.entered.wait(WAIT)
    s.cancel(job)  # mid-round: it leaves when the round ends
    gated.gate.set()
    _, after = submit(s, PROMPTS[3])
    assert after.ended.wait(WAIT) and isinstance(after.last, Done)
    assert [type(e) for e in sink.events] == [Admitted] and s.running == 0


class GatedBackend(FakeBackend):
    """A fake target whose calls wait for ``gate`` (holds the decode thread in a round) and
    can fail once (``fail_next``)."""

    def __init__(self, table, name="target") -> None:
        super().__init__(table, name)
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail_next = False

    def generate(self, *a, **kw):
        self.entered.set()
        assert self.gate.wait(WAIT)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("engine died")
        return super().generate(*a, **kw)


def gated_decoder():
    target, draft = pair()
    gated = GatedBackend(target.table)
    return LookaheadDecoder(gated, draft, make_verifier("exact"), BASE), gated


def test_a_full_queue_refuses_the_next_request(sched):
    dec, gated = gated_decoder()
    s = sched(dec, max_concurrent=1, max_queue=1)
    _, running = submit(s, PROMPTS[0], method="target")
    assert gated.entered.wait(WAIT)  # the decode thread is inside the first request's round
    _, queued = submit(s, PROMPTS[1], method="target")
    with pytest.raises(QueueFull):
        submit(s, PROMPTS[2], method="target")
    gated.gate.set()
    assert running.ended.wait(WAIT) and queued.ended.wait(WAIT)
    assert isinstance(running.last, Done) and isinstance(queued.last, Done)


def test_an_engine_error_fails_only_the_requests_of_its_round_and_the_thread_goes_on(sched):
    dec, gated = gated_decoder()
    lines: list[str] = []
    s = RoundScheduler(dec, max_concurrent=2, log=lines.append)
    try:
        _, a = submit(s, PROMPTS[0], method="target")
        assert gated.entered.wait(WAIT)
        gated.fail_next = True
        gated.gate.set()
        assert a.ended.wait(WAIT) and isinstance(a.last, Error) and a.last.status == 500
        assert len(lines) == 1 and "engine died" in lines[0]
        _, b = submit(s, PROMPTS[1], method="target")
        assert b.ended.wait(WAIT) and isinstance(b.last, Done) and b.text == alone(PROMPTS[1], method="target")
    finally:
        s.shutdown(WAIT)


def test_shutdown_drains_queued_and_running_requests_then_refuses_new_ones(sched):
    s = sched(max_concurrent=1)
    sinks = [submit(s, p, max_new_tokens=16)[1] for p in PROMPTS[:3]]
    assert s.shutdown(WAIT)
    assert all(isinstance(k.last, Done) for k in sinks)
    with pytest.raises(Stopping):
        submit(s, PROMPTS[0])


def test_a_prompt_too_long_for_the_context_fails_alone_naming_max_tokens(sched):
    s = sched(max_concurrent=2, max_len=30)
    _, long_one = submit(s, PROMPTS[0] * 5, max_new_tokens=16)
    _, fits = submit(s, PROMPTS[1], max_new_tokens=8, method="target")
    assert long_one.ended.wait(WAIT) and fits.ended.wait(WAIT)
    assert isinstance(long_one.last, Error) and long_one.last.status == 400 and long_one.last.param == "max_tokens"
    assert isinstance(fits.last, Done)


def test_a_step_too_long_for_the_context_fails_naming_max_step_tokens(sched):
    s = sched(max_concurrent=1, max_len=30)
    _, sink = submit(s, PROMPTS[0], max_new_tokens=16, max_step_tokens=16)  # 4 + 16 fits, + a step of 16 not
    assert sink.ended.wait(WAIT)
    assert isinstance(sink.last, Error) and sink.last.status == 400 and sink.last.param == "max_step_tokens"


def test_a_stop_sequence_ends_the_answer_before_it(sched):
    full = alone(PROMPTS[4], method="target")
    stop = full[len(full) // 2 : len(full) // 2 + 4]
    s = sched()
    sink = Sink()
    s.submit(Job(replace(request(PROMPTS[4], method="target"), stop=(stop,)), emit=sink))
    assert sink.ended.wait(WAIT)
    assert sink.text == full[: full.index(stop)] and sink.last.finish_reason == "stop"


@pytest.mark.parametrize("horizon", [0, 5, None])
def test_a_target_or_sd_slot_gets_what_it_gets_alone_in_steps_chunks_or_one_run(horizon):
    dec = decoder()
    for method in ("target", "sd"):
        cfg = replace(BASE, method=method)
        slot = dec.open_slot(0, PROMPTS[5], cfg, horizon=horizon)
        rounds = 0
        while not slot.done:
            dec.run_round([slot])
            rounds += 1
        result, _ = dec.close_slot(slot)
        assert result.text == alone(PROMPTS[5], method=method)
        if horizon == 0:  # one step per round
            assert rounds == len(result.steps) and all(src == "target" for src, _ in result.steps)
        if horizon is None:
            assert rounds == 1


def test_a_queue_of_zero_admits_while_slots_are_free_and_refuses_when_they_are_not(sched):
    dec, gated = gated_decoder()
    s = sched(dec, max_concurrent=2, max_queue=0)
    _, a = submit(s, PROMPTS[0], method="target")
    assert gated.entered.wait(WAIT)  # a holds one slot; one is free
    _, b = submit(s, PROMPTS[1], method="target")  # takes the free slot at the next round
    with pytest.raises(QueueFull):
        submit(s, PROMPTS[2], method="target")
    gated.gate.set()
    assert a.ended.wait(WAIT) and b.ended.wait(WAIT) and isinstance(b.last, Done)


def test_a_token_id_prompt_out_of_the_vocabulary_fails_alone_before_it_reaches_a_round(sched):
    dec = decoder()
    dec.target.vocab_size = 40  # the fake's vocabulary
    s = sched(dec, max_concurrent=2)
    _, negative = submit(s, [5, -1, 7], method="target")
    _, too_big = submit(s, [5, 40, 7], method="target")
    _, fine = submit(s, PROMPTS[1], method="target")
    assert negative.ended.wait(WAIT) and too_big.ended.wait(WAIT) and fine.ended.wait(WAIT)
    for sink in (negative, too_big):
        assert isinstance(sink.last, Error) and sink.last.status == 400 and sink.last.param == "prompt"
    assert isinstance(fine.last, Done) and fine.text == alone(PROMPTS[1], method="target")


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"max_concurrent": 0}, "max_concurrent"),
        ({"max_queue": -1}, "max_queue"),
        ({"horizon": 1.5}, "horizon"),
        ({"max_len": True}, "max_len"),
    ],
)
def test_the_scheduler_refuses_a_bad_argument_naming_it_before_its_thread_starts(kw, name):
    import threading as th

    before = th.active_count()
    with pytest.raises(ConfigError, match=f"^{name}"):
        RoundScheduler(decoder(), **kw)
    assert th.active_count() == before
