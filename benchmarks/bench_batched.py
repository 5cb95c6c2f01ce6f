"""Benchmark: many problems at once (batched LR/LR+SD and SD) on the default pair.

One process, engines loaded once. First the batch cost curve b(n) of the target (n
distinct prefixes, ``--curve-tokens`` tokens each, up to ``--batch-max`` rows); then each
run ``METHOD:N`` decodes the same ``--limit`` gsm_symbolic problems with N in flight
(``LookaheadDecoder.decode_many``) after an untimed prefill of every prompt, and records
wall time, problems/hour, tokens/s, rows per engine call, accuracy, finished answers and
every problem's token ids. Each run's ids are compared with the same method at N = 1
(greedy equality). Results go to ``--out``/results.json after every run; a rerun skips the
runs (and the curve) already there, so an interrupted benchmark resumes.

    python -m benchmarks.bench_batched --limit 16 --runs lr+sd:1,lr+sd:4,lr+sd:8,lr+sd:16,sd:1,sd:8 \\
        --out benchmarks/batched_decoding/many_problems
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from dataclasses import replace
from pathlib import Path


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=16, help="gsm_symbolic problems (task seed 0)")
    p.add_argument(
        "--runs",
        default="lr+sd:1,lr+sd:4,lr+sd:8,lr+sd:16,sd:1,sd:8",
        help="comma list of METHOD:N (N = problems in flight)",
    )
    p.add_argument("--gamma1", type=int, default=2)
    p.add_argument("--gamma2", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--max-step-tokens", type=int, default=96)
    p.add_argument("--verifier", default="embedding")
    p.add_argument("--kv-cache-gib", type=float, default=3.0, help="KV cache per engine (GiB)")
    p.add_argument("--max-model-len", type=int, default=1024)
    p.add_argument("--batch-max", type=int, default=32, help="measure b(n) up to this many rows")
    p.add_argument("--curve-tokens", type=int, default=16, help="tokens per row when measuring b(n)")
    p.add_argument("--backend", default="vllm")
    p.add_argument("--out", default="benchmarks/batched_decoding/many_problems")
    return p


def _digest(ids: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def _same_mixed(one, grouped, mixed) -> bool:
    """The one-call outputs equal the grouped calls' outputs row by row."""
    it = {2: iter(grouped[0].outputs), "other": iter(grouped[1].outputs)}
    regrouped = [next(it[2] if m.num_speculative_tokens == 2 else it["other"]).token_ids for m in mixed]
    return regrouped == [o.token_ids for o in one.outputs]


