"""Benchmark: transformers backend decode speed and batch cost b(3), MKL vs oneDNN linears.

Loads the target twice (``HFConfig(onednn_linear=False)`` then ``True``), decodes the same
greedy tokens at batch 1 and 3 (best of two tries each), prints s/token and b(3) = t(3 rows)
/ t(1 row), checks the tokens agree, and writes JSON.

    python -m benchmarks.bench_hf_linear --out benchmarks/engine_costs/hf_linear.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="default", help="target model ('default' = the offline pair's target)")
    p.add_argument("--tokens", type=int, default=16, help="greedy tokens per row")
    p.add_argument("--out", default="benchmarks/engine_costs/hf_linear.json", help="JSON output")
    return p


def main(args: argparse.Namespace) -> dict:
    from lrtune.batchcost import batch_runs
    from lrtune.backends.hf import HFBackend, HFConfig
    from lrtune.models import resolve_model

    path = resolve_model(args.target, "target", progress=True)
    res: dict = {"target": args.target, "tokens": args.tokens}
    for name, onednn in (("mkl", False), ("onednn", True)):
        be = HFBackend(path, HFConfig(device="cpu", onednn_linear=onednn))
        prompt = be.encode_prompt(
            "A farmer has 12 cows and buys 7 more. Each cow gives 9 litres of milk "
            "a day. How many litres a day does he get?"
        )
        runs = batch_runs(be, [prompt], [3], args.tokens)
        secs = {n: r.seconds for n, r in runs.items()}
        toks = {n: [o.token_ids for o in r.outputs] for n, r in runs.items()}
        res[name] = {"s_per_token_batch1": secs[1] / args.tokens, "b3": secs[3] / secs[1], "token_ids": toks}
        print(f"{name:7s} {secs[1] / args.tokens:.3f} s/token at batch 1, b(3) = {secs[3] / secs[1]:.2f}", flush=True)
        del be
    res["same_tokens"] = res["mkl"]["token_ids"] == res["onednn"]["token_ids"]
    print("same greedy tokens:", res["same_tokens"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    from benchmarks import parse

    main(parse(make_parser()))
