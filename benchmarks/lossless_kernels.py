"""Which vLLM-CPU kernel gives a token other bits in a differently shaped call?

Two probes on the default target's shapes (hidden 1536, 12 query / 2 KV heads of 128,
MLP 8960, vocabulary 151,936), random inputs, the engine's dtype on this CPU:

* **matmul** (``onednn_mm``, the packed GEMM vLLM-CPU runs for every linear layer): row r of
  an M-row call against the same row computed alone, M = 1..1024;
* **attention** (``cpu_attention_with_kv_cache`` over a paged KV cache, split-KV off as lrtune
  runs it): each query token of a multi-token call (prefill, an SD verification of q tokens)
  against the same token decoded alone, by query length and position.

Writes JSON; ``benchmarks/lossless/study.yaml`` reads it.

    python -m benchmarks.lossless_kernels --out benchmarks/lossless/avx2_kernels.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SHAPES = {  # (in, out) of each linear layer of the default target
    "qkv": (1536, 2048),
    "o": (1536, 1536),
    "gate_up": (1536, 17920),
    "down": (8960, 1536),
    "head": (1536, 151936),
}
ROWS = (2, 3, 5, 8, 9, 16, 17, 32, 64, 100, 256, 1024)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--out", default="benchmarks/lossless/kernels.json")
    return p


def matmul_probe(dtype) -> dict:
    """Per linear shape: the row counts whose rows 0 and M − 1 differ from the rows alone."""
    import torch
    import vllm._custom_ops as ops

    out = {}
    gen = torch.Generator().manual_seed(0)
    for name, (k, n) in SHAPES.items():
        w = (torch.randn(n, k, generator=gen) / k**0.5).to(dtype)
        handler = ops.create_onednn_mm(w.t(), 32)
        x = torch.randn(max(ROWS), k, generator=gen).to(dtype)
        alone = {r: ops.onednn_mm(handler, x[r : r + 1].contiguous(), None)[0] for r in {0, *(m - 1 for m in ROWS)}}
        differ = []
        for m in ROWS:
            y = ops.onednn_mm(handler, x[:m].contiguous(), None)
            if not (torch.equal(y[0], alone[0]) and torch.equal(y[m - 1], alone[m - 1])):
                differ.append(m)
        out[name] = {"k": k, "n": n, "rows_probed": list(ROWS), "rows_that_differ": differ}
    return out


def attention_probe(dtype, length: int = 600, heads: int = 12, kv_heads: int = 2, head: int = 128) -> dict:
    """Query tokens whose multi-token result differs from their decode (one token) result."""
    import torch
    import vllm._custom_ops as ops

    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    block = 32
    isa = _get_attn_isa(dtype, block, head)
    gen = torch.Generator().manual_seed(0)
    blocks = -(-length // block) + 1
    cache = torch.zeros(blocks + 1, kv_heads, block, 2 * head, dtype=dtype)
    key_cache, value_cache = cache.view(blocks + 1, kv_heads, block * 2, head).chunk(2, dim=2)
    k, v = (torch.randn(length, kv_heads, head, generator=gen).to(dtype) for _ in range(2))
    q = torch.randn(length, heads, head, generator=gen).to(dtype)
    table = (torch.arange(blocks, dtype=torch.int32) + 1)[None]
    slots = torch.tensor([int(table[0, i // block]) * block + i % block for i in range(length)])
    ops.cpu_attn_reshape_and_cache(k, v, key_cache, value_cache, slots, isa)

    def run(first: int, count: int):
        query = q[first : first + count].contiguous()
        out = torch.empty_like(query)
        qsl = torch.tensor([0, count], dtype=torch.int32)
        seq = torch.tensor([first + count], dtype=torch.int32)
        meta = ops.cpu_attn_get_scheduler_metadata(1, heads, kv_heads, head, seq, dtype, qsl, True, -1, isa, False)
        ops.cpu_attention_with_kv_cache(
            query, key_cache, value_cache, out, qsl, seq, head**-0.5, True, None, -1, table, 0.0, meta, None
        )
        return out

    decoded = torch.cat([run(p, 1) for p in range(length)])
    by_query = {}
    for count in (2, 5, 8, 9, 16, 40, 96):
        differ = [
            first + i
            for first in range(0, length - count, count)
            for i, row in enumerate(run(first, count))
            if not torch.equal(row, decoded[first + i])
        ]
        by_query[count] = {"tokens_that_differ": len(differ), "first_position": min(differ) if differ else None}
    whole = run(0, length)
    differ = [p for p in range(length) if not torch.equal(whole[p], decoded[p])]
    return {
        "isa": isa,
        "length": length,
        "by_query_length": by_query,
        "prefill": {"tokens_that_differ": len(differ), "first_position": min(differ) if differ else None},
    }


def main(args: argparse.Namespace) -> dict:
    import torch

    from lrtune.machine import machine_info

    dtype = getattr(torch, args.dtype)
    res = {
        "settings": {"dtype": args.dtype},
        "machine": machine_info(),
        "threads": torch.get_num_threads(),
        "matmul": matmul_probe(dtype),
        "attention": attention_probe(dtype),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(json.dumps({k: res[k] for k in ("matmul", "attention")}, indent=1))
    return res


if __name__ == "__main__":
    from benchmarks import parse

    main(parse(make_parser()))
