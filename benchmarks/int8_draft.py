"""The W8A8 (int8) draft against the draft as saved, side by side in one run.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/int8_draft.py --problems 12 \
        --out benchmarks/int8_draft/cpu_avx512_bf16_vnni.json

Two decoders in one process, the same target, the draft as saved (A) and its W8A8 copy (B,
``--draft-quantization int8``):

1. c1 of each draft (:func:`lrtune.profiling.measure`: draft and target seconds per token at
   batch 1, plus c2 and α2 from SD runs), measured A, B, A, B (the two rounds are averaged);
2. on every problem, each method with each draft, in a balanced order per problem, every
   decode from the same prefix cache (``lrtune evaluate``'s latency mode); the target-only
   row runs on both decoders (a parity check of the two target engines).

Prints and writes (JSON): the machine with its CPU flags, c1/c2 with each draft, and per method
and draft: accuracy with answers finished within the budget, α1 (step acceptance), α2 (token
acceptance), speedup over target-only (total time) and the draft's share of the time. Resumable
rows are not kept: a run takes about 25 minutes on a 2-core AVX-512 machine at 12 problems.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--problems", type=int, default=12)
    p.add_argument("--task", default="gsm_symbolic")
    p.add_argument("--task-seed", type=int, default=1)
    p.add_argument("--methods", default="target,sd,lr+sd,score+sd/v=target_logprob")
    p.add_argument("--gamma1", type=int, default=3)
    p.add_argument("--gamma2", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--max-step-tokens", type=int, default=96)
    p.add_argument("--verifier", default="embedding", help="verifier of lr+sd (score rows name theirs)")
    p.add_argument("--kv-cache-gib", type=float, default=0.75)
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


def main(argv=None) -> int:
    from lrtune.modelconfig import ModelConfig
    from lrtune.decoder import DecodeConfig
    from lrtune.eval import metrics
    from lrtune.eval.config import EvalConfig, EvalOptions
    from lrtune.eval.loops import _controlled, _fresh_cache, _record, open_engines
    from lrtune.eval.methods import parse_methods
    from lrtune.machine import machine_info
    from lrtune.profiling import ProfileOptions, measure
    from lrtune.runfiles import log, write_atomic
    from lrtune.tasks import get_task

    a = parse_args(argv)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    task = get_task(a.task)
    problems = task.load(limit=a.problems, seed=a.task_seed)
    decode = DecodeConfig(
        method="lr+sd",
        gamma1=a.gamma1,
        gamma2=a.gamma2,
        max_new_tokens=a.max_new_tokens,
        max_step_tokens=a.max_step_tokens,
    )
    specs = parse_methods(a.methods, None, a.gamma1, a.gamma2)
    variants = {}
    for name, quant in (("as saved", "none"), ("int8", "int8")):
        models = ModelConfig(
            verifier=a.verifier, max_model_len=2048, kv_cache_gib=a.kv_cache_gib, draft_quantization=quant
        )
        cfg = EvalConfig(EvalOptions(task=a.task, methods=a.methods, warmup_tokens=32, progress=False), models, decode)
        timing = {"load_s": 0.0, "warmup_s": 0.0}
        eng, batch_cost, _ = open_engines(cfg, specs, task, problems, timing)
        variants[name] = (cfg, eng, batch_cost)
        log(f"{name}: draft {eng.dec.draft.model}")

    # 1. c1 of each draft, A B A B
    prompts = [variants["as saved"][1].dec.encode(task.prompt(p)) for p in problems[:2]]
    popts = ProfileOptions(gamma1_max=3, tokens=64, repeats=3, sd_gamma2=a.gamma2, sd_tokens=64, sd_prompts=2)
    profiles = {name: [] for name in variants}
    for _ in range(2):
        for name, (_, eng, _) in variants.items():
            profiles[name].append(measure(eng.dec.target, eng.dec.draft, prompts, popts))
    cost = {}
    for name, runs in profiles.items():
        cost[name] = {
            k: sum(r[k] for r in runs) / len(runs) for k in ("c1", "c2", "draft_s_per_token", "target_s_per_token")
        }
        cost[name]["alpha2_profile"] = sum(r["sd"]["alpha2"] for r in runs) / len(runs)
        cost[name]["runs"] = runs
        log(
            f"{name}: c1 {cost[name]['c1']:.3f}, c2 {cost[name]['c2']:.3f}, draft "
            f"{cost[name]['draft_s_per_token'] * 1000:.1f} ms/token, "
            f"target {cost[name]['target_s_per_token'] * 1000:.1f}"
        )

    # 2. every method with each draft, interleaved per problem
    records = []
    labels = [(name, s) for s in specs for name in variants]
    label_of = {(name, s.label): s.label if name == "as saved" else f"{s.label} [int8]" for name, s in labels}
    t0 = time.perf_counter()
    for i, prob in enumerate(problems):
        order = [labels[j] for j in metrics.balanced_order(len(labels), i)]
        for name, spec in order:
            cfg, eng, _ = variants[name]
            dec = eng.dec
            ids = dec.encode(task.prompt(prob))
            dcfg, kwargs = _controlled(None, cfg, spec, prob, task, None)
            _fresh_cache(dec, ids)
            res, stats = dec.decoder.decode(ids, dcfg, verifier=eng.verifier(spec), **kwargs)
            rec = _record(prob, i, spec, dcfg, cfg, task, res, stats)
            rec["method"] = label_of[(name, spec.label)]
            records.append(rec)
        log(f"problem {i + 1}/{len(problems)} done ({time.perf_counter() - t0:.0f} s)")
    names = [label_of[(n, s.label)] for n, s in labels]
    rows = metrics.summarize(records, names)
    table = {}
    for n in names:
        r = rows[n]
        st = [x["stats"] for x in records if x["method"] == n]
        wall = sum(x["wall_s"] for x in st) or 1.0
        table[n] = {
            "accuracy": r["accuracy"],
            "finished": r["finished"],
            "n": r["n"],
            "alpha1": r["alpha1"],
            "alpha2": r["alpha2"],
            "speedup_total": r["speedup_total"],
            "draft_share": sum(x["draft_s"] for x in st) / wall,
            "wall_s": wall,
        }
    data = {
        "machine": machine_info(),
        "task": a.task,
        "task_seed": a.task_seed,
        "problems": len(problems),
        "decode": dataclasses.asdict(decode),
        "verifier": a.verifier,
        "drafts": {name: eng.dec.draft.model for name, (_, eng, _) in variants.items()},
        "cost": cost,
        "methods": table,
        "records": records,
        "generated_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": " ".join(sys.argv),
    }
    write_atomic(out, json.dumps(data, indent=1))
    print(f"{'method':<34}{'acc':>6}{'fin':>7}{'α1':>7}{'α2':>7}{'speedup':>9}{'draft%':>8}")
    for n, r in table.items():
        f = lambda v, p=2: "—" if v is None else f"{v:.{p}f}"  # noqa: E731
        print(
            f"{n:<34}{f(r['accuracy']):>6}{r['finished']:>4}/{r['n']:<2}{f(r['alpha1']):>7}{f(r['alpha2']):>7}"
            f"{f(r['speedup_total']):>9}{r['draft_share'] * 100:>7.0f}%"
        )
    print(
        f"c1: as saved {cost['as saved']['c1']:.3f}, int8 {cost['int8']['c1']:.3f} "
        f"({(1 - cost['int8']['c1'] / cost['as saved']['c1']) * 100:.0f}% lower); wrote {out}"
    )
    sys.stdout.flush()
    os._exit(0)  # vLLM engines cannot be torn down cleanly in-process


if __name__ == "__main__":
    sys.exit(main())
