"""lrtune serve on real vLLM engines (the tiny pair) through the official ``openai`` client:
greedy answers equal the decoder's own (what ``lrtune decode`` prints) for every method,
streamed or not; ``n``/``stop``/``max_tokens`` are honoured or refused; 16 concurrent
clients with different prompts and methods each get their own answer."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("vllm")
openai = pytest.importorskip("openai")

from lrtune.serve.main import ServeOptions, build_server  # noqa: E402
from serve_helpers import WAIT, serving  # noqa: E402
from tiny_models import get_tiny_pair, sample_questions, tiny_decoder  # noqa: E402

METHODS = ("target", "sd", "lr", "lr+sd")
MAX_NEW = 40
ENGINE: dict = {}  # the served decoder's target backend and γ2 (the accounting test reads its engine)


@pytest.fixture(scope="module")
def served():
    """(client, model name, questions, reference texts per method) with the server running."""
    dec = tiny_decoder()
    qs = sample_questions(4)
    # the references first: the server's decode thread is the engines' only user afterwards
    ref = {m: [o.text for o in dec.generate(qs, method=m, max_new_tokens=MAX_NEW)] for m in METHODS}
    ref["raw"] = [dec.generate([qs[2]], chat=False, max_new_tokens=12)[0].text]  # a completion: no chat template
    ref["raw_ids"] = dec.encode(qs[2], chat=False)
    scheduler, app = build_server(dec, dec.decoder.config, ServeOptions(max_concurrent=8, target_chunk_tokens=16))
    ENGINE.update(target=dec.decoder.target, gamma2=dec.decoder.config.gamma2)
    try:
        with serving(app) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=WAIT * 5)
            yield client, client.models.list().data[0].id, qs, ref
    finally:
        scheduler.shutdown(WAIT)
        dec.close()


def chat(client, model, q, method, **kw):
    return client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": q}],
        max_tokens=MAX_NEW,
        temperature=0,
        extra_body={"method": method},
        **kw,
    )


@pytest.mark.parametrize("method", METHODS)
def test_greedy_answers_equal_the_decoders_streamed_or_not(served, method):
    client, model, qs, ref = served
    out = chat(client, model, qs[0], method)
    assert out.choices[0].message.content == ref[method][0]
    assert out.choices[0].finish_reason in ("stop", "length") and out.usage.completion_tokens <= MAX_NEW
    assert out.model_extra["lrtune"]["method"] == method
    chunks = list(chat(client, model, qs[1], method, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ref[method][1]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_method_auto_runs_the_servers_choice_and_says_so(served):
    client, model, qs, ref = served
    out = chat(client, model, qs[0], "auto")
    extra = out.model_extra["lrtune"]
    assert extra["auto"] is True and extra["method"] in ("target", "sd", "lr+sd")
    assert out.choices[0].message.content == ref["target"][0]  # the exact verifier loses nothing


def test_completions_take_text_or_token_ids_and_honour_max_tokens_and_stop(served):
    client, model, qs, ref = served
    text = client.completions.create(model=model, prompt=qs[2], max_tokens=12)
    ids = client.completions.create(model=model, prompt=ref["raw_ids"], max_tokens=12)
    streamed = client.completions.create(model=model, prompt=qs[2], max_tokens=12, stream=True)
    assert text.choices[0].text == ids.choices[0].text == ref["raw"][0] == "".join(c.choices[0].text for c in streamed)
    assert text.usage.completion_tokens <= 12 and text.usage.prompt_tokens == len(ref["raw_ids"])
    full = chat(client, model, qs[3], "lr+sd").choices[0].message.content
    stop = full.split()[3]
    cut = chat(client, model, qs[3], "lr+sd", stop=[stop])
    assert cut.choices[0].message.content == full[: full.index(stop)] and cut.choices[0].finish_reason == "stop"
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, model, qs[0], "sd", n=2)
    assert e.value.body["param"] == "n"


def test_sixteen_concurrent_clients_with_different_methods_get_their_own_answers(served):
    """... and every SD count of the target's engine lands on exactly one of their answers (a
    target or sd request stays in the engine beside the LR rounds' rows; counts are split per
    engine step), so the answers' counts (the metrics) sum to the engine's own totals."""
    client, model, qs, ref = served
    target, gamma2 = ENGINE["target"], ENGINE["gamma2"]
    before = (target.engine_sd_totals(gamma2), sd_metrics(client), target.unowned_sd(gamma2))
    asks = [(i % len(qs), METHODS[(i // len(qs)) % len(METHODS)]) for i in range(16)]
    with ThreadPoolExecutor(16) as pool:
        outs = list(pool.map(lambda a: chat(client, model, qs[a[0]], a[1]).choices[0].message.content, asks))
    assert outs == [ref[m][i] for i, m in asks]
    engine = target.engine_sd_totals(gamma2).minus(before[0])
    answers = {k: v - before[1][k] for k, v in sd_metrics(client).items()}
    unowned = target.unowned_sd(gamma2).minus(before[2])
    assert engine.drafted_tokens > 0
    assert answers["drafted"] + unowned.drafted_tokens == engine.drafted_tokens
    assert answers["accepted"] + unowned.accepted_tokens == engine.accepted_tokens


def sd_metrics(client) -> dict[str, float]:
    """The server's SD token counters (``/metrics``) summed over finished requests."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(str(client.base_url).rstrip("/").removesuffix("/v1") + "/metrics").text
    found = {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples}
    return {k: found.get(f"lrtune_sd_{k}_tokens_total", 0.0) for k in ("drafted", "accepted")}


def test_sigterm_under_load_drains_running_and_queued_requests_then_exits_0():
    """The command itself (transformers backend, a process of its own): four requests, two
    running and two queued, then SIGTERM: all four are answered in full, the process exits 0."""
    import signal
    import socket
    import subprocess
    import sys
    import threading

    import httpx

    from serve_helpers import wait_until

    pair = get_tiny_pair()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "lrtune", "serve", "--port", str(port), "--backend", "transformers"]
    cmd += ["--target", str(pair.target), "--draft", str(pair.draft), "--verifier", "exact", "--dtype", "float32"]
    cmd += ["--gamma1", "2", "--gamma2", "2", "--max-step-tokens", "24", "--max-concurrent", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"

    def health() -> dict | None:
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        try:
            return httpx.get(f"{url}/health", timeout=5).json()
        except httpx.HTTPError:
            return None

    try:
        wait_until(lambda: health() is not None, "the server to listen", timeout=300)
        qs = sample_questions(4)
        answers: list = [None] * 4

        def ask(i: int) -> None:
            body = {"model": "target", "messages": [{"role": "user", "content": qs[i]}], "max_tokens": 48}
            answers[i] = httpx.post(f"{url}/v1/chat/completions", json={**body, "method": METHODS[i]}, timeout=300)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        wait_until(lambda: (lambda h: h and h["running"] + h["queued"] == 4)(health()), "four requests in")
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(300)
        assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
        assert all(a.json()["choices"][0]["message"]["content"] for a in answers)
        assert proc.wait(120) == 0
        assert "listening on" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