def main(args: argparse.Namespace) -> dict:
    from lrtune.decoding import Decoder
    from lrtune.modelconfig import ModelConfig
    from lrtune.backends.base import GenParams
    from lrtune.batchcost import measure_batch_cost
    from lrtune.eval.metrics import answer_counts
    from lrtune.decoder import DecodeConfig
    from lrtune.runfiles import write_atomic
    from lrtune.tasks import get_task

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    res = json.loads(path.read_text()) if path.is_file() else {}
    settings = {k: v for k, v in vars(args).items() if k not in ("runs", "out", "batch_max", "curve_tokens")}
    if res.get("settings", settings) != settings:
        raise SystemExit(f"{path} holds another benchmark's settings: {res['settings']}")
    res["settings"] = settings
    res.setdefault("runs", {})

    def save() -> None:
        write_atomic(path, json.dumps(res, indent=1))

    task = get_task("gsm_symbolic")
    problems = task.load(limit=args.limit, seed=0)
    base = DecodeConfig(
        method="lr+sd",
        gamma1=args.gamma1,
        gamma2=args.gamma2,
        max_new_tokens=args.max_new_tokens,
        max_step_tokens=args.max_step_tokens,
    )
    models = ModelConfig(
        backend=args.backend, verifier=args.verifier, kv_cache_gib=args.kv_cache_gib, max_model_len=args.max_model_len
    )
    t0 = time.perf_counter()
    dec = Decoder.from_configs(models, base, load_all_methods=True)
    dec.start_engines(base)
    prompts = [dec.encode(task.prompt(p)) for p in problems]
    for method in ("sd", "lr+sd", "target", "lr"):  # untimed warm-up of every call shape
        dec.decoder.decode_many(prompts[:2], replace(base, method=method, max_new_tokens=16), max_concurrent=2)
    res["load_and_warmup_s"] = time.perf_counter() - t0
    if "batch_cost_curve" not in res:
        sizes = [n for n in (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64) if n <= args.batch_max]
        curve = measure_batch_cost(dec.target, prompts, sizes, tokens=args.curve_tokens, repeats=2)
        res["batch_cost_curve"] = {str(n): v for n, v in curve.items()}
        print("b(n): " + ", ".join(f"b({n})={v:.2f}" for n, v in curve.items()), flush=True)
        save()
    if "mixed_gamma2" not in res:  # rows with different γ2: one call (per-request cap) vs grouped by γ2
        rows = prompts[:8]
        mixed = [
            GenParams(max_tokens=64, stop_at_delimiter=False, num_speculative_tokens=2 if i % 2 else args.gamma2)
            for i in range(len(rows))
        ]
        target = dec.target
        target.generate(rows, GenParams(max_tokens=1, stop_at_delimiter=False))  # untimed prompt prefill
        one, grouped_s = [], []
        for _ in range(2):  # alternate the two ways, best of two each
            one.append(target.generate(rows, mixed))
            grouped = [
                target.generate(
                    [r for r, m in zip(rows, mixed) if m.num_speculative_tokens == k],
                    [m for m in mixed if m.num_speculative_tokens == k],
                )
                for k in (2, args.gamma2)
            ]
            grouped_s.append(sum(g.seconds for g in grouped))
        best = min(one, key=lambda b: b.seconds)
        res["mixed_gamma2"] = {
            "rows": len(rows),
            "gamma2": [2, args.gamma2],
            "tokens": 64,
            "one_call_s": best.seconds,
            "grouped_calls_s": min(grouped_s),
            "same_ids": _same_mixed(best, grouped, mixed),
        }
        print(f"mixed γ2 rows: one call {best.seconds:.1f} s, grouped by γ2 {min(grouped_s):.1f} s", flush=True)
        save()
    for spec in args.runs.split(","):
        method, n = spec.split(":")
        key = f"{method}@{n}"
        if key in res["runs"]:
            continue
        cfg = replace(base, method=method)
        prefill = GenParams(max_tokens=1, stop_at_delimiter=False)  # untimed prompt prefill
        for backend in (dec.target, dec.draft) if cfg.uses_lr else (dec.target,):
            backend.generate(prompts, prefill)
        print(f"{key}: decoding {len(prompts)} problems ...", flush=True)
        outs, batch = dec.decoder.decode_many(prompts, cfg, max_concurrent=int(n), max_len=args.max_model_len)
        per = []
        for prob, (r, st) in zip(problems, outs):
            _, ok = task.check(prob, r.text)
            per.append(
                {
                    "problem": prob.id,
                    "correct": bool(ok),
                    "finish": r.finish,
                    "tokens": len(r.token_ids),
                    "ids_sha": _digest(r.token_ids),
                    "token_ids": r.token_ids,
                    "wall_s": st.wall_s,
                    "alpha1": st.alpha1,
                    "alpha2": st.alpha2,
                    "rounds": st.rounds,
                }
            )
        counts = answer_counts(per)
        run = {
            "method": method,
            "max_concurrent": int(n),
            **batch.to_dict(),
            "correct": counts["correct"],
            "finished": counts["finished"],
            "problems": per,
        }
        ref = res["runs"].get(f"{method}@1")
        if ref is not None:
            run["same_ids_as_n1"] = [p["ids_sha"] for p in per] == [p["ids_sha"] for p in ref["problems"]]
        res["runs"][key] = run
        save()
        print(
            f"{key}: {batch.wall_s:.0f} s, {batch.problems_per_hour:.1f} problems/h, {batch.tokens_per_s:.2f} tok/s, "
            f"rows/target call {batch.rows_per_call('target'):.2f}, correct {run['correct']}/{len(per)}, "
            f"finished {run['finished']}" + (f", same ids as N=1: {run['same_ids_as_n1']}" if ref else ""),
            flush=True,
        )
    for key, run in res["runs"].items():  # ids of runs made before their N = 1 reference
        ref = res["runs"].get(f"{run['method']}@1")
        if ref is not None and key != f"{run['method']}@1":
            run["same_ids_as_n1"] = [p["ids_sha"] for p in run["problems"]] == [p["ids_sha"] for p in ref["problems"]]
            run["speedup_vs_n1"] = ref["wall_s"] / run["wall_s"]
    save()
    return res


if __name__ == "__main__":
    from benchmarks import parse

    main(parse(make_parser()))
