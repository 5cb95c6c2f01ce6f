"""What an engine-core process of its own costs on CPU (vllm_platform rule A): in-process
engines (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, lrtune's CPU default) against one process per
engine (``1``, lrtune's GPU default and vLLM's own), on the same models, side by side.

Each mode runs in a fresh child process, alternating (in, own, in, own, ...): start the target
engine and the draft engine (the engines an LR run holds), then time greedy batch-1
generation (seconds per token, best of ``--repeats``) and short calls of one token each (the
per-call cost an LR round pays several times: drafting, one batched target pass, scoring).

    python -m benchmarks.engine_process --out benchmarks/engine_costs/engine_process_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from lrtune.backends.base import GenParams
from lrtune.backends.vllm import VLLMBackend, VLLMConfig
from lrtune.models import resolve_model
a = json.loads(sys.argv[1])
cfg = dict(max_model_len=2048, kv_cache_gib=1.0)
target = VLLMBackend(resolve_model("default", "target"), VLLMConfig(**cfg), name="target")
draft = VLLMBackend(resolve_model("default", "draft"), VLLMConfig(**cfg), name="draft")
target.start(0); draft.start(0)
start_s = time.perf_counter() - t0
prompt = target.encode_prompt("A shop sells pens at 3 dollars each. Tom buys 7 pens and pays with a 50 dollar bill. "
                              "How much change does he get? Think step by step.")
row = {"start_s": start_s, "engine_pids": [target.probes[0][0]["pid"], draft.probes[0][0]["pid"]]}
for name, b in (("target", target), ("draft", draft)):
    b.generate([prompt], GenParams(max_tokens=8, stop_at_delimiter=False))
    per_token, per_call = [], []
    for _ in range(a["repeats"]):
        out = b.generate([prompt], GenParams(max_tokens=a["tokens"], stop_at_delimiter=False))
        per_token.append(out.seconds / max(1, len(out.outputs[0].token_ids)))
        t = time.perf_counter()
        for _ in range(a["calls"]):
            b.generate([prompt], GenParams(max_tokens=1, stop_at_delimiter=False))
        per_call.append((time.perf_counter() - t) / a["calls"])
    row[name] = {"s_per_token": min(per_token), "s_per_one_token_call": min(per_call)}
print("RESULT " + json.dumps(row), flush=True)
"""


def run_child(mode: str, args) -> dict:
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": mode, "HF_HUB_OFFLINE": "1"}
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(vars(args))], capture_output=True, text=True, env=env, timeout=1800
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"child ({mode}) failed: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    row = json.loads(line[len("RESULT ") :])
    row["process_s"] = time.perf_counter() - t  # start-up, work and shut-down, as a command sees it
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2, help="children per mode (alternating)")
    p.add_argument("--tokens", type=int, default=64, help="tokens per timed generation")
    p.add_argument("--calls", type=int, default=20, help="one-token calls per timing")
    p.add_argument("--repeats", type=int, default=3, help="timings per child (best kept)")
    p.add_argument("--out", required=True, help="JSON file to write")
    args = p.parse_args(argv)
    out = Path(args.out)
    if out.exists() and out.is_dir():
        raise SystemExit(f"--out {out} is a directory")
    from lrtune.machine import machine_info

    modes = {"0": "in-process", "1": "own process"}
    rows = {name: [] for name in modes.values()}
    for r in range(args.rounds):
        for mode, name in modes.items():
            row = run_child(mode, args)
            rows[name].append(row)
            t, d = row["target"], row["draft"]
            print(
                f"round {r + 1} {name:<12} start {row['start_s']:.1f} s, target "
                f"{t['s_per_token'] * 1000:.1f} ms/token, {t['s_per_one_token_call'] * 1000:.1f} ms/call; draft "
                f"{d['s_per_token'] * 1000:.1f} ms/token, "
                f"{d['s_per_one_token_call'] * 1000:.1f} ms/call",
                flush=True,
            )

    def med(name: str, *keys: str) -> float:
        vals = []
        for row in rows[name]:
            v = row
            for k in keys:
                v = v[k]
            vals.append(v)
        return statistics.median(vals)

    summary = {}
    for keys in (
        ("start_s",),
        ("process_s",),
        ("target", "s_per_token"),
        ("target", "s_per_one_token_call"),
        ("draft", "s_per_token"),
        ("draft", "s_per_one_token_call"),
    ):
        a, b = med("in-process", *keys), med("own process", *keys)
        summary[".".join(keys)] = {"in_process": a, "own_process": b, "own_over_in": b / a}
    report = {
        "benchmark": "engine_process",
        "args": vars(args),
        "machine": machine_info(),
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "rows": rows,
        "median": summary,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    for k, v in summary.items():
        print(
            f"{k:<28} in-process {v['in_process']:.4g}  own process {v['own_process']:.4g}  "
            f"ratio {v['own_over_in']:.2f}"
        )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
