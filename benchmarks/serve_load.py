"""Benchmark: lrtune serve under load (Poisson arrivals), beside vllm serve with the same
pair and its draft-model SD, on the same machine in the same run.

Each server runs in a process of its own, one after the other: ``lrtune serve`` (every method
loaded; each request names its ``method``), then ``vllm serve`` (the anchor: the target with
``--speculative-config`` naming the draft, γ2 the same). For every method and every arrival
rate, ``--requests`` held-out gsm_symbolic problems (task seed ``--task-seed``, never a
training seed) arrive with exponential gaps (seeded per rate, the same for every method), each
a streamed chat completion at temperature 0. Per cell: p50/p95 latency, p50/p95 time to the
first streamed text, tokens/s and problems/hour over the cell's wall time (first arrival to last
byte), answers correct and finished, and errors. Greedy answers must not depend on the load:
every method's answer to a problem is compared with the target's at the lowest rate (``sd``
and the anchor must equal it; lossy ``lr+sd`` is reported, not required). Results are written
after every cell; a rerun skips the cells already there and derives every summary from the
rows again (so it adds a field a later version computes).

    python -m benchmarks.serve_load --requests 6 --rates 0.03,0.1,0.3 --out benchmarks/serving/load_default.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="default")
    p.add_argument("--draft", default="default")
    p.add_argument("--methods", default="target,sd,lr+sd", help="lrtune serve's methods, comma list")
    p.add_argument("--anchor", default="vllm-sd", choices=("vllm-sd", "none"), help="vllm serve with draft SD")
    p.add_argument("--rates", default="0.03,0.1,0.3", help="arrival rates, requests per second")
    p.add_argument("--requests", type=int, default=6, help="requests per (method, rate) cell")
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--gamma1", type=int, default=2)
    p.add_argument("--gamma2", type=int, default=4)
    p.add_argument("--verifier", default="embedding")
    p.add_argument("--max-concurrent", type=int, default=8, help="lrtune serve's slots")
    p.add_argument(
        "--target-chunk-tokens", type=int, default=128, help="lrtune serve's tokens per round of a target/sd request"
    )
    p.add_argument("--max-model-len", type=int, default=1024)
    p.add_argument("--kv-cache-gib", type=float, default=2.0)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--task-seed", type=int, default=7)
    p.add_argument("--seed", type=int, default=0, help="arrival times")
    p.add_argument("--out", default="benchmarks/serving/load_default.json")
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 900) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit("the server did not become ready")


def start_lrtune(args, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "lrtune", "serve", "--port", str(port), "--target", args.target]
    cmd += ["--draft", args.draft, "--method", "lr+sd", "--gamma1", str(args.gamma1), "--gamma2", str(args.gamma2)]
    cmd += ["--verifier", args.verifier, "--max-concurrent", str(args.max_concurrent), "--dtype", args.dtype]
    cmd += ["--max-model-len", str(args.max_model_len), "--kv-cache-gib", str(args.kv_cache_gib)]
    cmd += ["--served-model-name", "model", "--max-new-tokens", str(args.max_tokens)]
    cmd += ["--request-timeout", "3600", "--target-chunk-tokens", str(args.target_chunk_tokens)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}/health", proc)
    return proc


def start_vllm(args, port: int) -> subprocess.Popen:
    """vllm serve with the same pair, context, KV cache and γ2 (draft-model SD)."""
    from lrtune.models import resolve_model

    target = resolve_model(args.target, "target", progress=False)
    draft = resolve_model(args.draft, "draft", progress=False)
    spec = {"model": draft, "num_speculative_tokens": args.gamma2}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", target, "--port", str(port)]
    cmd += ["--served-model-name", "model", "--max-model-len", str(args.max_model_len), "--dtype", args.dtype]
    cmd += ["--speculative-config", json.dumps(spec), "--max-num-seqs", "64"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(max(1, round(args.kv_cache_gib)))}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wait_ready(f"http://127.0.0.1:{port}/health", proc)
    return proc


async def one_request(client, url: str, body: dict, at: float, t0: float) -> dict:
    await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
    sent = time.perf_counter()
    first, parts, usage, error, finish = None, [], None, None, None
    try:
        async with client.stream("POST", url, json=body) as r:
            if r.status_code != 200:
                error = f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"
            else:
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        error = chunk["error"].get("message")
                        continue
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    for c in chunk.get("choices", []):
                        text = (c.get("delta") or {}).get("content")
                        if text:
                            first = first or time.perf_counter()
                            parts.append(text)
                        finish = c.get("finish_reason") or finish
    except Exception as e:  # a lost response is a result, not a crash of the benchmark
        error = f"{type(e).__name__}: {e}"
    end = time.perf_counter()
    return {
        "sent": sent - t0,
        "latency_s": end - sent,
        "first_text_s": None if first is None else first - sent,
        "end": end - t0,
        "text": "".join(parts),
        "tokens": (usage or {}).get("completion_tokens"),
        "finish": finish,
        "error": error,
    }


async def run_cell(url: str, prompts: list[str], gaps: list[float], extra: dict, max_tokens: int) -> list[dict]:
    import httpx

    arrivals = [sum(gaps[: i + 1]) - gaps[0] for i in range(len(gaps))]
    async with httpx.AsyncClient(timeout=None) as client:
        t0 = time.perf_counter()
        bodies = [
            {
                "model": "model",
                "messages": [{"role": "user", "content": p}],
                "max_tokens": max_tokens,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
                **extra,
            }
            for p in prompts
        ]
        return list(await asyncio.gather(*(one_request(client, url, b, a, t0) for b, a in zip(bodies, arrivals))))


def pct(xs: list[float], q: float) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarize(rows: list[dict], checks: list[bool]) -> dict:
    ok = [r for r in rows if r["error"] is None]
    wall = max(r["end"] for r in rows) - min(r["sent"] for r in rows)
    tokens = sum(r["tokens"] or 0 for r in ok)
    return {
        "requests": len(rows),
        "errors": len(rows) - len(ok),
        "wall_s": wall,
        "p50_latency_s": pct([r["latency_s"] for r in ok], 0.5),
        "p95_latency_s": pct([r["latency_s"] for r in ok], 0.95),
        "p50_first_text_s": pct([r["first_text_s"] for r in ok], 0.5),
        "p95_first_text_s": pct([r["first_text_s"] for r in ok], 0.95),
        "tokens_per_s": tokens / wall if wall > 0 else None,
        "problems_per_hour": 3600 * len(ok) / wall if wall > 0 else None,
        "correct": sum(checks),
        "finished": sum(r["finish"] == "stop" for r in ok),
        "completion_tokens": tokens,
    }


def main(args: argparse.Namespace) -> dict:
    from lrtune.machine import machine_info
    from lrtune.runfiles import write_atomic
    from lrtune.tasks import get_task

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    res = json.loads(out.read_text()) if out.is_file() else {}
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    defaults = {k: v for k, v in vars(make_parser().parse_args([])).items() if k != "out"}
    if {**defaults, **res.get("settings", settings)} != settings:  # a setting added later: its default
        raise SystemExit(f"{out} holds another benchmark's settings: {res['settings']}")
    res.update(settings=settings, machine=res.get("machine") or machine_info())
    res.setdefault("cells", {})
    task = get_task("gsm_symbolic")
    problems = task.load(limit=args.requests, seed=args.task_seed)
    prompts = [task.prompt(p) for p in problems]
    rates = [float(r) for r in args.rates.split(",")]
    servers = [("lrtune", m) for m in args.methods.split(",")]
    if args.anchor == "vllm-sd":
        servers.append(("vllm", "sd"))

    def save() -> None:
        write_atomic(out, json.dumps(res, indent=1))

    for server in ("lrtune", "vllm"):
        todo = [(s, m, r) for s, m in servers if s == server for r in rates if f"{s}/{m}@{r}" not in res["cells"]]
        if not todo:
            continue
        port = free_port()
        proc = (start_lrtune if server == "lrtune" else start_vllm)(args, port)
        try:
            for s, m, rate in todo:
                rng = random.Random(f"{args.seed}-{rate}")
                gaps = [rng.expovariate(rate) for _ in prompts]
                extra = {"method": m} if s == "lrtune" else {}
                url = f"http://127.0.0.1:{port}/v1/chat/completions"
                rows = asyncio.run(run_cell(url, prompts, gaps, extra, args.max_tokens))
                checks = [task.check(p, r["text"])[1] if r["error"] is None else False for p, r in zip(problems, rows)]
                key = f"{s}/{m}@{rate}"
                res["cells"][key] = {**summarize(rows, checks), "server": s, "method": m, "rate": rate, "rows": rows}
                c = res["cells"][key]
                print(
                    f"{key}: {c['tokens_per_s']:.2f} tok/s, p50 {c['p50_latency_s']:.1f} s, "
                    f"{c['correct']}/{c['requests']} correct, {c['errors']} errors",
                    flush=True,
                )
                save()
        finally:
            proc.terminate()
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
    for c in res["cells"].values():  # every summary from the rows, so a rerun derives new fields
        c.update(
            summarize(
                c["rows"],
                [task.check(p, r["text"])[1] if r["error"] is None else False for p, r in zip(problems, c["rows"])],
            )
        )
    reference = res["cells"].get(f"lrtune/target@{min(rates)}")
    if reference is not None:  # bf16 greedy may flip a near-tie with the batch; a mixed answer shares no start
        ref = [r["text"] for r in reference["rows"]]
        for key, c in res["cells"].items():
            c["same_as_target"] = sum(r["text"] == t for r, t in zip(c["rows"], ref))
            c["min_common_prefix_chars"] = min(
                len(os.path.commonprefix([r["text"], t])) for r, t in zip(c["rows"], ref)
            )
    res["sd_vs_anchor_tokens_per_s"] = {
        str(r): (
            res["cells"][f"lrtune/sd@{r}"]["tokens_per_s"] / res["cells"][f"vllm/sd@{r}"]["tokens_per_s"]
            if f"lrtune/sd@{r}" in res["cells"] and f"vllm/sd@{r}" in res["cells"]
            else None
        )
        for r in rates
    }
    save()
    print(json.dumps({k: v for k, v in res.items() if k not in ("cells", "machine")}, indent=1))
    return res


if __name__ == "__main__":
    main(make_parser().parse_args())
