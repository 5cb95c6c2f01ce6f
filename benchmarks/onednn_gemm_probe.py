"""vLLM-CPU's dense linear (``ops.onednn_mm``, what ``dispatch_cpu_unquantized_gemm`` picks for the
1.5B target's projections on this machine) at M = 1..8 rows, bf16, the target's shapes: the
seconds of M rows over one row, median of 9 timings of 40 calls each, and the oneDNN
implementation that runs each shape (read from ``ONEDNN_VERBOSE`` in a child process).

    [ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16] python -m benchmarks.onednn_gemm_probe \\
        --out benchmarks/engine_costs/onednn_gemm.json

``ONEDNN_MAX_CPU_ISA`` caps the instructions oneDNN may use: ``AVX512_CORE_BF16`` on an AMX
machine runs the kernels an AVX-512 machine without AMX (AMD EPYC) runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import statistics
import time
from pathlib import Path

SHAPES = {"gate_up": (2 * 8960, 1536), "down": (1536, 8960), "qkv": (2048, 1536)}  # (N, K) of the 1.5B


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="whole measurements one after another")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    import torch
    from vllm import _custom_ops as ops

    from lrtune.machine import machine_info

    torch.manual_seed(0)
    runs = [measure(ops, torch) for _ in range(a.runs)]
    result = {
        "command": "python -m benchmarks.onednn_gemm_probe",
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
        "implementation": implementations(),
        "shapes": {k: list(v) for k, v in SHAPES.items()},
        "runs": runs,
        "machine": machine_info(),
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


VERBOSE_CHILD = """
import torch
from vllm import _custom_ops as ops
for n, k in {shapes}:
    h = ops.create_onednn_mm(torch.randn(n, k, dtype=torch.bfloat16).t(), 32)
    for m in range(1, 9):
        ops.onednn_mm(h, torch.randn(m, k, dtype=torch.bfloat16), None)
"""


def implementations() -> dict[str, dict[str, str]]:
    """{shape: {M: oneDNN implementation}} of one call per M, from ``ONEDNN_VERBOSE=1`` lines
    (``...,matmul,<implementation>,...,<M>x<K>:<K>x<N>,<ms>``) of a child with this environment."""
    code = VERBOSE_CHILD.format(shapes=list(SHAPES.values()))
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "ONEDNN_VERBOSE": "1"}, capture_output=True, text=True
    ).stdout
    names = {(k, n): name for name, (n, k) in SHAPES.items()}
    found: dict[str, dict[str, str]] = {}
    for impl, m, k, n in re.findall(r",matmul,([^,]+),.*?,(\d+)x(\d+):\d+x(\d+),", out):
        found.setdefault(names.get((int(k), int(n)), f"{k}x{n}"), {})[m] = impl
    return found


def measure(ops, torch) -> dict:
    """One run: for each shape, t(1) in ms and t(M)/t(1) for M = 1..8."""
    out: dict = {}
    for name, (n, k) in SHAPES.items():
        handler = ops.create_onednn_mm(torch.randn(n, k, dtype=torch.bfloat16).t(), 32)
        secs = {}
        for m in range(1, 9):
            x = torch.randn(m, k, dtype=torch.bfloat16)
            for _ in range(30):
                ops.onednn_mm(handler, x, None)
            ts = []
            for _ in range(9):
                t = time.perf_counter()
                for _ in range(40):
                    ops.onednn_mm(handler, x, None)
                ts.append((time.perf_counter() - t) / 40)
            secs[m] = statistics.median(ts)
        out[name] = {"t1_ms": secs[1] * 1e3, "ratio": {m: secs[m] / secs[1] for m in secs}}
        print(name, f"t(1) = {secs[1] * 1e3:.3f} ms;", " ".join(f"{m}:{secs[m] / secs[1]:.2f}" for m in secs))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
