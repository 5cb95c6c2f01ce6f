"""Is b(n) < 1 the measurement or the machine? One row against n rows, interleaved and repeated.

``lrtune profile`` times one row first (best of 2), then each batch size once more (best of 2),
and divides. This probe times every size in every repeat, in a fresh random order each time, on
one engine, and pairs each b(n) = t(n)/t(1) within its repeat, so drift hits all sizes alike. It
records the tokens each row made (a row that stops early does less work) and the machine's load.

    python -m benchmarks.batch_cost_probe --engine shared --out benchmarks/engine_costs/batch_cost_probe_shared.json
    python -m benchmarks.batch_cost_probe --engine plain --out benchmarks/engine_costs/batch_cost_probe_plain.json

``--engine shared``: the profile's engine (the target's SD engine at γ2 = 4, drafter off for these
plain rows); ``plain``: a target engine without a drafter.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path


def interval(values: list[float]) -> tuple[float, float, float]:
    """(median, low, high): the median and a 95% bootstrap interval of the median."""
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(2000))
    return statistics.median(values), meds[50], meds[1949]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", choices=("shared", "plain"), default="shared")
    p.add_argument("--sizes", default="1,2,3,4,5,6,7,8")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--same-prompt", action="store_true", help="every row decodes the first prompt")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    from lrtune.backends.base import GenParams
    from lrtune.decodeconfig import DecodeConfig
    from lrtune.decoding import Decoder
    from lrtune.machine import machine_info
    from lrtune.modelconfig import ModelConfig
    from lrtune.tasks import get_task

    sizes = [int(x) for x in a.sizes.split(",")]
    shared = a.engine == "shared"
    models = ModelConfig(shared_engine=shared)
    dcfg = DecodeConfig(method="lr+sd", gamma1=max(sizes) - 1, gamma2=4) if shared else DecodeConfig(method="lr")
    dec = Decoder.from_configs(models, dcfg, progress=True)
    dec.start_engines(dcfg)
    task = get_task("gsm_symbolic")
    probs = task.load(limit=max(sizes), seed=0)
    prompts = [dec.encode(task.prompt(q)) for q in probs]
    if a.same_prompt:
        prompts = [prompts[0]] * len(prompts)
    params = GenParams(max_tokens=a.tokens, stop_at_delimiter=False, num_speculative_tokens=0)
    target = dec.target
    for n in sizes:  # warm-up: every shape once, prefixes cached
        target.generate(prompts[:n], params)
    load_before = os.getloadavg()
    rng = random.Random(1)
    runs: list[dict] = []
    for r in range(a.repeats):
        order = sizes[:]
        rng.shuffle(order)
        for n in order:
            out = target.generate(prompts[:n], params)
            made = [len(o.token_ids) for o in out.outputs]
            runs.append({"repeat": r, "n": n, "seconds": out.seconds, "tokens": made})
            print(f"repeat {r} n={n}: {out.seconds:.3f} s, tokens {made}", flush=True)
    load_after = os.getloadavg()
    one = {x["repeat"]: x["seconds"] for x in runs if x["n"] == 1}
    b = {}
    for n in sizes:
        ratios = [x["seconds"] / one[x["repeat"]] for x in runs if x["n"] == n]
        med, lo, hi = interval(ratios)
        b[n] = {"median": med, "ci95": [lo, hi], "ratios": ratios}
        print(f"b({n}) = {med:.3f} [{lo:.3f}, {hi:.3f}]")
    result = {
        "command": f"python -m benchmarks.batch_cost_probe --engine {a.engine}"
        + (" --same-prompt" if a.same_prompt else ""),
        "engine": a.engine,
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),  # set: oneDNN's kernels capped
        "same_prompt": a.same_prompt,
        "tokens": a.tokens,
        "repeats": a.repeats,
        "t1_seconds": interval(list(one.values())),
        "b": b,
        "short_rows": sum(1 for x in runs for t in x["tokens"] if t < a.tokens),
        "runs": runs,
        "load_avg_before": load_before,
        "load_avg_after": load_after,
        "machine": machine_info(),
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    dec.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
