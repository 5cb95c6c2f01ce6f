"""Where a run's resident memory goes: each part of an evaluate run built in turn, in one
process, with the resident set after each.

    python -m benchmarks.memory_breakdown [--max-num-batched-tokens N] [--kv-cache-gib G]
        [--max-num-seqs N] [--methods target,sd,lr+sd] [--no-share-weights]
        [--out benchmarks/memory/breakdown.json]

The parts are those of the demo's evaluate (default pair, vLLM on the CPU, shared SD
engine): the target's SD engine (target + its draft copy, γ2 = 4), the draft's own engine,
the embedding verifier, then one decode per method. Each part's growth is set beside what
its weights and KV cache account for, so the rest (packed GEMM copies, activation and
sampler buffers sized by ``max_num_batched_tokens``, allocator slack) shows. RSS is the
whole process tree's (:mod:`lrtune.peakmem`), and each part also records the largest sample
taken while it ran (every 0.2 s) and, from this process's own samples (every 0.1 s,
``/proc/self/status``), how much of its largest resident set was file-backed
(``peak_file_gib``: pages of a checkpoint mapped while it loads) and anonymous
(``peak_anon_gib``); GiB = 2^30 bytes.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import threading
import time
from pathlib import Path

GIB = 2**30


def own_status() -> dict[str, float]:
    """This process's VmRSS, RssAnon and RssFile in GiB (Linux; empty elsewhere)."""
    from lrtune.peakmem import status_bytes

    return {k: v / GIB for k, v in status_bytes("self", ("VmRSS", "RssAnon", "RssFile")).items()}


class SplitPeak:
    """The sample with the largest own VmRSS since the last :meth:`take`, read every
    ``interval`` seconds by a daemon thread, with its anonymous and file-backed parts."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval, self.best, self._stop = interval, {}, threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            now = own_status()
            if now.get("VmRSS", 0) > self.best.get("VmRSS", -1):
                self.best = now

    def take(self) -> dict[str, float]:
        best, self.best = self.best, {}
        return best

    def stop(self) -> None:
        self._stop.set()


def rss_gib() -> float:
    from lrtune.peakmem import tree_rss_bytes

    gc.collect()
    return tree_rss_bytes() / GIB


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-num-batched-tokens", type=int, default=None)
    ap.add_argument("--kv-cache-gib", type=float, default=None, help="KV cache per engine (default: lrtune's sizing)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--max-num-seqs", type=int, default=None, help="vLLM max_num_seqs (default: lrtune's, 64 on CPU)")
    ap.add_argument("--methods", default="target,sd,lr+sd", help="decodes after the engines start ('' for none)")
    ap.add_argument("--no-share-weights", action="store_true", help="each engine loads its own weights")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from lrtune.peakmem import PeakMemory

    with PeakMemory(interval=0.2) as peak:  # the run's peak, start-up transients included
        result, dec = measure(args, peak)
    result["peak_gib"] = round(max(p["peak_gib"] for p in result["parts"]), 3)
    print(f"peak {result['peak_gib']} GiB", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    dec.close()
    return 0


def measure(args: argparse.Namespace, peak) -> tuple[dict, object]:
    """The parts of the module docstring, each with the resident set after it and the peak
    while it ran (``peak``: a running :class:`~lrtune.peakmem.PeakMemory`); and the decoder
    (still open)."""
    from lrtune import Decoder
    from lrtune.machine import machine_info
    from lrtune.memory import weight_bytes
    from lrtune.models import resolve_model
    from lrtune.tasks import get_task

    parts: list[dict] = []
    last = rss_gib()
    split = SplitPeak()

    def mark(name: str, accounted_gib: float | None = None, **extra) -> None:
        nonlocal last
        now = rss_gib()
        peak_gib = max(peak.peak_gib, now)  # the peak since the last part
        peak.reset()
        row = {
            "part": name,
            "rss_gib": round(now, 3),
            "growth_gib": round(now - last, 3),
            "peak_gib": round(peak_gib, 3),
        }
        at_peak = split.take()
        if "RssFile" in at_peak:
            row["peak_anon_gib"] = round(at_peak.get("RssAnon", 0.0), 3)
            row["peak_file_gib"] = round(at_peak["RssFile"], 3)
        row.update(extra)
        if accounted_gib is not None:
            row["accounted_gib"] = round(accounted_gib, 3)
            row["unaccounted_gib"] = round(now - last - accounted_gib, 3)
        parts.append(row)
        print(json.dumps(row), flush=True)
        last = now

    import torch  # noqa: F401 - counted in the start-up row
    import vllm  # noqa: F401

    mark("python + torch + vllm imported")
    target, draft = resolve_model("default", "target"), resolve_model("default", "draft")
    wt, wd = weight_bytes(target) / GIB, weight_bytes(draft) / GIB
    kwargs = {} if args.kv_cache_gib is None else {"kv_cache_gib": args.kv_cache_gib}
    if args.max_num_seqs:
        kwargs["max_num_seqs"] = args.max_num_seqs
    if args.no_share_weights:
        kwargs["share_weights"] = False
    if args.max_num_batched_tokens:
        kwargs["max_num_batched_tokens"] = args.max_num_batched_tokens
    t0 = time.perf_counter()
    dec = Decoder.from_pretrained(
        target, draft, method="lr+sd", verifier="embedding", gamma2=4, progress=False, max_model_len=4096, **kwargs
    )
    mark("Decoder built (engines start on first use)", seconds=round(time.perf_counter() - t0, 1))
    lm = dec.decoder
    t0 = time.perf_counter()
    lm.target.start(4)
    kv_sd, kv_draft = lm.target.config.kv_cache_gib, lm.draft.config.kv_cache_gib
    took = round(time.perf_counter() - t0, 1)
    mark("target SD engine (target + draft copy, γ2 4)", wt + wd + kv_sd, seconds=took, kv_cache_gib=kv_sd)
    t0 = time.perf_counter()
    lm.draft.start(0)
    shared = bool(lm.draft.probes[0][0].get("shared_weights", {}).get("model"))  # took the SD drafter's weights
    took = round(time.perf_counter() - t0, 1)
    mark("draft engine", (0 if shared else wd) + kv_draft, seconds=took, kv_cache_gib=kv_draft, shared_weights=shared)
    task = get_task("gsm_symbolic")
    prompt = task.prompt(task.load(1, seed=1)[0])
    for method in [m for m in args.methods.split(",") if m]:
        t0 = time.perf_counter()
        dec.generate([prompt], method=method, max_new_tokens=args.max_new_tokens)
        mark(f"after a decode with {method}", seconds=round(time.perf_counter() - t0, 1))
    result = {
        "machine": machine_info(),
        "options": {
            "kv_cache_gib": args.kv_cache_gib,
            "max_num_batched_tokens": args.max_num_batched_tokens,
            "max_num_seqs": args.max_num_seqs,
            "share_weights": not args.no_share_weights,
        },
        "weights_gib": {"target": round(wt, 3), "draft": round(wd, 3)},
        "parts": parts,
        "total_gib": round(last, 3),
    }
    split.stop()
    return result, dec


if __name__ == "__main__":
    raise SystemExit(main())
