"""What one linear layer costs on this CPU in each weight format, by rows (tokens) per call.

    python -m benchmarks.cpu_gemm_kernels --out benchmarks/cpu_peers/avx2_kernels.json

The default target's largest linear (gate/up: 8960 × 1536) timed with torch's CPU kernels at
2 threads for M = 1, 2, 3, 4, 5, 8 and 16 rows (decode is M = 1; verifying γ2 = 4 SD drafts is M = 5):
float32 and bfloat16 ``F.linear``, and the weight-only int8 kernel of ``--target-quantization
int8-weights`` (``_weight_int8pack_mm``, bf16 activations). Median of ``--repeats`` calls after
a warm-up, milliseconds, with the effective weight bandwidth (weight bytes / time, GB/s). vLLM's
own float32 path goes through oneDNN and is not in this table; the table says why a kernel
helps or not at a given M, the end-to-end rows are ``benchmarks/cpu_peers.py``'s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

ROWS = (1, 2, 3, 4, 5, 8, 16)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--out", default="benchmarks/cpu_peers/kernels.json")
    return p


def _median_ms(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main(args: argparse.Namespace) -> dict:
    import torch

    from lrtune.machine import machine_info
    from lrtune.quantize import quantize_rows
    from lrtune.runfiles import write_atomic

    torch.manual_seed(0)
    torch.set_num_threads(2)
    n, k = 8960, 1536
    w = torch.randn(n, k) * 0.02
    q, s = quantize_rows(w, bf16_scale=True)
    wb, sb = w.bfloat16(), s.reshape(-1).bfloat16()
    formats = {
        "float32": (lambda x: torch.nn.functional.linear(x, w), 4),
        "bfloat16": (lambda x: torch.nn.functional.linear(x.bfloat16(), wb), 2),
        "int8-weights": (lambda x: torch.ops.aten._weight_int8pack_mm(x.bfloat16(), q, sb), 1),
    }
    res = {"machine": machine_info(), "shape": [n, k], "threads": 2, "rows": {}}
    for m in ROWS:
        x = torch.randn(m, k)
        row = {}
        for name, (fn, nbytes) in formats.items():
            ms = _median_ms(lambda fn=fn: fn(x), args.repeats)
            row[name] = {"ms": ms, "weight_gb_per_s": n * k * nbytes / (ms / 1e3) / 1e9}
        res["rows"][str(m)] = row
        print(f"M={m}: " + ", ".join(f"{f} {r['ms']:.2f} ms" for f, r in row.items()), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    from benchmarks import parse

    main(parse(make_parser()))
