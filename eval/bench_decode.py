"""Benchmark: target-only vs SD vs LR vs LR+SD on the same problems, in one process.

    python -m eval.bench_decode --limit 10 --out results/bench_decode.json

Methods run interleaved per problem (rotating order, to cancel machine drift) after a
warm-up. Speedup is always against target-only on the same problems in the same run:
``speedup = Σ target wall / Σ method wall`` (ratio of totals) and the mean of per-problem
ratios. The speedup model's prediction uses the α and c measured in this run:

* c1 = c2 = (draft seconds per token) / (target-only seconds per token),
* b(n) = target time of a batch of n step prompts / time of one (measured here),
* LR: f_sync(γ1; α1, c1, b); SD: g(γ2; α2, c2); LR+SD: h(γ1, γ2) (lrtune.speedup).

Writes one JSON file with per-problem records and the summary, and prints a table.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from lrtune.configs import ArgumentParser, add_dataclass_args, build, load_config_file

METHODS = ("target", "sd", "lr", "lr+sd")


@dataclass
class BenchConfig:
    task: str = field(default="gsm_symbolic", metadata={"help": "task to draw problems from"})
    limit: int = field(default=10, metadata={"help": "number of problems"})
    task_seed: int = field(default=0, metadata={"help": "task generator seed"})
    methods: str = field(default=",".join(METHODS), metadata={"help": "comma list of methods"})
    target: str = field(default="default", metadata={"help": "target model"})
    draft: str = field(default="default", metadata={"help": "draft model"})
    verifier: str = field(default="embedding", metadata={"help": "verifier spec"})
    verifier_threshold: float | None = field(default=None, metadata={"help": "verifier threshold"})
    sd_method: str = field(default="draft", metadata={"help": "draft | ngram"})
    gamma1: int = field(default=3, metadata={"help": "draft steps per round"})
    gamma2: int = field(default=4, metadata={"help": "SD draft tokens"})
    max_new_tokens: int = field(default=512, metadata={"help": "token budget per problem"})
    max_step_tokens: int = field(default=96, metadata={"help": "token cap per step"})
    max_model_len: int = field(default=2048, metadata={"help": "engine context length"})
    dtype: str = field(default="auto", metadata={"help": "model dtype"})
    kv_cache_gib: float = field(default=1.0, metadata={"help": "KV cache per engine on CPU (GiB)"})
    max_num_batched_tokens: int | None = field(default=None, metadata={"help": "vLLM tokens per engine step"})
    out: str = field(default="results/bench_decode.json", metadata={"help": "JSON output path"})


def measure_batch_cost(backend, prompt_ids: list[int], sizes: list[int], tokens: int = 24) -> dict[int, float]:
    """b(n): wall time of n prompts generating ``tokens`` tokens each, relative to n = 1."""
    from lrtune.backends.base import GenParams

    params = GenParams(max_tokens=tokens, stop_at_delimiter=False)
    times = {}
    for n in [1, *sizes]:
        prefixes = [prompt_ids + [prompt_ids[-1]] * i for i in range(n)]  # distinct prompts
        backend.generate(prefixes, params)  # warm
        t = time.perf_counter()
        backend.generate(prefixes, params)
        times[n] = time.perf_counter() - t
    return {n: times[n] / times[1] for n in times}


def main(cfg: BenchConfig) -> dict:
    from lrtune.api import Decoder, ModelConfig
    from lrtune.decoder import DecodeConfig
    from lrtune.speedup import f_sync, g, h
    from lrtune.stats import DecodeStats
    from lrtune.tasks import get_task

    methods = [m.strip() for m in cfg.methods.split(",") if m.strip()]
    task = get_task(cfg.task)
    problems = task.load(limit=cfg.limit, seed=cfg.task_seed)
    models = ModelConfig(target=cfg.target, draft=cfg.draft, verifier=cfg.verifier,
                         verifier_threshold=cfg.verifier_threshold, sd_method=cfg.sd_method,
                         max_model_len=cfg.max_model_len, dtype=cfg.dtype, kv_cache_gib=cfg.kv_cache_gib,
                         max_num_batched_tokens=cfg.max_num_batched_tokens)
    base = DecodeConfig(method="lr+sd", gamma1=cfg.gamma1, gamma2=cfg.gamma2, max_new_tokens=cfg.max_new_tokens,
                        max_step_tokens=cfg.max_step_tokens)
    t_load = time.perf_counter()
    uses_draft = any(m in ("lr", "lr+sd") for m in methods) or (
        any(m in ("sd", "lr+sd") for m in methods) and cfg.sd_method == "draft")
    dec = Decoder.from_configs(models, base, load_all_methods=uses_draft)
    # Start every engine the methods use before timing anything (lazy engines would
    # bill their start-up to the first problem).
    method_cfgs = [dataclasses.replace(base, method=m) for m in methods]
    for mc in method_cfgs:
        dec.start_engines(mc)
    load_s = time.perf_counter() - t_load
    log(f"engines ready in {load_s:.1f} s")

    warm = dec.encode(task.prompt(problems[0]))
    for m in methods:  # warm-up: short decode of every method
        dec.decoder.decode(warm, dataclasses.replace(base, method=m, max_new_tokens=32))
    # b(n) of the plain target engine; not measured when no method uses that engine
    # (starting it would cost another target's worth of memory).
    plain = any(not mc.uses_sd for mc in method_cfgs)
    batch_cost = measure_batch_cost(dec.decoder.target, warm, [cfg.gamma1 + 1]) if plain else {1: 1.0}
    log(f"batch cost b(n): {batch_cost}")

    records = []
    for i, prob in enumerate(problems):
        ids = dec.encode(task.prompt(prob))
        order = methods[i % len(methods):] + methods[: i % len(methods)]
        for m in order:
            res, stats = dec.decoder.decode(ids, dataclasses.replace(base, method=m))
            pred, ok = task.check(prob, res.text)
            records.append(dict(problem=prob.id, method=m, answer=pred, expected=prob.answer, correct=ok,
                                tokens=len(res.token_ids), wall_s=stats.wall_s, finish=res.finish,
                                text=res.text, stats=stats.to_dict(), _stats=stats))
            log(f"[{i + 1}/{len(problems)}] {m:6s} {stats.wall_s:6.1f} s {len(res.token_ids):4d} tok "
                f"{'ok ' if ok else 'bad'} α1={fmt(stats.alpha1)} α2={fmt(stats.alpha2)}")

    by = {m: [r for r in records if r["method"] == m] for m in methods}
    tot = {m: DecodeStats() for m in methods}
    for m in methods:
        for r in by[m]:
            tot[m] = tot[m].merge(r["_stats"])
    summary: dict = {"config": dataclasses.asdict(cfg), "load_s": load_s, "batch_cost": batch_cost,
                     "problems": len(problems), "methods": {}}
    t_wall = sum(r["wall_s"] for r in by["target"]) if "target" in by else None
    t_tok_s = (t_wall / max(1, tot["target"].generated_tokens)) if t_wall else None
    d_tok_s = None
    lr_like = [m for m in methods if m in ("lr", "lr+sd")]
    if lr_like:
        d = tot[lr_like[0]]
        d_tok_s = d.draft_s / max(1, d.draft_step_tokens)
    c = (d_tok_s / t_tok_s) if (d_tok_s and t_tok_s) else None
    bcurve = [batch_cost.get(n, 1.0) for n in range(1, cfg.gamma1 + 2)]
    for m in methods:
        rs, s = by[m], tot[m]
        wall = sum(r["wall_s"] for r in rs)
        row = dict(
            accuracy=sum(r["correct"] for r in rs) / len(rs), wall_s=wall, tokens=s.generated_tokens,
            tokens_per_s=s.generated_tokens / wall if wall else None,
            speedup_total=(t_wall / wall) if t_wall else None,
            speedup_mean=statistics.mean(t["wall_s"] / r["wall_s"] for t, r in zip(by["target"], rs)) if t_wall else None,
            alpha1=s.alpha1, alpha1_by_pos=s.alpha1_by_pos, alpha2=s.alpha2,
            mean_accepted_steps_per_round=s.mean_accepted_steps_per_round,
            time_split=dict(draft=s.draft_s, target=s.target_s, verify=s.verify_s, other=s.other_s),
            overhead_frac=(s.other_s / s.wall_s) if s.wall_s else None,
            target_calls=s.target_calls, draft_calls=s.draft_calls, rounds=s.rounds,
        )
        pred = None
        if c is not None:
            a1, a2 = s.alpha1, s.alpha2
            if m == "lr" and a1 is not None:
                pred = f_sync(a1, c, cfg.gamma1, batch_cost=bcurve)
            elif m == "sd" and a2 is not None:
                pred = g(a2, c, cfg.gamma2)
            elif m == "lr+sd" and a1 is not None and a2 is not None:
                pred = h(cfg.gamma1, cfg.gamma2, a1, c, a2, c, batch_cost=bcurve)
        row["predicted_speedup"] = pred
        row["measured_over_predicted"] = (row["speedup_total"] / pred) if (pred and row["speedup_total"]) else None
        summary["methods"][m] = row
    summary["c_measured"] = c
    for r in records:
        del r["_stats"]
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"summary": summary, "records": records}, indent=1))
    tmp.replace(out)
    print_summary(summary)
    log(f"wrote {out}")
    return summary


def fmt(v, spec=".2f"):
    return "—" if v is None else format(v, spec)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def print_summary(summary: dict) -> None:
    print(f"c (draft/target per token) = {fmt(summary['c_measured'], '.3f')}; batch cost {summary['batch_cost']}")
    print(f"{'method':8s} {'acc':>5s} {'wall s':>8s} {'tok/s':>7s} {'speedup':>8s} {'mean':>6s} {'pred':>6s} "
          f"{'α1':>5s} {'α2':>5s} {'steps/rnd':>9s} {'draft/target/verify/other s':>30s} {'ovh':>5s}")
    for m, r in summary["methods"].items():
        ts = r["time_split"]
        print(f"{m:8s} {r['accuracy']:5.2f} {r['wall_s']:8.1f} {fmt(r['tokens_per_s']):>7s} {fmt(r['speedup_total']):>8s} "
              f"{fmt(r['speedup_mean']):>6s} {fmt(r['predicted_speedup']):>6s} {fmt(r['alpha1']):>5s} {fmt(r['alpha2']):>5s} "
              f"{fmt(r['mean_accepted_steps_per_round']):>9s} "
              f"{ts['draft']:7.1f}/{ts['target']:7.1f}/{ts['verify']:5.1f}/{ts['other']:5.1f} {fmt(r['overhead_frac']):>5s}")


def make_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m eval.bench_decode", description=__doc__.splitlines()[0])
    p.add_argument("--config", help="YAML file with any of these options")
    add_dataclass_args(p, BenchConfig)
    return p


if __name__ == "__main__":
    args = make_parser().parse_args()
    from lrtune.errors import LrtuneError

    try:
        main(build(BenchConfig, args, load_config_file(args.config)))
    except LrtuneError as e:
        print(f"bench_decode: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
