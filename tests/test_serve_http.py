"""lrtune serve over HTTP on the fake pair (orchestration: no model): bad requests get a 400
JSON error naming the field, a full queue a 429 with Retry-After, a timeout a 504, an engine
error a 500, a client that leaves mid-stream frees its slot, and the server keeps answering
after each."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from lrtune.serve.app import AppSettings, make_app
from lrtune.serve.protocol import ServerLimits
from lrtune.serve.scheduler import RoundScheduler
from serve_helpers import WAIT, serving, wait_until
from test_serve_scheduler import BASE, gated_decoder

LIMITS = ServerLimits(defaults=BASE, models=("fake",), has_draft=True, gamma2_max=2)
CHAT = {"model": "fake", "messages": [{"role": "user", "content": "two plus two"}], "max_tokens": 24}


@pytest.fixture
def server():
    """(base url, scheduler, gated target) of a server over the gated fake pair; the gate starts open."""
    dec, gated = gated_decoder()
    gated.gate.set()
    sched = RoundScheduler(dec, max_concurrent=1, max_queue=1, log=lambda line: None)
    app = make_app(sched, AppSettings(limits=LIMITS, request_timeout=30.0, retry_after=3))
    with serving(app) as url:
        yield url, sched, gated
    gated.gate.set()
    sched.shutdown(WAIT)


def ok(url: str) -> dict:
    r = httpx.post(f"{url}/v1/chat/completions", json=CHAT, timeout=WAIT)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize(
    "body, param",
    [
        (b"{not json", None),
        (json.dumps({**CHAT, "beam_width": 2}).encode(), "beam_width"),
        (json.dumps({**CHAT, "gamma1": -1}).encode(), "gamma1"),
        (json.dumps({**CHAT, "messages": [{"role": "robot", "content": "x"}]}).encode(), "messages[0].role"),
        (json.dumps({**CHAT, "temperature": "warm"}).encode(), "temperature"),
        (json.dumps({**CHAT, "max_tokens": "5"}).encode(), "max_tokens"),  # strict JSON types, as OpenAI's
        (json.dumps({**CHAT, "temperature": "0.5"}).encode(), "temperature"),
        (json.dumps({**CHAT, "max_tokens": -1, "max_completion_tokens": 9}).encode(), "max_tokens"),
    ],
)
def test_a_bad_request_is_a_400_json_error_naming_the_field_and_the_server_goes_on(server, body, param):
    url, _, _ = server
    r = httpx.post(f"{url}/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error" and "Traceback" not in err["message"]
    assert "\n" not in err["message"]
    assert ok(url)["choices"][0]["message"]["content"]


def test_an_unknown_model_is_a_404(server):
    url, _, _ = server
    r = httpx.post(f"{url}/v1/chat/completions", json={**CHAT, "model": "gpt-4"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"


def test_models_health_and_metrics_answer(server):
    url, _, _ = server
    assert [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]] == ["fake"]
    assert httpx.get(f"{url}/health").json()["status"] == "ok"
    ok(url)
    text = httpx.get(f"{url}/metrics").text
    assert 'lrtune_requests_total{endpoint="/v1/chat/completions",method="lr+sd",status="200"} 1.0' in text
    assert "lrtune_queue_depth 0.0" in text and "lrtune_drafted_steps_total" in text


def test_a_full_queue_is_a_429_with_retry_after(server):
    url, sched, gated = server
    gated.gate.clear()
    gated.entered.clear()
    results: list = []
    calls = [threading.Thread(target=lambda: results.append(ok(url))) for _ in range(2)]
    calls[0].start()
    assert gated.entered.wait(WAIT)  # the first request holds the only slot
    calls[1].start()
    wait_until(lambda: sched.queued == 1, "the second request to queue")
    r = httpx.post(f"{url}/v1/chat/completions", json=CHAT)
    assert r.status_code == 429 and r.headers["retry-after"] == "3" and r.json()["error"]["type"] == "rate_limit_error"
    gated.gate.set()
    for c in calls:
        c.join(WAIT)
    assert len(results) == 2
    ok(url)


def test_a_client_that_leaves_mid_stream_frees_its_slot(server):
    url, sched, gated = server
    gated.gate.clear()  # the first round waits: the answer cannot end before the client leaves
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={**CHAT, "max_tokens": 40, "stream": True}) as r:
        assert r.status_code == 200
        assert next(r.iter_lines()).startswith("data: ")  # the role chunk: the request holds a slot
    wait_until(lambda: 'status="499"' in httpx.get(f"{url}/metrics").text, "the server to see the client leave")
    gated.gate.set()
    wait_until(lambda: sched.running == 0 and sched.queued == 0, "the slot to be freed")
    metrics = httpx.get(f"{url}/metrics").text
    assert "lrtune_generated_tokens_total 0.0" in metrics  # it never finished
    assert 'status="200"' not in metrics
    ok(url)


def test_a_request_past_its_timeout_is_a_504_and_leaves(server):
    url, sched, gated = server
    dec, _ = gated_decoder()
    gated2 = dec.target
    sched2 = RoundScheduler(dec, max_concurrent=1, log=lambda line: None)
    app = make_app(sched2, AppSettings(limits=LIMITS, request_timeout=0.5))
    try:
        with serving(app) as url2:
            r = httpx.post(f"{url2}/v1/chat/completions", json=CHAT, timeout=WAIT)
            assert r.status_code == 504 and "timed out" in r.json()["error"]["message"]
            gated2.gate.set()
            wait_until(lambda: sched2.running == 0, "the timed-out request to leave")
    finally:
        gated2.gate.set()
        sched2.shutdown(WAIT)


def test_an_engine_error_is_a_500_for_its_requests_and_the_server_goes_on(server):
    url, _, gated = server
    gated.fail_next = True
    r = httpx.post(f"{url}/v1/chat/completions", json=CHAT, timeout=WAIT)
    assert r.status_code == 500 and "engine died" in r.json()["error"]["message"]
    ok(url)


def test_a_stream_ends_with_the_finish_reason_usage_and_done(server):
    url, _, _ = server
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=WAIT) as r:
        lines = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(ln) for ln in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-2]["choices"][0]["finish_reason"] in ("stop", "length")
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == ok(url)["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--schedule", "async"], "--schedule async"),
        (["--port", "70000"], "--port"),
        (["--host", "no-such-host.invalid"], "--host no-such-host.invalid"),
        (["--max-concurrent", "0"], "--max-concurrent"),
        (["--request-timeout", "-1"], "--request-timeout"),
    ],
)
def test_serve_refuses_bad_options_in_one_line_before_any_model_loads(args, words, tmp_path):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "lrtune", "serve", "--target", str(tmp_path / "no-model"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "no-model" not in proc.stderr


def test_serve_refuses_a_port_in_use_before_any_model_loads(tmp_path):
    import socket
    import subprocess
    import sys

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cmd = [sys.executable, "-m", "lrtune", "serve", "--target", str(tmp_path / "no-model"), "--port", str(port)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and f"--port {port}" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_completion_stream_sends_text_chunks_then_the_finish_reason(server):
    url, _, _ = server
    body = {"model": "fake", "prompt": [5, 9, 11, 7], "max_tokens": 24, "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=WAIT) as r:
        lines = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(ln) for ln in lines[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks][:-1] == [None] * (len(chunks) - 1)
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    whole = httpx.post(f"{url}/v1/completions", json={**body, "stream": False}, timeout=WAIT).json()
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]


def test_serve_refuses_a_profile_that_is_no_profile_before_any_model_loads(tmp_path):
    import subprocess
    import sys

    prof = tmp_path / "p.json"
    prof.write_text('{"a": 1}')
    cmd = [sys.executable, "-m", "lrtune", "serve", "--target", str(tmp_path / "no-model"), "--profile", str(prof)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "not an lrtune profile" in proc.stderr and "no-model" not in proc.stderr


def test_serve_refuses_a_profile_whose_c1_or_c2_is_not_a_finite_number_above_0_before_any_model_loads(tmp_path):
    import subprocess
    import sys

    for text, field in (('{"c1": -3, "c2": 0.2}', "c1"), ('{"c1": 0.3, "c2": NaN}', "c2")):
        prof = tmp_path / "p.json"
        prof.write_text(text)
        cmd = [sys.executable, "-m", "lrtune", "serve", "--target", str(tmp_path / "no-model"), "--profile", str(prof)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and f"{field} must be a finite number > 0" in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "no-model" not in proc.stderr


def _openai_error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status and r.headers["content-type"] == "application/json", r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and "\n" not in err["message"]
    return err


def test_an_unknown_route_is_a_404_and_a_method_a_route_does_not_take_a_405_in_openai_error_shape(server):
    url, _, _ = server
    err = _openai_error(httpx.post(f"{url}/v1/embeddings", json={"model": "fake", "input": "x"}), 404)
    assert err["type"] == "not_found_error" and "/v1/embeddings" in err["message"]
    r = httpx.get(f"{url}/v1/chat/completions")
    err = _openai_error(r, 405)
    assert err["type"] == "invalid_request_error" and r.headers["allow"] == "POST" and "POST" in err["message"]
    _openai_error(httpx.delete(f"{url}/v1/models"), 405)
    ok(url)


def test_a_body_nested_too_deep_is_a_400_in_openai_error_shape_not_a_500(server):
    url, _, _ = server
    for depth in (100_000, 40):  # past json's recursion, and past MAX_BODY_DEPTH within it
        body = b'{"model": "fake", "messages": ' + b"[" * depth + b"]" * depth + b"}"
        r = httpx.post(f"{url}/v1/chat/completions", content=body, headers={"content-type": "application/json"})
        assert "nested more than" in _openai_error(r, 400)["message"]
    ok(url)


def test_a_body_over_the_size_limit_is_a_413_before_it_is_parsed():
    from lrtune.serve.app import MAX_BODY_BYTES

    assert MAX_BODY_BYTES == 4 * 2**20
    dec, gated = gated_decoder()
    gated.gate.set()
    sched = RoundScheduler(dec, max_concurrent=1, log=lambda line: None)
    app = make_app(sched, AppSettings(limits=LIMITS, request_timeout=30.0, max_body_bytes=1024))
    big = json.dumps({**CHAT, "messages": [{"role": "user", "content": "x" * 2000}]}).encode()
    try:
        with serving(app) as url:
            headers = {"content-type": "application/json"}
            r = httpx.post(f"{url}/v1/chat/completions", content=big, headers=headers, timeout=WAIT)
            assert "1024 bytes" in _openai_error(r, 413)["message"]
            chunked = httpx.post(f"{url}/v1/chat/completions", content=iter([big[:1000], big[1000:]]), timeout=WAIT)
            _openai_error(chunked, 413)  # no Content-Length: counted as it arrives
            assert httpx.post(f"{url}/v1/chat/completions", json=CHAT, timeout=WAIT).status_code == 200
    finally:
        sched.shutdown(WAIT)


def test_a_lone_surrogate_in_a_message_is_a_400_naming_the_field_not_a_tokenizer_500(server):
    url, _, _ = server
    body = b'{"model": "fake", "messages": [{"role": "user", "content": "two \\ud800 two"}], "max_tokens": 8}'
    r = httpx.post(f"{url}/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    err = _openai_error(r, 400)
    assert err["param"] == "messages[0].content" and "surrogate" in err["message"]
    ok(url)


def test_a_prompt_that_tokenizes_slowly_holds_no_other_request():
    """Tokenizing runs in the app's worker threads, not on the decode thread: while one request's
    prompt is still being encoded, another is admitted, decoded and answered."""
    dec, gated = gated_decoder()
    gated.gate.set()
    entered, release, threads = threading.Event(), threading.Event(), []
    encode = gated.encode_messages

    def slow_encode(messages, **kw):
        threads.append(threading.current_thread().name)
        if messages[0]["content"] == "slow":
            entered.set()
            assert release.wait(WAIT)
        return encode(messages, **kw)

    gated.encode_messages = slow_encode
    sched = RoundScheduler(dec, max_concurrent=2, max_queue=2, log=lambda line: None)
    app = make_app(sched, AppSettings(limits=LIMITS, request_timeout=30.0, retry_after=3))
    slow_body = {**CHAT, "messages": [{"role": "user", "content": "slow"}]}
    with serving(app) as url:
        answers = []
        slow = threading.Thread(
            target=lambda: answers.append(httpx.post(f"{url}/v1/chat/completions", json=slow_body, timeout=WAIT))
        )
        slow.start()
        assert entered.wait(WAIT)
        assert ok(url)["choices"][0]["finish_reason"]  # answered while the slow prompt is still encoding
        release.set()
        slow.join(WAIT)
    sched.shutdown(WAIT)
    assert answers and answers[0].status_code == 200
    assert sched._thread.name not in threads  # never on the decode thread
