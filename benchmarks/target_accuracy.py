"""What a quantized target costs in accuracy: the target as saved against its copies, paired.

    python -m benchmarks.target_accuracy --problems 30 --formats none,int8 \
        --out benchmarks/cpu_peers/avx2_accuracy.json

Decodes the same held-out gsm_symbolic problems (task seed ``--task-seed``) greedily with
lrtune's ``target`` method once per target format (``none``: as saved; ``int8``,
``int8-weights``: ``--target-quantization``'s copies), each format in its own child process, ``--concurrent``
problems in flight. Against the first format, per other format: problems with identical text,
each accuracy with answers finished (EOS within ``--max-new-tokens``), the paired difference
(other − first) with its percentile-bootstrap 95% interval over problems and the exact McNemar
p-value. A quantized target is another model: this is the measurement the docs and ``lrtune
doctor`` quote before anything defaults to it. Resumable: formats already in ``--out`` with the
same settings are kept.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--formats", default="none,int8", help="target formats, the reference first: none | int8 | int8-weights"
    )
    p.add_argument("--problems", type=int, default=30)
    p.add_argument("--task-seed", type=int, default=1, help="gsm_symbolic seed (1: held out from the demo's data)")
    p.add_argument("--max-new-tokens", type=int, default=640)
    p.add_argument("--concurrent", type=int, default=8, help="problems in flight")
    p.add_argument("--out", default="benchmarks/cpu_peers/accuracy.json")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)  # internal: one format
    return p


def child(spec: dict) -> dict:
    """Every problem decoded with the target in format ``spec["format"]`` (this process)."""
    from lrtune.decodeconfig import DecodeConfig
    from lrtune.decoding import Decoder
    from lrtune.modelconfig import ModelConfig

    from lrtune.tasks import get_task

    task = get_task("gsm_symbolic")
    probs = task.load(limit=spec["problems"], seed=spec["task_seed"])
    models = ModelConfig(verifier="never", max_model_len=1024, target_quantization=spec["format"])
    cfg = DecodeConfig(method="target", max_new_tokens=spec["max_new_tokens"])
    with Decoder.from_configs(models, cfg, progress=False) as dec:
        t0 = time.perf_counter()
        outs = dec.generate([task.prompt(p) for p in probs], max_concurrent=spec["concurrent"])
        wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "tokens_per_s": sum(len(o.token_ids) for o in outs) / wall,
        "token_ids": [list(o.token_ids) for o in outs],
        "texts": [o.text for o in outs],
        "finished": [o.finish == "eos" for o in outs],
        "answers": [list(task.check(p, o.text)) for p, o in zip(probs, outs)],
    }


def compare(ref: dict, other: dict, seed: int = 0) -> dict:
    """The paired comparison of two formats' decodes of the same problems (module docstring)."""
    from lrtune.eval.metrics import bootstrap_ci, mcnemar_p

    a = [bool(x[1]) for x in ref["answers"]]
    b = [bool(x[1]) for x in other["answers"]]
    diffs = [float(y) - float(x) for x, y in zip(a, b)]
    return {
        "problems": len(diffs),
        "identical_texts": sum(x == y for x, y in zip(ref["token_ids"], other["token_ids"])),
        "accuracy_reference": sum(a) / len(a),
        "accuracy": sum(b) / len(b),
        "finished_reference": sum(ref["finished"]),
        "finished": sum(other["finished"]),
        "difference": sum(diffs) / len(diffs),
        "difference_ci95": bootstrap_ci(diffs, seed=seed),
        "only_reference": sum(x and not y for x, y in zip(a, b)),
        "only_this": sum(y and not x for x, y in zip(a, b)),
        "mcnemar_p": mcnemar_p(sum(y and not x for x, y in zip(a, b)), sum(x and not y for x, y in zip(a, b))),
    }


def main(args: argparse.Namespace) -> dict:
    from benchmarks import run_child
    from lrtune.machine import machine_info
    from lrtune.runfiles import write_atomic

    formats = [f for f in args.formats.split(",") if f]
    if not formats or any(f not in ("none", "int8", "int8-weights") for f in formats):
        raise SystemExit(f"target_accuracy: error: --formats takes none, int8, int8-weights (got {args.formats!r})")
    settings = {k: vars(args)[k] for k in ("problems", "task_seed", "max_new_tokens")}
    out = Path(args.out)
    res = json.loads(out.read_text()) if out.is_file() else {}
    if res.get("settings") != settings:
        res = {"settings": settings, "formats": {}}
    res["machine"] = machine_info()
    out.parent.mkdir(parents=True, exist_ok=True)
    for fmt in formats:
        if len(res["formats"].get(fmt, {}).get("answers", ())) == args.problems:
            continue
        spec = {**settings, "format": fmt, "concurrent": args.concurrent}
        _, result, why = run_child("benchmarks.target_accuracy", spec)
        if result is None:
            raise SystemExit(f"target_accuracy: {fmt}: {why}")
        res["formats"][fmt] = {**result, "concurrent": args.concurrent}
        r = res["formats"][fmt]
        print(f"{fmt}: {r['tokens_per_s']:.2f} tokens/s, {sum(r['finished'])}/{args.problems} finished", flush=True)
        write_atomic(out, json.dumps(res, indent=1))
    ref = res["formats"][formats[0]]
    res["paired"] = {f: compare(ref, res["formats"][f]) for f in formats[1:]}
    for f, c in res["paired"].items():
        lo, hi = c["difference_ci95"]
        print(
            f"{f} vs {formats[0]}: accuracy {c['accuracy']:.3f} vs {c['accuracy_reference']:.3f} "
            f"(finished {c['finished']}/{c['finished_reference']} of {c['problems']}), difference "
            f"{c['difference']:+.3f} [{lo:+.3f}, {hi:+.3f}], identical texts {c['identical_texts']}",
            flush=True,
        )
    write_atomic(out, json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    from benchmarks import child_or_main

    child_or_main(make_parser(), main, child)
