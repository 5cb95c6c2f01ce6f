"""What a call adds to the engines' resident set: the demo's engines started as in
:mod:`benchmarks.memory_breakdown`, then four calls shaped like collect's on 32 rows, each with
the largest resident set while it ran (sampled every 0.2 s), the set after it and its seconds.

    [GLIBC_TUNABLES=...] python -m benchmarks.memory_phases [--max-num-batched-tokens N]
        [--no-heap-trim] --out benchmarks/memory/phases/<variant>.json

The calls: a prefill of 32 prompts of about 330 tokens (one token each), 24 tokens of SD at
γ2 4 on 32 rows, a prefill that scores its last 45 prompt tokens (prompt log-probabilities,
the target-score feature), and 4 tokens with 20 top log-probabilities on the long prompts (the
judge's read). ``--max-num-batched-tokens`` sets vLLM's step budget (chunked prefill on);
``--no-heap-trim`` turns off the trim after a call (``lrtune.peakmem.HeapTrimmer``);
``GLIBC_TUNABLES`` is read by the C library at start, so it is set by the caller (the
``lrtune`` command sets it itself, ``lrtune.entry``). GiB = 2^30 bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

ROWS = 32


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-num-batched-tokens", type=int, default=None)
    ap.add_argument("--no-heap-trim", action="store_true")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from benchmarks.memory_breakdown import measure, rss_gib
    from lrtune.backends import vllm as vllm_backend
    from lrtune.backends.base import GenParams
    from lrtune.peakmem import PeakMemory
    from lrtune.tasks import get_task

    if a.no_heap_trim:
        vllm_backend.HEAP.slack_bytes = 2**62
    args = argparse.Namespace(
        max_num_batched_tokens=a.max_num_batched_tokens,
        kv_cache_gib=None,
        max_new_tokens=0,
        max_num_seqs=None,
        methods="",
        no_share_weights=False,
        out=None,
    )
    with PeakMemory(interval=0.2) as peak:
        result, dec = measure(args, peak)
        target = dec.decoder.target
        task = get_task("gsm_symbolic")
        base = [dec.encode(task.prompt(q)) for q in task.load(ROWS, seed=3)]
        long = [b + b[-400:] * 2 for b in base]
        calls = [
            ("prefill of 32 long prompts, 1 token", long, GenParams(max_tokens=1, stop_at_delimiter=False)),
            (
                "24 tokens of SD (γ2 4) on 32 rows",
                base,
                GenParams(max_tokens=24, stop_at_delimiter=False, num_speculative_tokens=4),
            ),
            (
                "32 prefills scoring 45 prompt tokens",
                [b + [13] * 40 for b in base],
                GenParams(max_tokens=1, stop_at_delimiter=False, score_from=len(base[0]) - 5),
            ),
            (
                "4 tokens with top-20 log-probabilities on the long prompts",
                [x + [11] for x in long],
                GenParams(max_tokens=4, stop_at_delimiter=False, top_logprobs=20),
            ),
        ]
        phases = []
        for name, prompts, params in calls:
            peak.reset()
            t0 = time.perf_counter()
            target.generate(prompts, params)
            row = {
                "call": name,
                "seconds": round(time.perf_counter() - t0, 1),
                "peak_gib": round(peak.peak_gib, 3),
                "rss_after_gib": round(rss_gib(), 3),
            }
            print(json.dumps(row), flush=True)
            phases.append(row)
    result.update(
        {
            "command": "python -m benchmarks.memory_phases",
            "glibc_tunables": os.environ.get("GLIBC_TUNABLES"),
            "heap_trim": not a.no_heap_trim,
            "heap_trims": vllm_backend.HEAP.trims,
            "prompt_tokens": {"long": sum(map(len, long)), "base": sum(map(len, base))},
            "calls": phases,
            "engines_gib": result["total_gib"],
            "peak_gib": round(max(p["peak_gib"] for p in phases), 3),
        }
    )
    result["options"]["heap_trim"] = not a.no_heap_trim
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    dec.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
